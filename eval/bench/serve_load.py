"""Load for `oxygen-gym bench serve`: policy servers in subprocesses on loopback, robots as websocket clients.

Clients send pre-packed openpi observations (packing costs the server's CPU nothing and the client little), one call
at a time per robot (closed loop: a robot sends its next observation when it has its actions), and time each call.
Everything is bounded: a server exits by itself after `max_seconds`, every receive has a timeout.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oxygen_gym.serve import wire

LISTENING = re.compile(r"listening on ws://[^:]+:(\d+)")


@dataclass
class ServerProcess:
    name: str
    proc: subprocess.Popen
    port: int
    log: list[str] = field(default_factory=list)
    log_file: Path | None = None  # the server's whole output, kept (an internal error's details are only there)

    @property
    def uri(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def start_server(name: str, args: list[str], *, threads: int, max_seconds: float, startup_s: float = 600,
                 log_file: Path | None = None) -> ServerProcess:
    """`oxygen-gym serve ARGS --port 0` in a subprocess with `threads` torch threads; waits for its port. With
    `log_file`, everything the server prints is written there as it comes; otherwise it is read and dropped."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, "-m", "oxygen_gym.cli", "serve", *args, "--host", "127.0.0.1", "--port", "0",
           "--threads", str(threads), "--max-seconds", str(max_seconds)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    deadline = time.monotonic() + startup_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        m = LISTENING.search(line)
        if m:
            _drain(proc, log_file, lines)
            return ServerProcess(name, proc, int(m.group(1)), lines, log_file)
    proc.kill()
    raise RuntimeError(f"server {name} did not start:\n" + "\n".join(lines[-30:]))


def _drain(proc: subprocess.Popen, log_file: Path | None, startup_lines: list[str]) -> None:
    """Keep reading the server's log so its pipe never fills, into `log_file` when given (start-up lines first)."""
    import threading

    def run() -> None:
        if log_file is None:
            for _ in proc.stdout:
                pass
            return
        with open(log_file, "w") as f:
            f.write("".join(line + "\n" for line in startup_lines))
            for line in proc.stdout:
                f.write(line)
                f.flush()

    threading.Thread(target=run, daemon=True).start()


def openpi_observation(robot: str, rng: np.random.Generator, prompt: str) -> dict:
    """An observation with the keys openpi's example loops send for `robot` (serve/observations.py)."""
    img = lambda: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)  # noqa: E731
    if robot == "libero":
        return {"observation/image": img(), "observation/wrist_image": img(),
                "observation/state": rng.uniform(-0.5, 0.5, 8), "prompt": prompt}
    if robot == "droid":
        return {"observation/exterior_image_1_left": img(), "observation/wrist_image_left": img(),
                "observation/joint_position": rng.uniform(-0.5, 0.5, 7), "observation/gripper_position": rng.uniform(0, 1, 1),
                "prompt": prompt}
    if robot == "aloha":
        chw = lambda: np.transpose(img(), (2, 0, 1)).copy()  # noqa: E731
        state = rng.uniform(-0.5, 0.5, 14)
        state[[6, 13]] = rng.uniform(0.2, 0.8, 2)
        return {"images": {"cam_high": chw(), "cam_left_wrist": chw(), "cam_right_wrist": chw()}, "state": state,
                "prompt": prompt}
    raise ValueError(f"robot: unknown robot {robot!r}")


def http_stats(uri: str, api_key: str | None = None, timeout_s: float = 30.0) -> dict:
    """`GET /stats` of the server at `uri` (ws://host:port), never through a proxy."""
    import json
    import urllib.request

    req = urllib.request.Request(uri.replace("ws://", "http://", 1) + "/stats")
    if api_key:
        req.add_header("Authorization", f"Api-Key {api_key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout_s) as r:
        return json.loads(r.read())


@dataclass
class RobotLog:
    latencies_ms: list[float] = field(default_factory=list)
    actions: int = 0
    tokens: int = 0


class Robot:
    """One websocket connection sending a cycle of pre-packed observations."""

    def __init__(self, uri: str, messages: list[bytes], timeout_s: float) -> None:
        self.uri, self.messages, self.timeout_s = uri, messages, timeout_s
        self.ws = None
        self.metadata: dict = {}
        self.sent = 0

    async def connect(self) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(self.uri, compression=None, max_size=None, open_timeout=self.timeout_s, proxy=None)
        self.metadata = wire.unpackb(await asyncio.wait_for(self.ws.recv(), self.timeout_s))

    async def call(self, message: bytes) -> dict:
        await self.ws.send(message)
        reply = await asyncio.wait_for(self.ws.recv(), self.timeout_s)
        if isinstance(reply, str):
            raise RuntimeError(f"server error: {reply}")
        return wire.unpackb(reply)

    async def run(self, calls: int, log: RobotLog | None) -> None:
        for _ in range(calls):
            msg = self.messages[self.sent % len(self.messages)]
            self.sent += 1
            t0 = time.perf_counter()
            out = await self.call(msg)
            if log is not None:
                log.latencies_ms.append(1e3 * (time.perf_counter() - t0))
                log.actions += int(out["actions"].shape[0])
                log.tokens += sum(len(u["new_token_ids"]) for u in out.get("language", []))

    async def server_stats(self) -> dict:
        """The server-wide stats (`GET /stats`; the websocket's stats control shows a session only its own)."""
        return {"server": await asyncio.to_thread(http_stats, self.uri)}

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


async def run_round(robots: list[Robot], calls: int, logs: list[RobotLog] | None) -> float:
    """Every robot makes `calls` calls at once (closed loop); returns the wall time in seconds."""
    t0 = time.perf_counter()
    await asyncio.gather(*(r.run(calls, logs[i] if logs else None) for i, r in enumerate(robots)))
    return time.perf_counter() - t0


def server_args(args: argparse.Namespace, batching: str) -> list[str]:
    """`oxygen-gym serve` flags for a bench's server from its parsed `bench serve` arguments."""
    out = ["--checkpoint", args.model, "--robot", args.robot, "--max-robots", str(max(args.robots)),
           "--batching", batching, "--window-ms", str(args.window_ms), "--decode-budget", str(args.decode_budget),
           "--max-new-tokens", str(args.max_new_tokens), "--device", args.device]
    return out + (["--no-language"] if args.no_language else [])


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, recorded before and after a bench (the machine's noise)."""
    return [round(x, 2) for x in os.getloadavg()]


def batch_delta(a: dict, b: dict) -> dict:
    """The server's batches between two stats reads: robots per batch, mean batch time and its stages."""
    n = b["batches"] - a["batches"]
    if n <= 0:
        return {}
    return {
        "batches": n,
        "robots_per_batch": (b["robot_frames"] - a["robot_frames"]) / n,
        "batch_ms": (b["frame_ms"] - a["frame_ms"]) / n,
        "stage_ms": {s: (b["stage_ms"].get(s, 0.0) - a["stage_ms"].get(s, 0.0)) / n for s in b["stage_ms"]},
    }
