"""`oxygen-gym bench serve --ray`: robots against Ray Serve replicas (serve/fleet/) and against the single-process
server, on this machine, in the same run.

    oxygen-gym bench serve --ray --model tiny --robots 2,4 --replicas 1,2 --calls 20 --out bench/serve-ray

The single-process server (a subprocess, batching on) runs all along; each replica count gets its own fleet on a
local Ray (started and stopped here, one at a time). For each replica count and robot count, calls alternate in
rounds between the fleet and the single server, so both see the same machine load. Reported per point: per-robot
p50/p99 of the client's round trip, actions per second, robots per batch (the fleet's /stats totals, summed over
replicas); and the Ray hop: the fleet's p50 less the single server's at the same robots (with one replica, the same
engine and batching: what Serve's proxy and the replica's ASGI bridge add). Writes results.json and results.md.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import shlex
import socket
import sys
import time

import numpy as np

from .serve_load import batch_delta, load_average, server_args


def _serve_namespace(args: argparse.Namespace) -> argparse.Namespace:
    """The `oxygen-gym serve` arguments the replicas build their policy from (the single server's, parsed)."""
    from oxygen_gym.serve.serve_command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(server_args(args, "on"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _measure(args, uris: dict[str, str], n: int) -> dict[str, dict]:
    from oxygen_gym.serve import wire

    from .serve_load import Robot, RobotLog, openpi_observation, run_round

    rng = np.random.default_rng(0)
    messages = [[wire.packb(openpi_observation(args.robot, rng, "put the bowl on the plate")) for _ in range(4)]
                for _ in range(n)]
    fleets = {k: [Robot(u, messages[i], args.call_timeout) for i in range(n)] for k, u in uris.items()}
    logs = {k: [RobotLog() for _ in range(n)] for k in uris}
    walls = {k: 0.0 for k in uris}
    before = {}
    for k, robots in fleets.items():
        for r in robots:
            await r.connect()
        await run_round(robots, args.warmup, None)
        before[k] = (await robots[0].server_stats())["server"]["totals"]
    per_round = max(1, -(-args.calls // args.rounds))
    done, rnd = 0, 0
    while done < args.calls:
        calls = min(per_round, args.calls - done)
        for k in (list(uris) if rnd % 2 == 0 else list(uris)[::-1]):
            walls[k] += await run_round(fleets[k], calls, logs[k])
        done, rnd = done + calls, rnd + 1
    out = {}
    for k, robots in fleets.items():
        after = (await robots[0].server_stats())["server"]
        for r in robots:
            await r.close()
        p50 = [float(np.percentile(lg.latencies_ms, 50)) for lg in logs[k]]
        p99 = [float(np.percentile(lg.latencies_ms, 99)) for lg in logs[k]]
        server = batch_delta(before[k], after["totals"])
        out[k] = {"robots": n, "calls_per_robot": args.calls, "latency_ms_p50_per_robot": p50,
                  "latency_ms_p99_per_robot": p99, "latency_ms_p50": float(np.median(p50)),
                  "latency_ms_p99_worst_robot": float(max(p99)),
                  "action_throughput_per_s": sum(lg.actions for lg in logs[k]) / walls[k],
                  "robots_per_batch": server.get("robots_per_batch"),
                  "replicas_seen": len(after.get("replicas", [])) or 1}
    return out


def run(args: argparse.Namespace) -> int:
    import ray

    from oxygen_gym.serve.fleet.app import FleetOptions, start_fleet
    from oxygen_gym.serve.server import ServeConfig

    from .serve_load import start_server

    if args.calls < 1 or args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        print("oxygen-gym bench serve: --calls, --rounds and --threads must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    config = {
        "command": "oxygen-gym bench serve " + " ".join(shlex.quote(a) for a in sys.argv[3:]),
        "model": args.model, "robot": args.robot, "robots": list(args.robots), "replicas": list(args.replicas),
        "calls": args.calls, "rounds": args.rounds, "window_ms": args.window_ms, "threads": args.threads,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "load_before": load_average(),
    }
    ns = _serve_namespace(args)
    single = start_server("single", server_args(args, "on"), threads=args.threads, max_seconds=args.max_seconds + 600,
                          log_file=args.out / "server-single.log")
    points = []
    try:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        port = _free_port()  # Serve's HTTP proxy is one per Ray cluster: every fleet of this run shares its port
        for replicas in args.replicas:
            cfg = ServeConfig(port=port, max_robots=max(args.robots), window_ms=args.window_ms)
            fleet = start_fleet(_policy_factory(ns), cfg,
                                FleetOptions(replicas=replicas, replica_cpus=min(1.0, os.cpu_count() / (replicas + 1)),
                                             threads=args.threads), app_name=f"bench-{replicas}")
            try:
                for n in args.robots:
                    got = asyncio.run(_measure(args, {"fleet": fleet.uri, "single": single.uri}, n))
                    hop = got["fleet"]["latency_ms_p50"] - got["single"]["latency_ms_p50"]
                    for k, p in got.items():
                        points.append({"server": k, "replicas": replicas if k == "fleet" else 1, **p,
                                       **({"ray_hop_ms_p50": hop} if k == "fleet" else {})})
                        print(_row(points[-1]), flush=True)
            finally:
                fleet.stop()
    finally:
        single.stop()
        if ray.is_initialized():
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    config["load_after"] = load_average()
    config["wall_s"] = time.monotonic() - started
    from oxygen_gym.policies.robots import get_robot

    period_ms = 1e3 * args.plan_actions_per_call / get_robot(args.robot).control_hz
    results = {"config": config, "points": points, "plan": cluster_plan(points, args.plan_replicas, period_ms)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0


def _policy_factory(ns: argparse.Namespace):
    from oxygen_gym.serve.serve_command import build_policy

    return functools.partial(build_policy, ns)


def cluster_plan(points: list[dict], replicas: int, period_ms: float) -> dict:
    """What `replicas` replicas like the measured ones would serve: the most robots one measured replica served with
    every robot's p99 within `period_ms` (the time a robot executes its last answer: a later answer stalls it), times
    `replicas`. Robots stay on the replica that seated them and replicas share nothing, so per-replica capacity adds
    up; the router fills replicas evenly (serve/fleet/router.py). It is only as good as the replica measured: a CPU
    replica here says nothing of a GPU one, so run the bench on the cluster's own kind of replica."""
    one = [p for p in points if p["server"] == "fleet" and p["replicas"] == 1]
    fits = [p["robots"] for p in one if p["latency_ms_p99_worst_robot"] <= period_ms]
    per_replica = max(fits, default=0)
    return {"replicas": replicas, "period_ms": period_ms, "robots_per_replica": per_replica,
            "robots": per_replica * replicas, "measured_robot_counts": sorted(p["robots"] for p in one),
            "bounded_by_measurement": bool(fits) and per_replica == max(p["robots"] for p in one)}


HEAD = "| server | replicas | robots | calls/robot | p50 ms (per robot) | p99 ms (per robot) | actions/s | robots/batch | Ray hop p50 ms |"


def _row(p: dict) -> str:
    f = lambda xs: ", ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    rpb = "-" if p.get("robots_per_batch") is None else f"{p['robots_per_batch']:.2f}"
    hop = f"{p['ray_hop_ms_p50']:+.1f}" if "ray_hop_ms_p50" in p else ""
    return (f"| {p['server']} | {p['replicas']} | {p['robots']} | {p['calls_per_robot']} | {f(p['latency_ms_p50_per_robot'])} "
            f"| {f(p['latency_ms_p99_per_robot'])} | {p['action_throughput_per_s']:.1f} | {rpb} | {hop} |")


def markdown(results: dict) -> str:
    cfg = results["config"]
    lines = ["# oxygen-gym bench serve --ray", "", f"`{cfg['command']}`", "",
             f"- model `{cfg['model']}`, robot `{cfg['robot']}`, window {cfg['window_ms']} ms, {cfg['threads']} torch "
             f"thread(s) per server or replica; {cfg['machine']}; load before {cfg['load_before']}, after "
             f"{cfg.get('load_after')}; wall {cfg.get('wall_s', 0):.0f} s", "", HEAD, "|" + " --- |" * 9,
             *[_row(p) for p in results["points"]]]
    plan = results.get("plan")
    if plan:
        more = (" (the most measured: it may seat more)" if plan["bounded_by_measurement"] else "")
        lines += ["", f"Plan: a fleet of {plan['replicas']} replicas like the one measured seats "
                      f"{plan['robots_per_replica']} robot(s) each{more} with every robot's p99 within its "
                      f"{plan['period_ms']:.0f} ms between calls: {plan['robots']} robots. A replica of another kind "
                      "(a GPU) needs its own run."]
    return "\n".join(lines) + "\n"
