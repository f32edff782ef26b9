"""Where `oxygen-gym serve`'s memory goes after large messages: a leak, or the C allocator keeping freed memory.

    python -m oxygen_gym.eval.bench.serve_memory --model tiny --batteries 5 --tracemalloc --out /tmp/serve-mem

One server subprocess (this module's `server_main`: the real `oxygen-gym serve`, plus a SIGUSR1 handler that writes a
report) and, from this process, identical batteries of large messages: valid observations near the cap (pipelined on
several connections), container bombs, oversized prompts, one message over the cap, junk. After each battery, once
the server is idle, the report says: RSS, the Python heap (`tracemalloc`, with the lines whose allocations grew most
since the first report), then RSS again after glibc's `malloc_trim(0)` (`--trim`), and the peak RSS during the battery
(VmHWM, reset before it). A leak grows the Python heap (or RSS after trimming) by about the same amount every battery;
allocator retention shows as RSS that a trim gives back, with the heap flat. `--no-trim` leaves the allocator alone
(RSS as a server without trimming sees it); MALLOC_* environment variables reach the server (e.g.
MALLOC_MMAP_THRESHOLD_=1048576). `--batteries 0` measures the idle RSS only (after start, and after one robot's
warm-up calls). Writes results.json under --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np


# ---------------------------------------------------------------------------------------------- inside the server
def _status(pid: int | str = "self") -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def server_main(report_dir: str, trim: bool, trace: bool, argv: list[str]) -> None:
    """`oxygen-gym serve ARGV` with a SIGUSR1 handler that writes report-N.json under `report_dir`."""
    import tracemalloc

    from oxygen_gym.serve import memory

    state: dict = {"n": 0, "first": None}

    def report(*_) -> None:
        out: dict = {"rss_mb": _status()["VmRSS"]}
        if trace and not tracemalloc.is_tracing():  # from the first report on: tracing the start-up takes minutes
            tracemalloc.start(4)
        elif trace:
            cur, peak = tracemalloc.get_traced_memory()
            out.update(traced_mb=cur / 2**20, traced_peak_mb=peak / 2**20)
            tracemalloc.reset_peak()
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            if state["first"] is None:
                state["first"] = snap
            else:
                out["top_growth"] = [f"{s.size_diff / 2**20:+.2f} MB {s.count_diff:+d} blocks "
                                     f"{s.traceback[0].filename}:{s.traceback[0].lineno}"
                                     for s in snap.compare_to(state["first"], "lineno")[:8]]
        if trim:
            t0 = time.perf_counter()
            out["trimmed"] = memory.trim()
            out["trim_ms"] = 1e3 * (time.perf_counter() - t0)
            out["rss_after_trim_mb"] = _status()["VmRSS"]
        path = Path(report_dir) / f"report-{state['n']}.json"
        path.with_suffix(".tmp").write_text(json.dumps(out))
        path.with_suffix(".tmp").rename(path)
        state["n"] += 1

    signal.signal(signal.SIGUSR1, report)
    from oxygen_gym.cli import main

    sys.exit(main(["serve", *argv]))


# ---------------------------------------------------------------------------------------------- the batteries
def battery_messages(robot: str, cap: int) -> dict[str, list]:
    """Valid observations near the cap (a base image as large as fits under --max-image-pixels and the cap), and the
    hostile bench's container bombs, oversized prompts, over-cap message and junk."""
    from oxygen_gym.serve import wire

    from .serve_hostile import _attack_messages
    from .serve_load import openpi_observation

    rng = np.random.default_rng(0)
    obs = openpi_observation(robot, rng, "put the bowl on the plate")
    side = min(1440, int(((cap - 400_000) / 3) ** 0.5))
    obs["observation/image"] = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    big = wire.packb(obs)
    assert len(big) < cap, len(big)
    ov = _attack_messages(robot, "oversized")
    return {"big": [big], "bombs": _attack_messages(robot, "container_bomb")["container_bomb"],
            "oversized": ov["oversized"], "over_cap": ov["over_cap"], "junk": _attack_messages(robot, "junk")["junk"]}


async def _battery(uri: str, msgs: dict, connections: int, pipelined: int) -> dict:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    counts = {"actions": 0, "errors": 0, "closed": 0}

    async def session(sends: list, pipeline: bool) -> None:
        ws = await connect(uri, compression=None, max_size=None, proxy=None, open_timeout=120)
        try:
            await asyncio.wait_for(ws.recv(), 120)
            if pipeline:  # the server reads --max-buffered-frames ahead: the worst case it holds
                for m in sends:
                    await ws.send(m)
                replies = [await asyncio.wait_for(ws.recv(), 300) for _ in sends]
            else:
                replies = []
                for m in sends:
                    await ws.send(m)
                    replies.append(await asyncio.wait_for(ws.recv(), 300))
        except ConnectionClosed:
            counts["closed"] += 1
            return
        finally:
            try:
                await ws.close()
            except Exception:  # noqa: BLE001 - a connection the server already closed (1009) may fail to close again
                pass
        for r in replies:
            counts["actions" if isinstance(r, bytes) else "errors"] += 1

    await asyncio.gather(*(session(msgs["big"] * pipelined, True) for _ in range(connections)))
    await session(msgs["bombs"] + msgs["oversized"] + msgs["junk"], False)
    await session(msgs["over_cap"], False)
    return counts


def _idle(uri: str, timeout_s: float = 120) -> None:
    from .serve_load import http_stats

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = http_stats(uri)
        if (s["sessions"], s["pool_active"], s["requests_in_flight"]) == (0, 0, 0):
            time.sleep(0.5)
            return
        time.sleep(0.2)
    raise RuntimeError("the server did not go idle")


def _report(pid: int, out: Path, n: int, timeout_s: float = 300) -> dict:
    os.kill(pid, signal.SIGUSR1)
    path = out / f"report-{n}.json"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {path}")
        time.sleep(0.2)
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--robot", default="libero")
    p.add_argument("--batteries", type=int, default=5)
    p.add_argument("--connections", type=int, default=3)
    p.add_argument("--pipelined", type=int, default=3, help="messages each connection sends before reading replies")
    p.add_argument("--max-message-mb", type=float, default=8.0)
    p.add_argument("--tracemalloc", action="store_true", help="trace the Python heap (slows the server)")
    p.add_argument("--no-trim", action="store_true", help="report RSS without trimming the allocator")
    args = p.parse_args(argv)
    from oxygen_gym.serve import wire

    from .serve_load import Robot, openpi_observation

    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("report-*.json"):
        old.unlink()
    cap = int(args.max_message_mb * 2**20)
    srv_argv = ["--checkpoint", args.model, "--robot", args.robot, "--max-new-tokens", "3", "--decode-budget", "2",
                "--max-robots", str(args.connections + 1), "--max-message-mb", str(args.max_message_mb),
                "--window-ms", "5", "--host", "127.0.0.1", "--port", "0", "--threads", "1", "--max-seconds", "3600"]
    server = _start(args.out, not args.no_trim, args.tracemalloc, srv_argv)
    pid, res = server.proc.pid, {"config": vars(args) | {"out": str(args.out)}, "env": {
        k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}, "reports": []}
    try:
        res["idle_start"] = _status(pid)
        rng = np.random.default_rng(0)
        robot = Robot(server.uri, [wire.packb(openpi_observation(args.robot, rng, "put the bowl on the plate"))], 300)
        asyncio.run(_warm(robot))
        _idle(server.uri)
        res["idle_after_one_robot"] = _status(pid)
        msgs = battery_messages(args.robot, cap)
        n = 0
        res["reports"].append({"battery": 0, **_report(pid, args.out, n)})
        for b in range(1, args.batteries + 1):
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM: the peak below is this battery's
            t0 = time.monotonic()
            counts = asyncio.run(_battery(server.uri, msgs, args.connections, args.pipelined))
            _idle(server.uri)
            peak = _status(pid)["VmHWM"]
            n += 1
            rep = {"battery": b, "wall_s": time.monotonic() - t0, "peak_rss_mb": peak, **counts,
                   **_report(pid, args.out, n)}
            res["reports"].append(rep)
            print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in rep.items()
                              if k != "top_growth"}), flush=True)
            (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
        if res["reports"][-1].get("top_growth"):
            print("\n".join(res["reports"][-1]["top_growth"]))
    finally:
        server.stop()
    (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    return 0


def _start(out: Path, trim: bool, trace: bool, argv: list[str]):
    """`server_main` in a subprocess (as serve_load.start_server runs `oxygen-gym serve`), once it listens."""
    import subprocess

    from .serve_load import LISTENING, ServerProcess, _drain

    code = ("import sys; from oxygen_gym.eval.bench.serve_memory import server_main; "
            f"server_main({str(out)!r}, {trim}, {trace}, sys.argv[1:])")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        m = LISTENING.search(line)
        if m:
            _drain(proc, out / "server.log", lines)
            return ServerProcess("memory", proc, int(m.group(1)), lines, out / "server.log")
    raise RuntimeError("the server did not start:\n" + "\n".join(lines[-30:]))


async def _warm(robot) -> None:
    await robot.connect()
    await robot.run(3, None)
    await robot.close()


if __name__ == "__main__":
    sys.exit(main())
