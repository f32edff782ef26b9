"""Seconds per LIBERO episode reset: the hard reset (`rebuild_sim=True`, the sim rebuilt every episode) against the
exact rebuild-free reset (envs/libero_reset.py, the default), in one process, episodes interleaved (ABBA order) so
both see the same machine load. Not in CI.

    python tools/reset_bench.py                                   # libero_spatial task 0, openpi, 6 episodes
    python tools/reset_bench.py --task 4 --protocol lerobot --episodes 4 --camera-size 256

Each env is built and reset to init state 0 first (not counted: the exact env compiles there, like the hard one);
then init states 1..N in order, as an eval runs a task's episodes. Prints one JSON line per episode and a summary:
the median seconds of `env.reset()` (what eval's time split calls reset: robosuite's reset, the init state, the
protocol's wait steps and the first render) and of robosuite's reset alone, hard vs exact, and their ratios. Each
episode's first observation is compared byte for byte (the tests compare everything; this only guards the timing).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _timed_inner_resets(env) -> list[float]:
    """Wrap the robosuite env's reset so each call's seconds are recorded; returns the list it appends to."""
    inner = env.libero_env
    original, seconds = inner.reset, []

    def timed():
        t0 = time.perf_counter()
        try:
            return original()
        finally:
            seconds.append(time.perf_counter() - t0)

    inner.reset = timed
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="libero_spatial")
    p.add_argument("--task", type=int, default=0)
    p.add_argument("--protocol", default="openpi", choices=("openpi", "lerobot"))
    p.add_argument("--episodes", type=int, default=6, help="init states 1..N after the uncounted first (default 6)")
    p.add_argument("--camera-size", type=int, default=None, help="render size (default: the protocol's)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")

    import numpy as np

    from oxygen_gym.envs.libero import LiberoEnv

    envs = {kind: LiberoEnv(args.suite, args.task, protocol=args.protocol, camera_size=args.camera_size,
                            rebuild_sim=(kind == "hard"))
            for kind in ("hard", "exact")}
    first = {}
    for kind, env in envs.items():
        t0 = time.perf_counter()
        env.reset(seed=env.protocol.seed, options={"init_state": 0})
        first[kind] = time.perf_counter() - t0
    inner = {kind: _timed_inner_resets(env) for kind, env in envs.items()}
    rows = []
    for i in range(1, args.episodes + 1):
        order = ("hard", "exact") if i % 2 else ("exact", "hard")
        row, obs = {"init_state": i, "load": round(os.getloadavg()[0], 2)}, {}
        for kind in order:
            before = len(inner[kind])
            t0 = time.perf_counter()
            obs[kind], _ = envs[kind].reset(options={"init_state": i})
            row[f"{kind}_reset_s"] = round(time.perf_counter() - t0, 3)
            row[f"{kind}_robosuite_s"] = round(sum(inner[kind][before:]), 3)
        row["same_obs"] = all(np.array_equal(obs["hard"]["images"][c], obs["exact"]["images"][c])
                              for c in obs["hard"]["images"]) and np.array_equal(obs["hard"]["state"],
                                                                                obs["exact"]["state"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    for env in envs.values():
        env.close()

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    summary = {
        "suite": args.suite, "task": args.task, "protocol": args.protocol, "episodes": args.episodes,
        "camera_size": list(envs["hard"].camera_size), "first_reset_s": {k: round(v, 2) for k, v in first.items()},
        "reset_s_median": {"hard": med("hard_reset_s"), "exact": med("exact_reset_s")},
        "robosuite_reset_s_median": {"hard": med("hard_robosuite_s"), "exact": med("exact_robosuite_s")},
        "reset_ratio": round(med("hard_reset_s") / med("exact_reset_s"), 2),
        "robosuite_reset_ratio": round(med("hard_robosuite_s") / med("exact_robosuite_s"), 2),
        "all_same_obs": all(r["same_obs"] for r in rows), "cpus": os.cpu_count(),
        "load_range": [min(r["load"] for r in rows), max(r["load"] for r in rows)],
    }
    print(json.dumps({"summary": summary}))
    return 0 if summary["all_same_obs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
