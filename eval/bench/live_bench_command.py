"""`oxygen-gym bench live`: success rate against latency for each execution strategy, on the live clock.

Each (strategy, latency) point is one `oxygen-gym eval libero --live ...` run in `OUT/points/<strategy>@<latency>`,
so a killed bench resumes where it stopped (episodes are written as they finish) and a point's folder is a normal
eval folder. Defaults: the shipped `libero-spatial` model on its held-out init states 30-49 of task 0
(experiments/libero-spatial-log.md). The table, JSON and plot (live_report.py) are rewritten after every point.

  oxygen-gym bench live --out bench/live                                      # the full grid, 20 episodes a point
  oxygen-gym bench live --init-states 30 --max-steps 20 --out /tmp/live-smoke # one short episode per point
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.eval.libero.episode_set import parse_init_states, parse_seeds, parse_tasks
from oxygen_gym.policies.checkpoints.names import checkpoint_arg

from .live_report import write_live_report

LATENCIES = ("0", "50", "100", "200", "400", "measured")
STRATEGIES = {  # name: (--execution, --handover)
    "sync": ("sync", None),
    "async-switch": ("async", "switch"),
    "async-blend": ("async", "blend"),
    "async-rtc": ("rtc", None),
}


def parse_latencies(text: str) -> list[str]:
    out = []
    for item in str(text).split(","):
        item = item.strip()
        if item != "measured":
            try:
                if float(item) < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"--latencies: {item!r}; expected milliseconds >= 0 or measured") from None
        out.append(item)
    return out


def parse_strategies(text: str) -> list[str]:
    names = [s.strip() for s in str(text).split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise ValueError(f"--strategies: {bad or text!r}; expected some of {', '.join(STRATEGIES)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2]
    parser.add_argument("--checkpoint", default="libero-spatial", type=checkpoint_arg,
                        help="the shipped trained model (default libero-spatial), a built-in model or a checkpoint "
                             "folder / hub id")
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--tasks", default="0")
    parser.add_argument("--init-states", default="30-49", help="held-out init states of libero-spatial by default")
    parser.add_argument("--seeds", default="7")
    parser.add_argument("--latencies", default=",".join(LATENCIES), help="ms, or measured (default: %(default)s)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="default: %(default)s")
    parser.add_argument("--mode", default="oxygen")
    parser.add_argument("--task", action="append", default=None, metavar="NAME[=PROMPT]", dest="language_task",
                        help="language task run alongside (default: narrate, the trained model's own)")
    parser.add_argument("--max-steps", type=int, default=None, help="cap on control steps per episode (smoke runs)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-fast", action="store_true", help="hard resets and antialiased rendering (slower)")
    parser.add_argument("--out", default="bench/live")


def point_name(strategy: str, latency: str) -> str:
    return f"{strategy}@{latency}"


def point_config(args: argparse.Namespace, strategy: str, latency: str, tasks: list[dict]) -> EvalConfig:
    execution, handover = STRATEGIES[strategy]
    init_states = parse_init_states(args.init_states)
    return EvalConfig(
        checkpoint=args.checkpoint, mode=args.mode, language_tasks=tasks, max_steps=args.max_steps,
        fast_render=not args.no_fast, fast_reset=not args.no_fast, suites=[args.suite], tasks=parse_tasks(args.tasks),
        episodes=len(init_states), init_states=init_states, seeds=parse_seeds(args.seeds), device=args.device,
        out=str(Path(args.out) / "points" / point_name(strategy, latency)),
        live="measured" if latency == "measured" else f"fixed:{latency}", execution=execution, handover=handover,
    )


def run(args: argparse.Namespace) -> int:
    from oxygen_gym.eval.libero.eval_loop import run_eval
    from oxygen_gym.eval.libero.narration import trained_language_tasks
    from oxygen_gym.policies.task_args import parse_language_task

    try:
        latencies, strategies = parse_latencies(args.latencies), parse_strategies(args.strategies)
        trained = trained_language_tasks(args.checkpoint)
        specs = args.language_task if args.language_task is not None else ["narrate"]
        tasks = [parse_language_task(t, 30, trained=trained) for t in specs]
        grid = [(s, lat) for s in strategies for lat in latencies]
        configs = [point_config(args, s, lat, tasks) for s, lat in grid]
    except ValueError as e:
        print(f"oxygen-gym bench live: error: {e}", file=sys.stderr)
        return 2
    summaries = {}
    for (strategy, latency), cfg in zip(grid, configs):
        print(f"point {point_name(strategy, latency)}", flush=True)
        summaries[(strategy, latency)] = run_eval(cfg, progress=False)
        write_live_report(args.out, summaries, strategies, latencies, vars(args))
    report = write_live_report(args.out, summaries, strategies, latencies, vars(args))
    print((Path(args.out) / "results.md").read_text())
    return 0 if report["points_ok"] else 1
