"""`oxygen-gym bench rtc`: what real-time chunking costs per denoise step, plain vs `cheap` vs `guided`.

    oxygen-gym bench rtc --models small,xr0-small --repeats 20 --out bench/rtc

For each model one observation is prefilled once; then the first head's denoise runs plain, with `cheap` guidance and
with `guided` guidance (a previous chunk of `chunk` actions, delay 3, `exp` schedule), interleaved round by round so
the three see the same machine load. Reported per model and method: ms per denoise (p50 over repeats), ms per step,
and the ratio to plain measured in the same rounds. Writes results.json and results.md under --out as each model
finishes (a killed run keeps the models done).
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

METHODS = ("plain", "cheap", "guided")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(x for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated model names, got {text!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json and results.md")
    parser.add_argument("--models", type=_names, default=("tiny", "small", "xr0-small"),
                        help="built-in models (default tiny,small,xr0-small)")
    parser.add_argument("--repeats", type=int, default=20, help="rounds per model (default 20)")
    parser.add_argument("--delay", type=int, default=3, help="inference delay of the guided chunk (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")


def measure(name: str, repeats: int, delay: int) -> dict:
    """One model's per-method denoise times, interleaved round by round."""
    from oxygen_gym import MultiTaskPolicy, RTCConfig

    policy = MultiTaskPolicy.from_pretrained(name, robot="libero", num_slots=1)
    model, head = policy.model, policy.action_head
    rng = np.random.default_rng(0)
    obs = {"images": {c: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for c in policy.robot.cameras},
           "state": rng.uniform(-0.5, 0.5, policy.robot.state_dim).astype(np.float32), "prompt": "put the bowl on the plate"}
    cache = model.new_cache(1, policy.pool.capacity)
    state = model.prefill_frame(cache, policy.model_inputs(obs))
    noise = policy.frame_noise(0)[head]
    steps = policy.engine.steps_of(head)
    prev = rng.normal(size=(policy.head_chunks[head], policy.robot.action_dim)).astype(np.float32)
    guidance = {}
    for method in ("cheap", "guided"):
        policy.rtc = RTCConfig(method=method)
        guidance[method] = policy._guidance(prev, delay)[head]
    times = {m: [] for m in METHODS}
    for _ in range(repeats + 1):  # the first round warms up (allocations, lazy modulation tables)
        for m in METHODS:
            start = time.perf_counter()
            model.denoise_head(head, cache, state, noise, steps, guidance=guidance.get(m))
            times[m].append(1e3 * (time.perf_counter() - start))
    policy.close()
    out = {"model": name, "head": head, "num_steps": steps, "horizon": int(noise.shape[1]), "delay": delay}
    for m in METHODS:
        t = np.array(times[m][1:])
        ratio = np.array(times[m][1:]) / np.array(times["plain"][1:])
        out[m] = {"denoise_ms_p50": float(np.median(t)), "step_ms_p50": float(np.median(t) / steps),
                  "ratio_to_plain_p50": float(np.median(ratio))}
    return out


def _table(rows: list[dict]) -> str:
    lines = ["| model | steps | plain ms/step | cheap ms/step (x plain) | guided ms/step (x plain) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['num_steps']} | {r['plain']['step_ms_p50']:.2f} | "
            f"{r['cheap']['step_ms_p50']:.2f} ({r['cheap']['ratio_to_plain_p50']:.2f}x) | "
            f"{r['guided']['step_ms_p50']:.2f} ({r['guided']['ratio_to_plain_p50']:.2f}x) |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.delay < 0:
        print("oxygen-gym bench rtc: --repeats must be >= 1 and --delay >= 0", file=sys.stderr)
        return 2
    import torch  # here, not at import: `oxygen-gym bench rtc --help` stays fast (oxygen_gym/cli.py)

    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    done = json.loads(path.read_text())["models"] if path.exists() else []
    config = {"command": "oxygen-gym " + shlex.join(sys.argv[1:]), "repeats": args.repeats, "delay": args.delay,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine()}
    for name in args.models:
        if any(r["model"] == name for r in done):
            print(f"bench rtc: {name} already measured, kept")
            continue
        print(f"bench rtc: {name} ...", flush=True)
        done.append(measure(name, args.repeats, args.delay))
        path.write_text(json.dumps({"config": config, "models": done}, indent=2))
        (args.out / "results.md").write_text(f"`{config['command']}`\n\n" + _table(done))
    print(_table(done))
    return 0
