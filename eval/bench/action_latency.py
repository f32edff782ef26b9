"""`oxygen-gym bench action-latency`: how long a robot waits for its actions when the frame's language decoding is
hidden behind execution (the OxyGen paper's Sec. 4.7) versus when it waits for the whole frame.

    oxygen-gym bench action-latency --model small --N 30 --k 5 --frames 16 --out bench/action-latency

Both numbers come from the same frames: each frame runs once, and the engine's `on_actions` callback marks the
moment the action heads are done (obs -> actions, the decode hidden); the frame's end is when a caller that waits
for the language too would get its actions (not hidden). Modes `isolated` and `oxygen` are interleaved frame by
frame (same machine load), with one new language request of N tokens per frame (the paper's steady N/k in flight).
Writes results.json and results.md under --out.
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

MODES = ("isolated", "oxygen")
# OxyGen paper Sec. 4.7 (Jetson AGX Thor, 3 views at 224, H=10, S=10, N=30, k=5): frame = action path + language
PAPER_THOR_MS = {"isolated": {"frame": 1030.0, "actions": 207.5}, "oxygen": {"frame": 393.0, "actions": 198.0}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json and results.md")
    parser.add_argument("--model", default="small", help="built-in model (default small)")
    parser.add_argument("--robot", default="libero")
    parser.add_argument("--N", type=int, default=30, help="tokens per language request (default 30)")
    parser.add_argument("--k", type=int, default=5, help="decode steps per frame in oxygen mode (default 5)")
    parser.add_argument("--frames", type=int, default=16, help="measured frames per mode (default 16)")
    parser.add_argument("--warmup", type=int, default=None, help="frames before measuring (default ceil(N/k) + 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")


def run(args: argparse.Namespace) -> int:
    import torch  # here, not at import: `oxygen-gym bench action-latency --help` stays fast (oxygen_gym/cli.py)

    from oxygen_gym.engine.scheduler import FrameScheduler
    from oxygen_gym.engine.slots import SlotPool

    from .point_runner import pool_args
    from .sweep import build_builtin_model
    from .workloads import Arrivals, make_observations, peak_in_flight

    if min(args.N, args.k, args.frames) < 1:
        print("oxygen-gym bench action-latency: --N, --k and --frames must be >= 1", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = build_builtin_model(args.model, args.robot, 0, torch.device("cpu"), None)
    obs = make_observations(model, args.robot, tokenizer=tok)
    warmup = args.warmup if args.warmup is not None else -(-args.N // args.k) + 1
    frames = range(-warmup, args.frames)
    in_flight = peak_in_flight(Arrivals.parse("fixed"), args.N, args.k, frames, 0)
    engines = {
        m: FrameScheduler(model, SlotPool(**pool_args(model, in_flight + 1, obs.capacity(args.N))), m) for m in MODES
    }
    times = {m: {"actions": [], "frame": []} for m in MODES}
    next_id = dict.fromkeys(MODES, 0)
    for f in frames:
        for m, engine in engines.items():
            frame = obs.frame_input(f, [args.N], next_id[m])
            next_id[m] += 1
            marks = {}
            start = time.perf_counter()
            engine.run(frame, args.k, on_actions=lambda _a, marks=marks: marks.setdefault("actions", time.perf_counter()))
            end = time.perf_counter()
            if f >= 0:
                times[m]["actions"].append(1e3 * (marks["actions"] - start))
                times[m]["frame"].append(1e3 * (end - start))
    rows = []
    for m in MODES:
        a, fr = np.array(times[m]["actions"]), np.array(times[m]["frame"])
        rows.append({"mode": m, "actions_ms_p50": float(np.median(a)), "frame_ms_p50": float(np.median(fr)),
                     "hidden_gain_p50": float(np.median(fr / a)), "paper_thor_ms": PAPER_THOR_MS[m]})
    config = {"command": "oxygen-gym " + shlex.join(sys.argv[1:]), "model": args.model, "N": args.N, "k": args.k,
              "frames": args.frames, "warmup": warmup, "threads": torch.get_num_threads(),
              "machine": platform.processor() or platform.machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"config": config, "modes": rows}, indent=2))
    table = _table(rows)
    (args.out / "results.md").write_text(f"`{config['command']}`\n\n" + table)
    print(table)
    return 0


def _table(rows: list[dict]) -> str:
    lines = ["| mode | obs -> actions, decode hidden (ms p50) | whole frame, not hidden (ms p50) | gain (p50 of per-frame ratio) | paper Thor: actions / frame (ms) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        p = r["paper_thor_ms"]
        lines.append(f"| {r['mode']} | {r['actions_ms_p50']:.1f} | {r['frame_ms_p50']:.1f} | {r['hidden_gain_p50']:.2f}x | "
                     f"{p['actions']:.1f} / {p['frame']:.1f} ({p['frame'] / p['actions']:.2f}x) |")
    return "\n".join(lines) + "\n"
