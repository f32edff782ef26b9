"""`oxygen-gym demo`: one closed-loop LIBERO episode (libero_spatial task 0, init state 0) with a narration task,
on CPU, capped so it ends in about two minutes; writes the annotated video, `episode.json` and `report.md`.
`--env aloha` / `--env droid` run one episode of those sims instead (the eval's plug-ins, eval/sims.py).

On LIBERO it runs the shipped trained model (libero-spatial) when its weights are installed. A built-in model
(tiny, small, ...) has random weights: its actions and its narration are noise, and the demo shows only the whole
loop (simulator -> policy -> actions + language -> video) and its speed; pass `--checkpoint PATH` for a real pi0.5.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from oxygen_gym.policies.checkpoints.names import checkpoint_arg, random_weight_model_names
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

from .libero.eval_config import CONVENTION_FIELDS, MODES, PROTOCOLS, EvalConfig, parse_decode_budget, parse_language_task
from .libero.episode_set import INIT_STATES_PER_TASK, TASKS_PER_SUITE, EpisodeSpec, parse_suites
from .sims import SIM_NAMES

# Policy steps (after the protocol's settle steps) the demo runs by default with a built-in model. Measured on the
# 2-core CPU this was sized on: a LIBERO step (physics + two cameras rendered in software) takes 0.26-0.38 s, the tiny
# model answers a 5-step chunk in ~0.06-0.09 s, start-up and the sim build ~20 s; the full 220 steps took 108 s end to
# end, so 200 take a little under two minutes. A real checkpoint gets the protocol's full limit (220 for spatial).
DEMO_MAX_STEPS = 200

# The shipped trained model (oxygen_gym/model/trained.py) and the init state the demo shows it on. The rule: official
# init state 0. The model trained on fresh scenes only, so every official init state is held out; none was chosen
# because the model solves it (docs/libero-spatial.md).
DEFAULT_TRAINED = "libero-spatial"
DEMO_INIT_STATE = 0

RANDOM_WEIGHTS_NOTE = (
    "The built-in model '{name}' has RANDOM weights: its actions and its narration are noise, so the robot will not "
    "solve the task. It shows the loop and its speed. For a real policy pass --checkpoint PATH (a pi0.5 checkpoint "
    "folder or hub id in lerobot's safetensors layout, e.g. a converted openpi pi05_libero)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", choices=SIM_NAMES, default="libero",
                        help="simulator: libero (default), aloha (gym-aloha bimanual) or droid (robosuite Panda, "
                             "DROID-style); aloha and droid run the built-in tiny model unless --checkpoint says")
    parser.add_argument("--checkpoint", default=None, type=checkpoint_arg,
                        help=f"the shipped trained model ({DEFAULT_TRAINED}, the default for libero), a built-in "
                             "model with random weights (tiny, small, pi05, ...) or a checkpoint folder / hub id")
    parser.add_argument("--suite", default=None, help="LIBERO suite (default libero_spatial)")
    parser.add_argument("--task-id", type=int, default=0,
                        help="task: LIBERO 0..9 of the suite; aloha 0 transfer_cube, 1 insertion; droid 0 lift, "
                             "1 stack, 2 pick_place_can (default 0)")
    parser.add_argument("--init-state", type=int, default=None,
                        help=f"LIBERO init state, 0..49 (default {DEMO_INIT_STATE} for {DEFAULT_TRAINED}, held out of "
                             "its data; else 0); aloha / droid: the placement index (default 0)"),
    parser.add_argument("--seed", type=int, default=None, help="episode seed (default: the protocol's, 7 for openpi)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default=None,
                        help="LIBERO: openpi or lerobot (default openpi); aloha and droid have one each")
    parser.add_argument("--max-steps", type=int, default=None,
                        help=f"cap on policy steps (default {DEMO_MAX_STEPS} with a built-in model, about two "
                             f"minutes on a 2-core CPU; the protocol's full limit with a checkpoint); 0 = no cap")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--mode", choices=MODES, default="oxygen", help="execution mode (default oxygen)")
    parser.add_argument("--decode-budget", default="5", help="language tokens per request per frame, or auto")
    parser.add_argument("--target-action-hz", type=float, default=None, help="with --decode-budget auto")
    parser.add_argument("--task", action="append", default=None, metavar="NAME[=PROMPT]", dest="language_task",
                        help="language task(s) to run with the actions (default: narrate); repeatable")
    parser.add_argument("--no-language", action="store_true", help="actions only, no language task")
    parser.add_argument("--max-new-tokens", type=int, default=30, help="token cap per language request (default 30)")
    parser.add_argument("--fast-render", action="store_true", default=None,
                        help="render without antialiasing (~2x faster on CPU; the default for a trained model whose "
                             "demonstrations were rendered so)")
    parser.add_argument("--fast-reset", action="store_true", default=None,
                        help="LIBERO soft reset (faster; not the references'; the default for a trained model)")
    ConventionOverrides.add_arguments(parser, vlm_config=False)
    parser.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")


def _trained_defaults(args: argparse.Namespace) -> dict:
    """Fill the defaults that depend on the checkpoint; returns its trained language tasks (name -> task)."""
    from oxygen_gym.model.trained import trained_model_dir

    from .libero.narration import data_collections, training_info, trained_language_tasks

    if args.checkpoint is None:
        libero = args.env == "libero"
        args.checkpoint = DEFAULT_TRAINED if libero and trained_model_dir(DEFAULT_TRAINED) else "tiny"
    collections = data_collections(training_info(args.checkpoint).get("data"))

    def every_collection(setting: str) -> bool:  # render and reset as the data was, if all of it was
        return bool(collections) and all(c.get(setting, False) for c in collections)

    if args.init_state is None:
        args.init_state = DEMO_INIT_STATE if args.checkpoint == DEFAULT_TRAINED else 0
    if args.fast_render is None:
        args.fast_render = every_collection("fast_render")
    if args.fast_reset is None:
        args.fast_reset = every_collection("fast_reset")
    return trained_language_tasks(args.checkpoint)


def _config(args: argparse.Namespace) -> tuple[EvalConfig, EpisodeSpec]:
    if args.env != "libero":
        return _sim_config(args)
    from oxygen_gym.envs.protocols import get_libero_protocol

    args.protocol = args.protocol or "openpi"
    suites = parse_suites(args.suite or "libero_spatial")
    if len(suites) != 1:
        raise ValueError(f"--suite: the demo runs one suite, got {args.suite!r}")
    suite = suites[0]
    if not 0 <= args.task_id < TASKS_PER_SUITE:
        raise ValueError(f"--task-id: {args.task_id}; expected 0..{TASKS_PER_SUITE - 1}")
    trained = _trained_defaults(args)
    if not 0 <= args.init_state < INIT_STATES_PER_TASK:
        raise ValueError(f"--init-state: {args.init_state}; expected 0..{INIT_STATES_PER_TASK - 1}")
    builtin = args.checkpoint in random_weight_model_names()
    max_steps = args.max_steps if args.max_steps is not None else (DEMO_MAX_STEPS if builtin else None)
    if max_steps is not None and max_steps < 0:
        raise ValueError(f"--max-steps: {max_steps}; expected >= 0 (0 = the protocol's limit)")
    protocol = get_libero_protocol(args.protocol)
    seed = protocol.seed if args.seed is None else args.seed
    cfg = EvalConfig(
        checkpoint=args.checkpoint, mode=args.mode, decode_budget=parse_decode_budget(args.decode_budget),
        target_action_hz=args.target_action_hz,
        # a trained checkpoint's adapter tasks (its adapters/<name>/, e.g. libero-spatial's memory) beside narration
        language_tasks=_language_tasks(args, trained), protocol=args.protocol,
        max_steps=max_steps or None, fast_render=args.fast_render, suites=[suite], tasks=[args.task_id],
        episodes=args.init_state + 1, seeds=[seed], device=args.device, video="all", out=args.out,
        fast_reset=args.fast_reset, **ConventionOverrides.from_args(args).as_kwargs(CONVENTION_FIELDS),
    )
    return cfg, EpisodeSpec(suite, args.task_id, seed, args.init_state)


def _language_tasks(args: argparse.Namespace, trained: dict) -> list[dict]:
    """--task as given, none with --no-language, else narrate plus the checkpoint's adapter tasks."""
    default = ["narrate"] + sorted(n for n, t in trained.items() if t.get("adapter"))
    names = [] if args.no_language else (args.language_task or default)
    return [parse_language_task(n, args.max_new_tokens, trained=trained) for n in names]


def _sim_config(args: argparse.Namespace) -> tuple[EvalConfig, EpisodeSpec]:
    """One episode of the ALOHA or DROID sim: task `--task-id`, placement `--init-state`."""
    from .sims import get_sim

    sim = get_sim(args.env)
    for flag, value in (("--suite", args.suite), ("--protocol", args.protocol)):
        if value is not None:
            raise ValueError(f"{flag}: LIBERO only; --env {args.env} has one task table and one protocol")
    trained = _trained_defaults(args)
    names = sim.task_names()
    if not 0 <= args.task_id < len(names):
        raise ValueError(f"--task-id: {args.task_id}; expected 0..{len(names) - 1} ("
                         + ", ".join(f"{i} {n}" for i, n in enumerate(names)) + ")")
    if args.init_state < 0:
        raise ValueError(f"--init-state: {args.init_state}; expected a placement index >= 0")
    protocol = sim.protocols[0]
    builtin = args.checkpoint in random_weight_model_names()
    max_steps = args.max_steps if args.max_steps is not None else (DEMO_MAX_STEPS if builtin else None)
    if max_steps is not None and max_steps < 0:
        raise ValueError(f"--max-steps: {max_steps}; expected >= 0 (0 = the protocol's limit)")
    seed = sim.default_seed(protocol) if args.seed is None else args.seed
    cfg = EvalConfig(
        env=args.env, robot=sim.robot, checkpoint=args.checkpoint, mode=args.mode,
        decode_budget=parse_decode_budget(args.decode_budget), target_action_hz=args.target_action_hz,
        language_tasks=_language_tasks(args, trained), protocol=protocol, max_steps=max_steps or None,
        fast_render=bool(args.fast_render), suites=[sim.name], tasks=[args.task_id], episodes=args.init_state + 1,
        seeds=[seed], device=args.device, video="all", out=args.out,
        **ConventionOverrides.from_args(args).as_kwargs(CONVENTION_FIELDS),
    )
    return cfg, EpisodeSpec(sim.name, args.task_id, seed, args.init_state)


def render_report(record: dict, cfg: EvalConfig, builtin: bool) -> str:
    from .libero.summary_stats import percentiles

    fm = percentiles(record.get("frame_ms") or [], qs=(50, 99))
    lines = [
        "# oxygen-gym demo",
        "",
        f"**{RANDOM_WEIGHTS_NOTE.format(name=cfg.checkpoint)}**" if builtin else f"Checkpoint: `{cfg.checkpoint}`.",
        "",
        f"Task: {record['suite']} task {record['task_id']} \u2014 \"{record.get('task')}\"  ",
        f"Init state {record['init_state']}, seed {record['seed']}, protocol `{cfg.protocol}`, mode `{cfg.mode}`, "
        f"decode budget `{cfg.decode_budget}`, device `{cfg.device}`, step cap `{cfg.max_steps or 'protocol'}`.",
        "",
    ]
    if record["status"] != "ok":
        return "\n".join(lines + ["## The episode failed with an error", "", "```", record["traceback"], "```", ""])
    fmt = lambda v, spec=".1f": "n/a" if v is None else format(v, spec)  # noqa: E731
    lines += [
        "| | |", "| --- | --- |",
        f"| success | {'yes' if record['success'] else 'no'} |",
        f"| steps | {record['steps']} ({record['calls']} policy calls, replan every {record['replan']}) |",
        f"| action Hz (horizon / frame latency) | {fmt(record['action_hz'])} |",
        f"| executed actions per policy second | {fmt(record['executed_action_hz'])} |",
        f"| language tokens/s | {fmt(record['language_tokens_per_s'])} ({record['language_tokens']} tokens) |",
        f"| frame latency p50 / p99 | {fmt(fm and fm['p50'])} / {fmt(fm and fm['p99'])} ms |",
        f"| env step (sim + rendering) | {fmt(record['env_ms_mean'])} ms |",
        f"| episode wall time | {fmt(record['wall_s'])} s |",
        "| of which | " + ", ".join(f"{k} {v:.1f} s" for k, v in (record.get("time_s") or {}).items()) + " |",
        "",
        "Per-stage ms per frame (mean): " + ", ".join(f"{k} {v:.1f}" for k, v in record["stage_ms"].items()) + ".",
        "",
    ]
    finished = [n for n in record.get("narration") or [] if n.get("done")]
    if finished:
        adapters = {t["name"]: t.get("adapter") for t in cfg.language_tasks}
        lines += ["## Language (the last finished requests of each task, from the same prefills as the actions)", ""]
        for task in dict.fromkeys(n["task"] for n in finished):
            weights = f"LoRA adapter `{adapters[task]}`" if adapters.get(task) else "base weights"
            for n in [n for n in finished if n["task"] == task][-2:]:
                lines.append(f"- frame {n['frame']} ({n['task']}, {weights}): {json.dumps(n['text'])}")
        for key, what in (("narration_accuracy", "narration names the subtask"),
                          ("memory_accuracy", "memory answers what the robot did last")):
            acc = record.get(key)
            if acc and acc.get("accuracy") is not None:
                lines.append(f"- {what} (sim-state label): {acc['correct']} / {acc['frames']} frames")
        lines.append("")
    if record.get("video"):
        lines += [f"Video: `{record['video']}`", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from .libero.results import write_json_atomic, write_text_atomic
    from .libero.worker import EpisodeWorker

    try:
        cfg, spec = _config(args)
    except ValueError as e:
        print(f"oxygen-gym demo: error: {e}", file=sys.stderr)
        return 2
    builtin = cfg.checkpoint in random_weight_model_names()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if builtin:
        print(RANDOM_WEIGHTS_NOTE.format(name=cfg.checkpoint), file=sys.stderr)
    print(f"oxygen-gym demo: {spec.suite} task {spec.task_id}, init state {spec.init_state}, "
          f"{cfg.max_steps or 'protocol'} steps max, on {cfg.device} (building the simulator takes ~10 s)",
          file=sys.stderr)
    t0 = time.perf_counter()
    worker = EpisodeWorker(cfg)
    record = None
    try:
        record = worker.run(spec, video_dir=out, progress=True)
    except KeyboardInterrupt:
        pass
    finally:
        if record is not None:
            worker.close()
    if record is None:  # Ctrl-C; outside the except block, so the interrupted frames are released first
        from .libero.worker import quiet_interrupt_exit

        quiet_interrupt_exit("\ninterrupted; no episode was written", worker)
        return 130
    record["demo_wall_s"] = time.perf_counter() - t0
    if record.get("video"):
        record["video"] = str(Path(cfg.out) / record["video"])
    write_json_atomic(out / "episode.json", record)
    write_text_atomic(out / "report.md", render_report(record, cfg, builtin))
    print(render_report(record, cfg, builtin))
    print("wrote:")
    for p in ([record["video"]] if record.get("video") else []) + [str(out / "episode.json"), str(out / "report.md")]:
        print(f"  {Path(p).resolve()}")
    if record["status"] != "ok":
        print(f"the episode failed with an error: {record['error']}", file=sys.stderr)
        return 1
    return 0
