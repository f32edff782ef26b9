"""`oxygen-gym bench contention`: `act()` alone and beside CPU hogs, the package's thread placement against torch's
old defaults (and one thread), rounds interleaved in one run so every configuration sees the same machine.

    oxygen-gym bench contention --model libero-spatial --hogs 2 --calls 20 --rounds 3 --out bench/contention

Each configuration is one long-lived worker process started with its own environment (the OpenMP wait policy only
takes effect before torch loads), holding the policy; the hogs are busy-loop processes started for the `hog` phase
and stopped after it. Writes `contention.json` (every call's latency, the placements, load averages) and
`contention.md` (p50/p99 per configuration and phase, and each phase's ratio to the same configuration alone).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONFIGS = {
    # name -> how the worker sets its threads: the package's rule, torch's defaults, one thread
    "placement": "rule",
    "torch-default": "default",
    "one-thread": "one",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny", help="built-in model or checkpoint (default tiny)")
    parser.add_argument("--robot", default="libero", choices=("libero", "droid", "aloha"))
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes in the hog phase (default 2)")
    parser.add_argument("--calls", type=int, default=20, help="act() calls per configuration, phase and round (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="alone/hog rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=3, help="calls before measuring, per worker (default 3)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--out", required=True, help="output folder")


def _hog() -> None:
    while True:
        pass


def _worker_env(config: str) -> dict:
    from oxygen_gym.engine.placement import THREADS_ENV, WAIT_ENV, available_cores, choose, prepare_environment

    env = {k: v for k, v in os.environ.items() if k not in (THREADS_ENV, WAIT_ENV, "MKL_NUM_THREADS")}
    if CONFIGS[config] == "rule":
        prepare_environment(choose(available_cores(), env=env), env)
    return env


class _Worker:
    """One configuration's process: JSON lines in, JSON lines out."""

    def __init__(self, config: str, args: argparse.Namespace) -> None:
        cmd = [sys.executable, "-m", "oxygen_gym.eval.bench.contention", "--worker", CONFIGS[config], "--model", args.model,
               "--robot", args.robot, "--warmup", str(args.warmup)]
        self.config = config
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_worker_env(config))
        self.ready = json.loads(self._line())

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench contention: the {self.config} worker exited (code {self.proc.wait()})")
        return line

    def run(self, calls: int) -> list[float]:
        self.proc.stdin.write(json.dumps({"calls": calls}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _serve_worker(mode: str, model: str, robot: str, warmup: int) -> None:
    """The worker's loop (in its own process): set threads, build the policy, time act() calls on request."""
    from oxygen_gym.engine.placement import available_cores, choose, place

    if mode == "rule":
        placement = place().as_record()
    else:
        import torch

        torch.set_num_threads(1 if mode == "one" else available_cores())
        placement = {**choose(available_cores(), threads=torch.get_num_threads()).as_record(), "source": mode,
                     "wait_policy": os.environ.get("OMP_WAIT_POLICY", "ACTIVE")}
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.eval.bench.serve_load import openpi_observation
    from oxygen_gym.serve.observations import to_policy_obs

    policy = MultiTaskPolicy.from_pretrained(model, robot=robot, num_slots=1)
    obs = to_policy_obs(openpi_observation(robot, np.random.default_rng(0), "put the bowl on the plate"), policy.robot)
    for _ in range(warmup):
        policy.act(obs)
    print(json.dumps({"placement": placement}), flush=True)
    for line in sys.stdin:
        calls = json.loads(line)["calls"]
        ms = []
        for _ in range(calls):
            t0 = time.perf_counter()
            policy.act(obs)
            ms.append(1e3 * (time.perf_counter() - t0))
        print(json.dumps({"ms": ms}), flush=True)


def _summary(samples: dict) -> dict:
    out = {}
    for (config, phase), ms in samples.items():
        a = np.asarray(ms)
        out.setdefault(config, {})[phase] = {"calls": len(a), "p50_ms": float(np.percentile(a, 50)),
                                             "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean())}
    for config, phases in out.items():
        if "alone" in phases and "hog" in phases:
            phases["hog_over_alone_p50"] = phases["hog"]["p50_ms"] / phases["alone"]["p50_ms"]
    return out


def _table(summary: dict, meta: dict) -> str:
    rows = ["| configuration | threads | wait | phase | calls | p50 ms | p99 ms | hog / alone p50 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for config, phases in summary.items():
        p = meta["placements"][config]
        for phase in ("alone", "hog"):
            if phase in phases:
                s = phases[phase]
                ratio = f"{phases['hog_over_alone_p50']:.2f}x" if phase == "hog" and "hog_over_alone_p50" in phases else ""
                rows.append(f"| {config} | {p['threads']} | {p['wait_policy']} | {phase} | {s['calls']} | "
                            f"{s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {ratio} |")
    head = (f"- model `{meta['model']}`, robot `{meta['robot']}`, {meta['hogs']} busy process(es) in the hog phase, "
            f"{meta['rounds']} round(s) of {meta['calls']} calls per configuration and phase, interleaved\n"
            f"- {meta['machine']}, {meta['cores']} cores; load average before {meta['load_before']}, after "
            f"{meta['load_after']}; wall {meta['wall_s']:.0f} s\n")
    return head + "\n" + "\n".join(rows) + "\n"


def run(args: argparse.Namespace) -> int:
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        print(f"oxygen-gym bench contention: --configs: unknown {unknown}; expected a comma list of {list(CONFIGS)}",
              file=sys.stderr)
        return 2
    for name in ("hogs", "calls", "rounds"):
        if getattr(args, name) < (0 if name == "hogs" else 1):
            print(f"oxygen-gym bench contention: --{name} must be >= {0 if name == 'hogs' else 1}", file=sys.stderr)
            return 2
    from oxygen_gym.engine.placement import available_cores

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, load_before = time.time(), [round(x, 2) for x in os.getloadavg()]
    workers = [_Worker(c, args) for c in configs]
    samples: dict = {}
    ctx = mp.get_context("spawn")
    try:
        for r in range(args.rounds):
            for phase in ("alone", "hog"):
                hogs = [ctx.Process(target=_hog, daemon=True) for _ in range(args.hogs if phase == "hog" else 0)]
                for h in hogs:
                    h.start()
                time.sleep(0.5 if hogs else 0.0)
                order = workers if r % 2 == 0 else workers[::-1]  # neither configuration always goes first
                for w in order:
                    samples.setdefault((w.config, phase), []).extend(w.run(args.calls))
                    print(f"round {r + 1}/{args.rounds} {phase:5s} {w.config:13s} p50 "
                          f"{np.percentile(samples[(w.config, phase)], 50):.1f} ms", flush=True)
                for h in hogs:
                    h.terminate()
                    h.join()
    finally:
        for w in workers:
            w.close()
    meta = {
        "model": args.model, "robot": args.robot, "hogs": args.hogs, "rounds": args.rounds, "calls": args.calls,
        "cores": available_cores(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()], "wall_s": time.time() - t0,
        "placements": {w.config: w.ready["placement"] for w in workers},
    }
    summary = _summary(samples)
    (out / "contention.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "samples": {f"{c}/{p}": v for (c, p), v in samples.items()}}, indent=1))
    table = _table(summary, meta)
    (out / "contention.md").write_text(table)
    print(table)
    return 0


def main() -> None:
    """A configuration's worker process (started by `run`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True, choices=sorted(set(CONFIGS.values())))
    parser.add_argument("--model", required=True)
    parser.add_argument("--robot", required=True)
    parser.add_argument("--warmup", type=int, required=True)
    args = parser.parse_args()
    _serve_worker(args.worker, args.model, args.robot, args.warmup)


if __name__ == "__main__":
    main()
