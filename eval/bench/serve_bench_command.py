"""`oxygen-gym bench serve`: the policy server under load from several robots, batched vs one robot at a time.

    oxygen-gym bench serve --model small --robots 1,2,4,8 --calls 100 --out bench/serve

Two servers run side by side on loopback with the same weights: `--batching on` (robots' frames batched) and
`--batching off` (one robot at a time). For each robot count, calls alternate between them in rounds, so both see the
same machine load. Reported per server and robot count: per-robot latency p50/p99 (the client's round trip), aggregate
action throughput (actions returned per second, all robots), language tokens per second, robots per batch. Ratios:
throughput on/off, and p99 against a lone robot's on the same server. Writes results.json and results.md under --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from oxygen_gym.policies.checkpoints.names import checkpoint_arg

from .serve_load import batch_delta, load_average, server_args

MODES = ("on", "off")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json and results.md")
    parser.add_argument("--model", default="small", type=checkpoint_arg,
                        help="built-in model or checkpoint the servers load (default small)")
    parser.add_argument("--robot", default="libero", choices=("libero", "droid", "aloha"))
    parser.add_argument("--robots", type=_ints, default=(1, 2, 4, 8), help="robot counts, comma list (default 1,2,4,8)")
    parser.add_argument("--calls", type=int, default=100, help="measured calls per robot per server and robot count")
    parser.add_argument("--rounds", type=int, default=4, help="rounds the calls are split into, alternating servers")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured calls per robot before measuring")
    parser.add_argument("--decode-budget", default="5", help="k of both servers (default 5)")
    parser.add_argument("--max-new-tokens", type=int, default=20, help="tokens per language request (default 20)")
    parser.add_argument("--no-language", action="store_true", help="actions only")
    parser.add_argument("--window-ms", type=float, default=100.0,
                        help="batching window of the batched server (default 100: closed-loop robots on a loaded CPU reply within it)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server (default 1; clients share the machine)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="stop measuring after this long (partial results)")
    parser.add_argument("--call-timeout", type=float, default=300.0, help="seconds one call may take")
    parser.add_argument("--ray", action="store_true",
                        help="instead: robots against Ray Serve replicas (serve --ray) and the single-process server in "
                             "the same run, per --replicas count (serve_fleet_bench.py)")
    parser.add_argument("--replicas", type=_ints, default=(1, 2), help="with --ray: replica counts (default 1,2)")
    parser.add_argument("--plan-replicas", type=int, default=16,
                        help="with --ray: the fleet the plan is written for, one replica per GPU (default 16)")
    parser.add_argument("--plan-actions-per-call", type=int, default=5,
                        help="with --ray: actions a robot executes per call, which with its control rate sets the "
                             "time it can wait for the next (default 5, openpi's LIBERO client)")
    parser.add_argument("--hostile", action="store_true",
                        help="instead: one robot's p50/p99 alone vs while hostile clients attack the same server "
                             "(oversized prompts, junk, idle connections, connect/reset storms, shape and container bombs, "
                             "slot squatters, stats spam; serve_hostile.py)")
    parser.add_argument("--hostile-clients", type=int, default=2, help="with --hostile: attackers of each kind (default 2)")
    parser.add_argument("--attacks", type=_attacks, default="all",
                        help="with --hostile: attack kinds, comma list or all (default): oversized, junk, idle, storm, "
                             "shape_bomb, container_bomb, squatter, stats_spam")


def _attacks(text: str) -> tuple[str, ...]:
    from .serve_hostile import parse_attacks

    return parse_attacks(text)


async def _measure(args: argparse.Namespace, servers: dict, deadline: float) -> list[dict]:
    from .serve_load import Robot, RobotLog, openpi_observation, run_round
    from oxygen_gym.serve import wire

    points = []
    rng = np.random.default_rng(0)
    per_round = max(1, -(-args.calls // args.rounds))
    for n in args.robots:
        messages = [[wire.packb(openpi_observation(args.robot, rng, "put the bowl on the plate")) for _ in range(4)] for _ in range(n)]
        fleets = {m: [Robot(servers[m].uri, messages[i], args.call_timeout) for i in range(n)] for m in MODES}
        logs = {m: [RobotLog() for _ in range(n)] for m in MODES}
        walls = {m: 0.0 for m in MODES}
        before = {}
        for m in MODES:
            for r in fleets[m]:
                await r.connect()
            await run_round(fleets[m], args.warmup, None)
            before[m] = (await fleets[m][0].server_stats())["server"]["totals"]
        done, rnd, partial = 0, 0, False
        while done < args.calls:
            calls = min(per_round, args.calls - done)
            for m in (MODES if rnd % 2 == 0 else MODES[::-1]):
                walls[m] += await run_round(fleets[m], calls, logs[m])
            done += calls
            rnd += 1
            if time.monotonic() > deadline:
                partial = True
                break
        for m in MODES:
            server = (await fleets[m][0].server_stats())["server"]
            for r in fleets[m]:
                await r.close()
            points.append(_point(m, n, logs[m], walls[m], batch_delta(before[m], server["totals"]), partial))
            print(_row(points[-1]), flush=True)
        if partial:
            print(f"oxygen-gym bench serve: --max-seconds reached; stopping after {n} robots", file=sys.stderr)
            break
    return points


def _point(mode: str, robots: int, logs, wall_s: float, server: dict, partial: bool) -> dict:
    p50 = [float(np.percentile(lg.latencies_ms, 50)) for lg in logs]
    p99 = [float(np.percentile(lg.latencies_ms, 99)) for lg in logs]
    return {
        "batching": mode,
        "robots": robots,
        "calls_per_robot": len(logs[0].latencies_ms),
        "wall_s": wall_s,
        "latency_ms_p50_per_robot": p50,
        "latency_ms_p99_per_robot": p99,
        "latency_ms_p50": float(np.median(p50)),
        "latency_ms_p99_worst_robot": float(max(p99)),
        "action_throughput_per_s": sum(lg.actions for lg in logs) / wall_s,
        "language_tokens_per_s": sum(lg.tokens for lg in logs) / wall_s,
        "robots_per_batch": server.get("robots_per_batch"),
        "server_batch_ms": server.get("batch_ms"),
        "server_stage_ms": server.get("stage_ms"),
        "partial": partial,
    }


def _ratios(points: list[dict]) -> list[dict]:
    by = {(p["batching"], p["robots"]): p for p in points}
    lone = by.get(("on", 1))
    out = []
    for n in sorted({p["robots"] for p in points}):
        on, off = by.get(("on", n)), by.get(("off", n))
        if not on or not off:
            continue
        out.append({
            "robots": n,
            "throughput_on_over_off": on["action_throughput_per_s"] / off["action_throughput_per_s"],
            "p99_on_over_lone": on["latency_ms_p99_worst_robot"] / lone["latency_ms_p99_worst_robot"] if lone else None,
            "p99_off_over_lone": off["latency_ms_p99_worst_robot"] / lone["latency_ms_p99_worst_robot"] if lone else None,
        })
    return out


HEAD = ("| batching | robots | calls/robot | p50 ms | p99 ms (worst robot) | actions/s | tokens/s | robots/batch "
        "| batch ms (prefill / denoise / decode) |")


def _row(p: dict) -> str:
    rpb = "-" if p["robots_per_batch"] is None else f"{p['robots_per_batch']:.2f}"
    st = p.get("server_stage_ms") or {}
    batch = "-" if p.get("server_batch_ms") is None else (
        f"{p['server_batch_ms']:.0f} ({st.get('prefill', 0):.0f} / {st.get('denoise', 0):.0f} / {st.get('decode', 0):.0f})")
    return (f"| {p['batching']} | {p['robots']} | {p['calls_per_robot']} | {p['latency_ms_p50']:.0f} | "
            f"{p['latency_ms_p99_worst_robot']:.0f} | {p['action_throughput_per_s']:.1f} | {p['language_tokens_per_s']:.1f} | "
            f"{rpb} | {batch} |")


def markdown(results: dict) -> str:
    cfg = results["config"]
    language = "no language" if cfg["no_language"] else f"a narrate request of {cfg['max_new_tokens']} tokens per frame"
    lines = [
        "# oxygen-gym bench serve", "", f"`{cfg['command']}`", "",
        f"- model `{cfg['model']}`, robot `{cfg['robot']}`, k={cfg['decode_budget']}, {language}, "
        f"{cfg['threads']} torch thread(s) per server, window {cfg['window_ms']} ms",
        f"- {cfg['machine']}; load average before {cfg['load_before']}, after {cfg.get('load_after')}; wall {cfg.get('wall_s', 0):.0f} s",
        "", HEAD, "|" + " --- |" * 9,
        *[_row(p) for p in results["points"]],
        "", "| robots | throughput on/off | p99 on / lone robot | p99 off / lone robot |", "| --- | --- | --- | --- |",
    ]
    for r in results["ratios"]:
        f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
        lines.append(f"| {r['robots']} | {f(r['throughput_on_over_off'])} | {f(r['p99_on_over_lone'])} | {f(r['p99_off_over_lone'])} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from .serve_load import start_server

    if args.hostile:
        from .serve_hostile import run as run_hostile

        return run_hostile(args)
    if args.ray:
        from .serve_fleet_bench import run as run_fleet

        return run_fleet(args)

    if args.calls < 1 or args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        print("oxygen-gym bench serve: --calls, --rounds and --threads must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    config = {
        "command": "oxygen-gym bench serve " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if sys.argv[1:3] == ["bench", "serve"] else "oxygen-gym bench serve",
        "model": args.model, "robot": args.robot, "robots": list(args.robots), "calls": args.calls, "rounds": args.rounds,
        "decode_budget": args.decode_budget, "max_new_tokens": args.max_new_tokens, "no_language": args.no_language,
        "window_ms": args.window_ms, "threads": args.threads, "device": args.device,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "load_before": load_average(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    servers = {}
    try:
        for m in MODES:
            servers[m] = start_server(m, server_args(args, m), threads=args.threads, max_seconds=args.max_seconds + 600,
                                      log_file=args.out / f"server-{m}.log")
        print(HEAD, flush=True)
        try:
            points = asyncio.run(_measure(args, servers, started + args.max_seconds))
        except RuntimeError as e:
            logs = ", ".join(str(s.log_file) for s in servers.values())
            raise RuntimeError(f"{e}\nthe servers' logs (an internal error's details under its id): {logs}") from e
    finally:
        for s in servers.values():
            s.stop()
    config["load_after"] = load_average()
    config["wall_s"] = time.monotonic() - started
    results = {"config": config, "points": points, "ratios": _ratios(points)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.out / "results.md").write_text(text)
    print(text)
    return 0
