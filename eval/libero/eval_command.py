"""`oxygen-gym eval libero ...` (closed-loop LIBERO evaluation) and `oxygen-gym eval merge ...` (combine shards).

Examples:
  oxygen-gym eval libero --suite all --episodes 50 --seeds 7,8,9 --checkpoint PATH --device cuda --out runs/x
  oxygen-gym eval libero --suite spatial --tasks 0,1 --episodes 2 --max-steps 10 --out runs/smoke
  oxygen-gym eval libero --suite spatial --tasks 0 --fresh-scenes 1000-1019 --checkpoint PATH --out runs/val
  oxygen-gym eval libero ... --shard 0/4 --out runs/x/shard0          # one of four machines / SLURM array tasks
  oxygen-gym eval merge runs/x/shard0 runs/x/shard1 runs/x/shard2 runs/x/shard3 --out runs/x/all
  oxygen-gym eval libero ... --ray                                   # local Ray, one policy per worker
  oxygen-gym eval libero ... --ray auto --gpus-per-worker 1           # an existing Ray cluster
  oxygen-gym eval aloha --episodes 10 --out runs/aloha                # ALOHA (gym-aloha), see eval aloha --help
  oxygen-gym eval droid --tasks lift --episodes 10 --out runs/droid   # DROID-style Panda (robosuite)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oxygen_gym.policies.action_noise import noise_scale_arg
from oxygen_gym.policies.checkpoints.names import checkpoint_arg
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

from .eval_config import (
    CONVENTION_FIELDS,
    DTYPES,
    EXECUTIONS,
    HANDOVERS,
    MODES,
    PROTOCOLS,
    EvalConfig,
    parse_decode_budget,
    parse_language_task,
    parse_video,
)
from .episode_set import (check_episodes, parse_fresh_scenes, parse_init_states, parse_seeds, parse_shard, parse_suites,
                          parse_tasks)
from .results import ResultsError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`libero` and `merge` as the targets of one parser (the command line gives each its own parser instead,
    oxygen_gym/cli.py NESTED, so `oxygen-gym eval merge --help` lists merge's flags only)."""
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    add_libero_arguments(sub.add_parser("libero", help="run an evaluation"))
    add_merge_arguments(sub.add_parser("merge", help="combine the --out folders of shards into --out"))


def add_merge_arguments(parser: argparse.ArgumentParser) -> None:
    """`oxygen-gym eval merge FOLDER... --out DIR`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "Example:\n  oxygen-gym eval merge runs/x/shard0 runs/x/shard1 runs/x/shard2 runs/x/shard3 --out runs/x/all\n"
    parser.add_argument("inputs", nargs="*", metavar="FOLDER",
                        help="the results folders to combine: shards of one evaluation (of any sim), or runs of it")
    parser.add_argument("--out", default=None, help="the merged folder, new or empty (required)")


def add_libero_arguments(parser: argparse.ArgumentParser) -> None:
    """`oxygen-gym eval libero`'s flags."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2]
    g = parser.add_argument_group("what to evaluate")
    g.add_argument("--suite", nargs="+", default=["libero_spatial"],
                   help="libero_spatial, libero_object, libero_goal, libero_10 (or spatial, object, goal, 10), "
                        "several, or all (default: libero_spatial)")
    g.add_argument("--tasks", default=None, help="task ids per suite, e.g. 0,1 or 0-4 (default: all 10)")
    g.add_argument("--episodes", type=int, default=None,
                   help="episodes per task; episode i starts from init state i (default: the protocol's 50)")
    g.add_argument("--init-states", default=None, metavar="RANGE",
                   help="run these init states (= episode indices), e.g. 30-49 for ones a trained model never saw; "
                        "overrides --episodes")
    g.add_argument("--fresh-scenes", default=None, metavar="RANGE",
                   help="run fresh scenes drawn from LIBERO's placement initializer instead of official init states, "
                        "scene k seeded exactly as `oxygen-gym collect --fresh-scenes` seeds scene k, e.g. 1000-1019 "
                        "as a validation set beside training scenes 0-199 (the 50 official init states stay the test "
                        "set); not with --init-states / --episodes")
    g.add_argument("--seeds", default=None,
                   help="one or more seeds, e.g. 7,8,9; several give a 95%% Student-t CI over seed-level success "
                        "rates (default: the protocol's seed, 7 for openpi, 1000 for lerobot)")
    g = add_policy_arguments(parser)
    g.add_argument("--ensemble", type=float, default=None, metavar="DECAY",
                   help="execute the temporal ensemble of the overlapping chunks (ACT): each action the weighted mean "
                        "of every prediction made for its step, weights exp(-DECAY * i), i = 0 the oldest (ACT: "
                        "0.01; < 0 favours newer); default off")
    g = parser.add_argument_group("protocol and outputs")
    g.add_argument("--protocol", choices=PROTOCOLS, default="openpi",
                   help="openpi or lerobot presets: replan interval, step limits, render size, seed (default openpi)")
    g.add_argument("--fast-reset", action="store_true",
                   help="LIBERO soft reset (~10x faster per episode); the references hard-reset, and soft resets are "
                        "not bit-identical, so results are recorded as fast-reset ones")
    g.add_argument("--rebuild-sim", action="store_true",
                   help="rebuild LIBERO's simulation every episode, as its hard reset does (the default reset gives "
                        "the same episodes byte for byte without the rebuild, several times faster; for checks)")
    g.add_argument("--render-every-step", action="store_true",
                   help="render the cameras at every control step, not only the steps the policy or the video use "
                        "(the same images, slower; for timing comparisons)")
    add_output_arguments(g)
    ConventionOverrides.add_arguments(parser, vlm_config=False)
    g = parser.add_argument_group("live control (the world moves while the policy thinks; docs/live-control.md)")
    g.add_argument("--live", default=None, metavar="LATENCY",
                   help="measured (each call's wall time), fixed:MS, or model:FILE (stage costs JSON, or a bench "
                        "results.json@POINT): ceil(latency / control dt) steps pass per call (default: off, the sim "
                        "waits for the policy)")
    g.add_argument("--execution", default=None, metavar="|".join(EXECUTIONS),
                   help="with --live: sync (blocking: hold while thinking, default), async (execute the queue while "
                        "the next chunk is computed), rtc (async with real-time chunking)")
    g.add_argument("--handover", default=None, metavar="|".join(HANDOVERS),
                   help="with --execution async: switch (default) or blend (0.7 new + 0.3 old over the overlap)")
    g.add_argument("--queue-threshold", type=int, default=None, metavar="N",
                   help="async/rtc: request the next chunk when N actions are left (default: horizon - replan)")
    add_scale_out_arguments(parser)


def add_policy_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The policy flags every sim's eval takes (`eval libero`, `eval aloha`, `eval droid`); returns the group."""
    g = parser.add_argument_group("policy")
    g.add_argument("--checkpoint", default="tiny", type=checkpoint_arg,
                   help="the shipped trained model (libero-spatial), a built-in model with random weights (tiny, "
                        "small, pi05, xr0-tiny, ...; `oxygen-gym inspect NAME`), or a checkpoint folder / hub id "
                        "(pi0.5 in our, lerobot's or openpi's layout, XR0, StarVLA) (default: tiny)")
    g.add_argument("--mode", choices=MODES, default="oxygen", help="execution mode (default: oxygen)")
    g.add_argument("--decode-budget", default="5", help="k, language tokens per request per frame, or auto (default 5)")
    g.add_argument("--target-action-hz", type=float, default=None,
                   help="with --decode-budget auto: the action rate to hold")
    g.add_argument("--task", action="append", default=[], metavar="NAME[=PROMPT]", dest="language_task",
                   help="a language task run alongside the actions; repeatable (named: narrate, plan, memory); "
                        "default: the tasks the checkpoint declares (config.json language_tasks), narration scored "
                        "against the sim's subtask labels; none for a built-in model")
    g.add_argument("--no-language", action="store_true",
                   help="actions only: not even the checkpoint's declared language tasks")
    g.add_argument("--threads", type=int, default=None,
                   help="torch threads per eval process (default: sized to the cores each process owns beside its "
                        "simulator, engine/placement.py; recorded in every episode record)")
    g.add_argument("--max-new-tokens", type=int, default=30,
                   help="token cap per --task request (default 30; a declared task keeps its own)")
    g.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                   help="scale of the action heads' starting noise (1 = the reference sampler, 0 = deterministic; "
                        "policies/action_noise.py), or one per action dim, comma separated (0,0,0,0,0,0,1: a "
                        "deterministic arm, a sampled gripper); default: the checkpoint's config.json noise_scale, "
                        "else 1")
    g.add_argument("--replan", type=int, default=None, metavar="N",
                   help="actions of each chunk executed per policy call (openpi's replan_steps; default: the "
                        "checkpoint's declared replan_steps, else the protocol's: 5 for openpi, the whole chunk for "
                        "lerobot, 10 for aloha, 8 for droid)")
    g.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    g.add_argument("--dtype", default=None, choices=DTYPES,
                   help="model dtype (default: float32 on CPU, bfloat16 on CUDA)")
    return g


def add_output_arguments(g: argparse._ArgumentGroup) -> None:
    """Step cap, rendering, videos and the results folder: the same for every sim."""
    g.add_argument("--max-steps", type=int, default=None, help="cap on policy steps per episode (smoke runs)")
    g.add_argument("--fast-render", action="store_true",
                   help="render without antialiasing (~2x faster on CPU; images differ slightly from the references)")
    g.add_argument("--save-rollouts", default="none", choices=("none", "hdf5", "lerobot"),
                   help="keep every episode as training data in OUT/rollouts (LIBERO HDF5; lerobot: also a "
                        "LeRobotDataset in OUT/rollouts/lerobot when the run ends; train/collect/rollouts.py)")
    g.add_argument("--video", default="none",
                   help="all, failures, none, or N = first N episodes of each task (default none)")
    g.add_argument("--out", default=None,
                   help="results folder (episodes.jsonl, summary.md, plots); rerunning with the same one resumes "
                        "(default runs/eval)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_scale_out_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("scale-out")
    g.add_argument("--shard", default=None, metavar="I/N",
                   help="run only shard I of N of the episode set (deterministic; for SLURM arrays, several machines)")
    g.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run episodes on Ray workers; no ADDRESS starts a local Ray, or give auto / ray://host:10001")
    g.add_argument("--workers", type=int, default=None, help="Ray workers (default: as many as resources allow)")
    g.add_argument("--gpus-per-worker", type=float, default=None,
                   help="GPUs per Ray worker (default 1 with --device cuda, else 0)")
    g.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs per Ray worker (default 1)")


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    """Turn CLI arguments into an EvalConfig; ValueError naming the flag for anything unusable."""
    from oxygen_gym.envs.protocols import get_libero_protocol

    protocol = get_libero_protocol(args.protocol)
    seeds = parse_seeds(args.seeds) if args.seeds is not None else [protocol.seed]
    episodes = check_episodes(args.episodes if args.episodes is not None else protocol.episodes_per_task)
    fresh_scenes = parse_fresh_scenes(args.fresh_scenes)
    if fresh_scenes is not None:
        given = [flag for flag, value in (("--init-states", args.init_states), ("--episodes", args.episodes))
                 if value is not None]
        if given:
            raise ValueError(f"--fresh-scenes with {' and '.join(given)}: run fresh scenes or official init states, "
                             f"not both (drop {' / '.join(given)} or --fresh-scenes)")
    return EvalConfig(
        **common_fields(args), protocol=args.protocol, suites=parse_suites(args.suite), tasks=parse_tasks(args.tasks),
        episodes=episodes, init_states=parse_init_states(args.init_states), fresh_scenes=fresh_scenes, seeds=seeds,
        render_every_step=args.render_every_step, fast_reset=args.fast_reset, rebuild_sim=args.rebuild_sim,
        live=args.live,
        execution=args.execution, handover=args.handover, queue_threshold=args.queue_threshold,
        ensemble=args.ensemble,
        save_rollouts=args.save_rollouts,
    )


def language_tasks_from_args(args: argparse.Namespace) -> list[dict]:
    """`--task` as given; else, unless --no-language, the tasks the checkpoint declares (what
    `MultiTaskPolicy.declared_tasks` holds), so a trained model's narration is scored without asking."""
    from .eval_config import declared_language_tasks
    from .narration import trained_language_tasks

    if args.language_task and args.no_language:
        raise ValueError("--task and --no-language: give one (language tasks, or actions only)")
    if args.no_language:
        return []
    if not args.language_task:
        return declared_language_tasks(args.checkpoint)
    trained = trained_language_tasks(args.checkpoint)
    return [parse_language_task(t, args.max_new_tokens, trained=trained) for t in args.language_task]


def _threads(threads: int | None) -> int | None:
    if threads is not None and threads < 1:
        raise ValueError(f"--threads: {threads}; expected >= 1")
    return threads


def common_fields(args: argparse.Namespace) -> dict:
    """The EvalConfig fields every sim's eval reads from its flags (policy, outputs, scale-out)."""
    if args.ray is None and (args.workers is not None or args.gpus_per_worker is not None):
        raise ValueError("--workers / --gpus-per-worker need --ray")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers: {args.workers}; expected >= 1")
    return dict(
        checkpoint=str(args.checkpoint), mode=args.mode, decode_budget=parse_decode_budget(args.decode_budget),
        target_action_hz=args.target_action_hz, language_tasks=language_tasks_from_args(args),
        max_steps=args.max_steps, fast_render=args.fast_render, dtype=args.dtype, shard=parse_shard(args.shard),
        device=args.device, video=parse_video(args.video), out=str(args.out or "runs/eval"),
        noise_scale=args.noise_scale, replan=args.replan, threads=_threads(args.threads),
        **ConventionOverrides.from_args(args).as_kwargs(CONVENTION_FIELDS),
    )


def _merge(args: argparse.Namespace) -> int:
    from .merge import merge_folders
    from .summary import SUMMARY_MD

    if not args.out:
        raise ValueError("eval merge: --out (the merged folder) is required")
    if not args.inputs:
        raise ValueError("eval merge: give the results folders to merge, e.g. runs/x/shard0 runs/x/shard1")
    summary = merge_folders(args.inputs, args.out)
    ep = summary["episodes"]
    missing = f"; {ep['expected'] - ep['recorded']} of {ep['expected']} episodes still missing" \
        if ep.get("expected") and ep["expected"] > ep["recorded"] else ""
    print(f"merged {len(args.inputs)} folders: {ep['recorded']} episodes{missing}")
    print((Path(args.out) / SUMMARY_MD).read_text())
    print_files(Path(args.out))
    return 0


def print_files(out: Path) -> None:
    """Where a run's results, summary and plots are."""
    from ..eval_plots import PLOT_FILES
    from .summary import SUMMARY_MD

    files = [out / "episodes.jsonl", out / SUMMARY_MD] + [out / p for p in PLOT_FILES if (out / p).exists()]
    print("results: " + "\n         ".join(str(f.resolve()) for f in files))


def run(args: argparse.Namespace) -> int:
    """`add_arguments`' parser: run its target."""
    return run_merge(args) if args.target == "merge" else run_libero(args)


def run_merge(args: argparse.Namespace) -> int:
    try:
        return _merge(args)
    except (ValueError, ResultsError) as e:  # bad input: one clear line, no traceback
        print(f"oxygen-gym eval: error: {e}", file=sys.stderr)
        return 2


def run_libero(args: argparse.Namespace) -> int:
    return execute(lambda: config_from_args(args), args)


def execute(make_config, args: argparse.Namespace) -> int:
    """Build the config (`make_config()`), run or resume it here or on Ray, print the summary and where the files
    are: the body of every sim's `oxygen-gym eval`. Exit 2 on bad input, 1 when no episode ran ok, 130 on Ctrl-C."""
    interrupted = False
    try:
        config = make_config()
        from .eval_loop import local_executor, run_eval

        executor = local_executor
        if args.ray is not None:
            from .ray_executor import ray_executor

            executor = ray_executor(address=None if args.ray == "local" else args.ray, workers=args.workers,
                                    gpus_per_worker=args.gpus_per_worker, cpus_per_worker=args.cpus_per_worker)
        summary = run_eval(config, executor, progress=not args.no_progress,
                           log=lambda line: print(line, file=sys.stderr, flush=True))
        from oxygen_gym.train.collect.rollouts import finish_rollouts

        finish_rollouts(config.out, getattr(config, "save_rollouts", "none"))  # --save-rollouts lerobot
    except (ValueError, ResultsError) as e:  # bad input: one clear line, no traceback
        print(f"oxygen-gym eval: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        interrupted = True
    if interrupted:  # outside the except block, so the interrupted frames are released first
        from .worker import quiet_interrupt_exit

        quiet_interrupt_exit("\ninterrupted; finished episodes are saved, rerun the same command to resume")
        return 130
    from .summary import SUMMARY_MD

    out = Path(config.out)
    print((out / SUMMARY_MD).read_text())
    print_files(out)
    ep = summary["episodes"]
    return 1 if ep["recorded"] and ep["ok"] == 0 else 0
