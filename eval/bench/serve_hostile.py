"""`oxygen-gym bench serve --hostile`: a well-behaved robot's round trip while hostile clients attack the same server.

    oxygen-gym bench serve --hostile --model small --calls 20 --rounds 2 --out bench/serve-hostile

One server on loopback (the default `--max-message-mb 8`, `--idle-timeout-s 5`, room for the robot and one attack
kind's clients), one closed-loop robot. Rounds alternate phases on that server, so all see the same machine load: the
robot alone, then the robot while one attack kind runs (`--hostile-clients` clients of it, in one subprocess of their
own, so their client-side CPU does not share the robot's event loop), alone again, the next kind, ... (reversed on odd
rounds). The kinds (`--attacks`, default all):

- `oversized`: prompts over --max-prompt-chars and over --max-prompt-tokens (error replies), messages over the cap
  (the server closes with 1009; the client reconnects);
- `junk`: bytes that are not msgpack, text frames, malformed fields (ragged state, degenerate images, bad controls);
- `idle`: connect and stay silent, holding a robot slot until the idle timeout closes them, then reconnect;
- `storm`: connect/close and TCP-reset storms: full handshakes closed at once, TCP connections reset (RST) before and
  after the HTTP upgrade request, and handshakes refused (503) while the server is full;
- `shape_bomb`: an observation field as openpi's numpy map whose shape is [2**63] * N (a 540 KB one and one just under
  the cap): checking size against data must not multiply out a huge integer;
- `container_bomb`: just under the cap, a msgpack array of empty maps, one of empty arrays, and a map of 1.4 M integer
  keys: millions of Python objects from one message;
- `squatter`: take every free slot, then send one invalid byte every SQUAT_EVERY_S (< the idle timeout) to keep it;
  counted: the robot's own connection attempts refused with 503 while they squat, and whether the server closes them
  (they do not reconnect);
- `stats_spam`: the `stats` control as fast as the server answers.

Bounded: the attackers run only during hostile phases, pace themselves (ATTACK_PAUSE_S between attempts) and stop on
the phase's end or after --max-seconds; every wait has a timeout, so a server that freezes ends the run (with the
robot's error), not the bench; loopback only (the server binds 127.0.0.1). Reported per phase kind: the robot's
p50/p99 (alone and under each attack, interleaved), `/healthz` latency (polled all along, HEALTHZ_EVERY_S), what each
attack got back (error replies, refused handshakes by HTTP status, closes by code), the server's CPU time per attack
message (the server's /proc CPU during the phase, less what the robot's calls cost alone), its RSS after every phase,
and whether it still answers /healthz. Writes results.json and results.md under --out after every phase; exits 1 on a
violation (the robot saw an error or was locked out, an attack got a binary reply or an internal error, squatters kept
their slots, the server died or stopped answering).
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import shlex
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

KINDS = ("oversized", "junk", "idle", "storm", "shape_bomb", "container_bomb", "squatter", "stats_spam")
BINARY_OK = ("stats_spam",)  # kinds whose binary replies are legitimate (the stats acknowledgement)
CAP_MB = 8  # the server's default --max-message-mb: the bombs are as large as a default server accepts
IDLE_TIMEOUT_S = 5.0
ATTACK_PAUSE_S = 0.05  # between one attacker's attempts: a storm, but a bounded one
SQUAT_EVERY_S = 2.0  # a squatter's junk interval, under IDLE_TIMEOUT_S
CONNECT_WAIT_S = 3 * IDLE_TIMEOUT_S + 5  # the robot retries a refused connection this long, then reports a lock-out
HEALTHZ_EVERY_S = 0.2
REPLY_TIMEOUT_S = 60.0  # an attacker's wait for one reply (a frozen server: counted as failed_TimeoutError)


def parse_attacks(text: str) -> tuple[str, ...]:
    """`--attacks`: a comma list of KINDS, or `all`."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if names == ["all"]:
        return KINDS
    bad = [n for n in names if n not in KINDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"--attacks: unknown kind(s) {bad or text!r}; expected 'all' or a comma list of "
                                         f"{', '.join(KINDS)}")
    return tuple(dict.fromkeys(names))


def server_args(args: argparse.Namespace) -> list[str]:
    out = ["--checkpoint", args.model, "--robot", args.robot, "--max-robots", str(1 + args.hostile_clients),
           "--window-ms", str(args.window_ms), "--decode-budget", str(args.decode_budget),
           "--max-new-tokens", str(args.max_new_tokens), "--device", args.device,
           "--max-message-mb", str(CAP_MB), "--idle-timeout-s", str(IDLE_TIMEOUT_S)]
    return out + (["--no-language"] if args.no_language else [])


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid`, all its threads (/proc/PID/stat fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- the messages
def shape_bomb(base: dict, field: str, total_bytes: int) -> bytes:
    """`base` with `field` an openpi numpy map of no data whose shape is [2**63] * N, about `total_bytes` long."""
    from oxygen_gym.serve import wire

    head = len(wire.packb({**base, field: {b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": []}}))
    n = max(1, (total_bytes - head - 16) // 9)  # 2**63 packs as 0xcf + 8 bytes
    return wire.packb({**base, field: {b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [2**63] * n}})


def container_bombs(total_bytes: int) -> list[bytes]:
    """Three msgpack messages of about `total_bytes`: an array of empty maps, one of empty arrays, a map of integer keys
    (uint32 key, nil value: 6 bytes an entry)."""
    n = total_bytes - 5
    maps = b"\xdd" + struct.pack(">I", n) + b"\x80" * n
    arrays = b"\xdd" + struct.pack(">I", n) + b"\x90" * n
    k = (total_bytes - 5) // 6
    entries = np.empty((k, 6), np.uint8)
    entries[:, 0], entries[:, 5] = 0xCE, 0xC0
    entries[:, 1:5] = np.arange(k, dtype=">u4").view(np.uint8).reshape(k, 4)
    keys = b"\xdf" + struct.pack(">I", k) + entries.tobytes()
    return [maps, arrays, keys]


def _attack_messages(robot: str, kind: str) -> dict[str, list]:
    from oxygen_gym.serve import wire

    from .serve_load import openpi_observation

    rng = np.random.default_rng(1)
    base = lambda **kw: {**openpi_observation(robot, rng, "put the bowl on the plate"), **kw}  # noqa: E731
    cap = CAP_MB * 2**20
    if kind == "oversized":
        return {"oversized": [
            wire.packb(base(prompt="x" * (cap - 400_000))),  # under the message cap, far over --max-prompt-chars
            wire.packb(base(prompt="a b " * 240)),  # 960 characters, ~480 tokens: over --max-prompt-tokens
        ], "over_cap": [wire.packb(base(prompt="x" * (cap + 1024)))]}
    if kind == "junk":
        return {"junk": [
            bytes(rng.integers(0, 256, 4096, dtype=np.uint8)),
            b"\xc1" * 64,  # a byte msgpack never uses
            "a text frame, not msgpack",
            wire.packb([1, 2, 3]),
            wire.packb(base(**{"observation/state": [[1.0, 2.0], [3.0]]})),
            wire.packb(base(**{"observation/image": np.zeros((3, 3, 3), np.uint8)})),
            wire.packb(base(**{"observation/image": np.zeros((3, 224, 3), np.uint8)})),
            wire.packb(base(prompt={"nested": ["x" * 5000]})),
            wire.packb({"__ctrl__": [1, 2]}),
            wire.packb({"__ctrl__": "x" * 10_000}),
        ]}
    if kind == "shape_bomb":
        field = "observation/state" if robot != "aloha" else "state"
        return {"shape_bomb": [shape_bomb(base(), field, 540_000), shape_bomb(base(), field, cap - 8192)]}
    if kind == "container_bomb":
        return {"container_bomb": container_bombs(cap - 1024)}
    if kind == "stats_spam":
        return {"stats_spam": [wire.packb({"__ctrl__": "stats"})]}
    if kind == "squatter":
        return {"squatter": [b"\xc1"]}
    return {}


# ---------------------------------------------------------------------------------------------- the attackers
class Attack:
    """One phase's attackers of one kind."""

    def __init__(self, uri: str, kind: str, messages: dict, stop: asyncio.Event) -> None:
        self.uri, self.kind, self.messages, self.stop = uri, kind, messages, stop
        self.port = int(uri.rsplit(":", 1)[1])
        self.counts: Counter = Counter()
        self.first: list[asyncio.Event] = []  # one per attacker: set after its first attempt

    def _started(self) -> asyncio.Event:
        e = asyncio.Event()
        self.first.append(e)
        return e

    async def _connect(self):
        """A websocket past the handshake and the metadata, or None (refusal counted)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        c = self.counts
        try:
            ws = await connect(self.uri, compression=None, max_size=None, proxy=None, open_timeout=15, close_timeout=2)
            await asyncio.wait_for(ws.recv(), 15)
        except InvalidStatus as e:
            c[f"refused_http_{e.response.status_code}"] += 1
            return None
        except Exception as e:  # noqa: BLE001 - closed during the handshake, timeouts: counted, never fatal
            c[f"connect_failed_{type(e).__name__}"] += 1
            return None
        c["connected"] += 1
        return ws

    async def _pause(self, s: float = ATTACK_PAUSE_S) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), s)
        except TimeoutError:
            pass

    def _closed(self, ws) -> None:
        self.counts[f"closed_{ws.close_code}"] += 1

    def _reply(self, reply, ms: float) -> None:
        c = self.counts
        c["error_replies" if isinstance(reply, str) else "binary_replies"] += 1
        if isinstance(reply, str) and "internal error" in reply:  # an attack that reached a crash
            c["internal_errors"] += 1
        c["reply_ms_sum"] += ms
        c["reply_ms_max"] = max(c["reply_ms_max"], ms)

    async def talker(self, pause: float) -> None:
        """Send the kind's messages on one connection (for `oversized`, an over-cap one second and every fifth after),
        count the replies; reconnect when closed. The robot starts once the first message is on its way (for
        `oversized`, once the first two have met their refusals, a named error and the server's close: on a loaded
        machine the close of a message over the cap can come after a two-call phase ends), so even a two-call phase
        meets each refusal."""
        from websockets.exceptions import ConnectionClosed

        msgs, c, i, first = self.messages[self.kind], self.counts, 0, self._started()
        while not self.stop.is_set():
            ws = await self._connect()
            if ws is None:
                first.set()
                await self._pause(0.5)
                continue
            try:
                while not self.stop.is_set():
                    over = self.kind == "oversized" and i % 5 == 1
                    m = self.messages["over_cap"][0] if over else msgs[i % len(msgs)]
                    i += 1
                    c["sent"] += 1
                    t0 = time.perf_counter()
                    await ws.send(m)
                    if self.kind != "oversized":
                        first.set()  # oversized: set below, once the server has closed on the over-cap message
                    reply = await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT_S)
                    self._reply(reply, 1e3 * (time.perf_counter() - t0))
                    if pause:
                        await self._pause(pause)
            except ConnectionClosed:
                self._closed(ws)
            except Exception as e:  # noqa: BLE001
                c[f"failed_{type(e).__name__}"] += 1
            finally:
                first.set()
                await ws.close()

    async def idler(self) -> None:
        """Connect, say nothing; the server closes the session after its idle timeout; connect again."""
        from websockets.exceptions import ConnectionClosed

        first = self._started()
        while not self.stop.is_set():
            ws = await self._connect()
            first.set()
            if ws is None:
                await self._pause(0.5)
                continue
            recv = asyncio.ensure_future(ws.recv())
            stop = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait({recv, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if recv.done():
                try:
                    recv.result()
                    self.counts["unexpected_message"] += 1
                except ConnectionClosed:
                    self._closed(ws)
            else:
                recv.cancel()
            await ws.close()

    async def storm(self, n: int) -> None:
        """Handshake then close at once; TCP reset before and after the upgrade request; raw garbage HTTP."""
        c, first = self.counts, self._started()
        while not self.stop.is_set():
            step = n % 4
            n += 1
            c["attempts"] += 1
            if step == 0:
                ws = await self._connect()
                if ws is not None:
                    await ws.close()
            else:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
                except OSError:
                    c["tcp_failed"] += 1
                    continue
                if step >= 2:  # a websocket upgrade request (step 2) or garbage (step 3), then a reset
                    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                                 if step == 2 else b"\x16\x03\x01\x02\x00" + os.urandom(200) + b"\r\n\r\n")
                    await writer.drain()
                    try:
                        head = await asyncio.wait_for(reader.read(64), 0.2)
                        if head.startswith(b"HTTP/1.1 "):
                            c[f"http_{head[9:12].decode()}"] += 1
                    except (TimeoutError, OSError):
                        pass
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                writer.transport.abort()
                c["resets"] += 1
            first.set()
            await self._pause()

    async def _squat(self, ws) -> None:
        """Hold one slot: an invalid byte every SQUAT_EVERY_S until the server closes the session (no reconnect)."""
        from websockets.exceptions import ConnectionClosed

        c, t0 = self.counts, time.monotonic()
        try:
            while not self.stop.is_set():
                c["sent"] += 1
                t1 = time.perf_counter()
                await ws.send(self.messages["squatter"][0])
                self._reply(await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT_S), 1e3 * (time.perf_counter() - t1))
                closed = asyncio.ensure_future(ws.wait_closed())  # a close while it waits counts too
                stop = asyncio.ensure_future(self.stop.wait())
                await asyncio.wait({closed, stop}, timeout=SQUAT_EVERY_S, return_when=asyncio.FIRST_COMPLETED)
                closed.cancel()
                stop.cancel()
                if ws.close_code is not None:
                    raise ConnectionClosed(None, None)
            c["open_at_end"] += 1  # the server never closed it
        except ConnectionClosed:
            self._closed(ws)
        except Exception as e:  # noqa: BLE001
            c[f"failed_{type(e).__name__}"] += 1
        finally:
            c["held_s_sum"] += time.monotonic() - t0
            await ws.close()

    async def squatters(self, tasks: list) -> None:
        """Connect until the server refuses (503): every free slot is then a squatter's."""
        for _ in range(1024):
            ws = await self._connect()
            if ws is None:
                break
            tasks.append(asyncio.ensure_future(self._squat(ws)))

    async def run(self, per_kind: int, ready) -> None:
        tasks: list = []
        if self.kind == "squatter":
            await self.squatters(tasks)
        elif self.kind == "idle":
            tasks += [asyncio.ensure_future(self.idler()) for _ in range(per_kind)]
        elif self.kind == "storm":
            tasks += [asyncio.ensure_future(self.storm(i)) for i in range(per_kind)]
        else:
            pause = 0.0 if self.kind == "stats_spam" else ATTACK_PAUSE_S
            tasks += [asyncio.ensure_future(self.talker(pause)) for _ in range(per_kind)]
        if self.first:  # every attacker has made its first attempt (a bomb is on its way) before the robot starts
            await asyncio.wait([asyncio.ensure_future(e.wait()) for e in self.first], timeout=20)
        ready()
        await self.stop.wait()
        if tasks:
            await asyncio.wait(tasks, timeout=20)
        for t in tasks:
            t.cancel()


def attack_main(uri: str, robot: str, per_kind: int, max_seconds: float) -> None:
    """The attackers' process, for the whole run. Reads `start KIND` / `stop` lines on stdin; prints `ready` once a
    kind's attackers run, and that phase's counts as one JSON line after `stop`. Exits on stdin's end or max_seconds."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max_seconds, os._exit, 3)
        cache: dict[str, dict] = {}
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
            if not line:
                return
            if line[0] != "start" or len(line) != 2:
                continue
            kind = line[1]
            if kind not in cache:
                cache[kind] = _attack_messages(robot, kind)
            stop = asyncio.Event()
            attack = Attack(uri, kind, cache[kind], stop)
            running = asyncio.ensure_future(attack.run(per_kind, lambda: print("ready", flush=True)))
            while (await loop.run_in_executor(None, sys.stdin.readline)).strip() not in ("stop", ""):
                pass
            stop.set()
            await running
            print(json.dumps(dict(attack.counts)), flush=True)

    asyncio.run(main())
    os._exit(0)  # the stdin reader thread may still block


class Attackers:
    """The attack subprocess, started once: `start(kind)` before a hostile phase, `stop()` after it."""

    def __init__(self, uri: str, robot: str, per_kind: int, max_seconds: float) -> None:
        import queue

        code = ("from oxygen_gym.eval.bench.serve_hostile import attack_main; "
                f"attack_main({uri!r}, {robot!r}, {per_kind}, {max_seconds})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()

    def _send(self, line: str, timeout_s: float) -> str:
        """Write one command line; the process's next output line ('' if none within `timeout_s`)."""
        import queue

        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return self.lines.get(timeout=timeout_s)
        except (OSError, queue.Empty):
            return ""

    def start(self, kind: str) -> None:
        line = self._send(f"start {kind}", 120)
        if line.strip() != "ready":
            raise RuntimeError(f"the attackers ({kind}) did not start: {line!r}")

    def stop(self) -> dict:
        line = self._send("stop", 90)
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"no counts from the attackers: {line[-500:]!r}"}

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------- /healthz
class HealthPoller(threading.Thread):
    """GET /healthz every HEALTHZ_EVERY_S on a fresh connection (as a load balancer does), all run long; a reply
    later than `timeout_s` or none counts as a failure."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.port, self.timeout_s = port, timeout_s
        # (when it was sent, when it ended, latency ms or None)
        self.samples: list[tuple[float, float, float | None]] = []
        self.in_flight_since: float | None = None  # the send time of the poll awaiting its reply
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            t0, ms = time.monotonic(), None
            self.in_flight_since = t0
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
                c.request("GET", "/healthz", headers={"Host": "127.0.0.1"})
                if c.getresponse().status == 200:
                    ms = 1e3 * (time.monotonic() - t0)
                c.close()
            except OSError:
                pass
            self.samples.append((t0, time.monotonic(), ms))
            self.in_flight_since = None
            self.halt.wait(HEALTHZ_EVERY_S)

    def wait_for_poll_since(self, t0: float) -> None:
        """Block until a poll sent at or after t0 has ended (up to its timeout): a phase lasts at least one health
        poll, so a short phase on a loaded machine still measures /healthz under its attack."""
        deadline = time.monotonic() + HEALTHZ_EVERY_S + self.timeout_s + 1.0
        while (not any(sent >= t0 for sent, _, _ in list(self.samples)) and not self.halt.is_set()
               and time.monotonic() < deadline):
            time.sleep(0.01)

    def between(self, t0: float, t1: float) -> dict:
        """The polls that saw the server between t0 and t1: sent before t1 and answered (or failed) after t0. A poll
        still in flight at t1 is waited for (up to its timeout): on a loaded machine one slow reply can span a
        whole short phase, and it is that phase's measurement."""
        deadline = time.monotonic() + self.timeout_s + 1.0
        while (self.in_flight_since is not None and self.in_flight_since < t1 and not self.halt.is_set()
               and time.monotonic() < deadline):
            time.sleep(0.01)
        got = [ms for sent, ended, ms in list(self.samples) if sent < t1 and ended >= t0]
        ok = [ms for ms in got if ms is not None]
        out = {"polls": len(got), "failures": len(got) - len(ok)}
        if ok:
            out.update(p50_ms=float(np.percentile(ok, 50)), p99_ms=float(np.percentile(ok, 99)), max_ms=float(max(ok)))
        return out


# ---------------------------------------------------------------------------------------------- the measurement
def _add(total: dict, kind: str, counts: dict) -> None:
    t = total.setdefault(kind, {})
    for k, v in counts.items():
        if isinstance(v, int | float):
            t[k] = max(t.get(k, 0), v) if k.endswith("_max") else t.get(k, 0) + v
        else:
            t.setdefault("errors", []).append(v)


def refusals(attacks: dict) -> dict:
    """Per kind: error replies, refused handshakes (HTTP 4xx/5xx) and server closes (1009 too big, 1000 idle, 1008
    policy)."""
    out = {}
    for kind, c in attacks.items():
        refused = sum(v for k, v in c.items() if k.startswith(("refused_http_", "http_4", "http_5")))
        out[kind] = {"error_replies": c.get("error_replies", 0), "refused_handshakes": refused,
                     "closed_by_server": sum(v for k, v in c.items() if k.startswith("closed_")),
                     "binary_replies": c.get("binary_replies", 0), "internal_errors": c.get("internal_errors", 0)}
    return out


def attack_messages(c: dict) -> int:
    """What one kind's attack sent: messages, else connection attempts (storm), else connections (idle)."""
    return int(c.get("sent") or c.get("attempts") or c.get("connected") or 0)


def _summary(lat: list[float]) -> dict:
    if not lat:
        return {"calls": 0}
    return {"calls": len(lat), "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)), "latency_ms_mean": float(np.mean(lat)),
            "latency_ms_max": float(np.max(lat))}


def _ratio(s: dict, alone: dict) -> dict:
    if not (s.get("calls") and alone.get("calls")):
        return {}
    return {"p50": s["latency_ms_p50"] / alone["latency_ms_p50"], "p99": s["latency_ms_p99"] / alone["latency_ms_p99"]}


def per_attack(lat: dict, attacks: dict, phases: list[dict], kinds: tuple[str, ...]) -> dict:
    """Per kind: the robot's latency and its ratio to alone, /healthz during it, the server's CPU per attack message
    (the phase's CPU less the robot's calls at the alone rate), and what the robot's connection attempts met."""
    alone_ph = [p for p in phases if p["phase"] == "alone" and p.get("server_cpu_s") is not None]
    robot_calls = sum(p["robot_calls"] for p in alone_ph)
    per_call = sum(p["server_cpu_s"] for p in alone_ph) / robot_calls if robot_calls else None
    alone = _summary(lat["alone"])
    out = {}
    for kind in kinds:
        ph = [p for p in phases if p["phase"] == kind]
        if not ph:
            continue
        s = _summary(lat[kind])
        polls = [p["healthz"] for p in ph]
        ok = [p for p in polls if "max_ms" in p]
        c = attacks.get(kind, {})
        sent = attack_messages(c)
        entry = {
            "robot": {**s, "over_alone": _ratio(s, alone)},
            "healthz": {"polls": sum(p["polls"] for p in polls), "failures": sum(p["failures"] for p in polls),
                        "p50_ms_worst_phase": max((p["p50_ms"] for p in ok), default=None),
                        "max_ms": max((p["max_ms"] for p in ok), default=None)},
            "messages": sent,
            "robot_connect_refused_503": sum(p.get("robot_refused_503", 0) for p in ph),
            "robot_connect_wait_s_max": max(p.get("robot_connect_s", 0.0) for p in ph),
        }
        cpu = [p["server_cpu_s"] for p in ph if p.get("server_cpu_s") is not None]
        if per_call is not None and len(cpu) == len(ph) and sent:
            attack_cpu = sum(cpu) - per_call * sum(p["robot_calls"] for p in ph)
            entry["server_cpu_s"] = sum(cpu)
            entry["server_cpu_ms_per_message"] = max(0.0, 1e3 * attack_cpu / sent)
        if kind == "squatter":
            entry["squatters"] = c.get("connected", 0)
            entry["squatters_closed"] = sum(v for k, v in c.items() if k.startswith("closed_"))
            entry["squatters_open_at_end"] = c.get("open_at_end", 0)
            entry["squat_s_mean"] = c.get("held_s_sum", 0.0) / c["connected"] if c.get("connected") else None
        if c.get("error_replies") or c.get("binary_replies"):
            entry["reply_ms_mean"] = c.get("reply_ms_sum", 0.0) / (c.get("error_replies", 0) + c.get("binary_replies", 0))
            entry["reply_ms_max"] = c.get("reply_ms_max")
        if kind == "stats_spam" and ph:
            entry["messages_per_s"] = sent / max(1e-9, sum(p["wall_s"] for p in ph))
        out[kind] = entry
    return out


def violations(res: dict) -> list[str]:
    """What the server must never do under these attacks, as found in `res`."""
    out = [f"robot: {e}" for e in res["robot"]["errors"]]
    for kind, f in res["refused"].items():
        if f["binary_replies"] and kind not in BINARY_OK:
            out.append(f"{kind}: {f['binary_replies']} binary replies (an attack message was accepted)")
        if f["internal_errors"]:
            out.append(f"{kind}: {f['internal_errors']} internal errors")
    for kind, c in res["attacks"].items():
        out += [f"{kind}: {e}" for e in c.get("errors", [])]
    sq = res["per_attack"].get("squatter", {})
    if sq.get("squatters_open_at_end"):
        out.append(f"squatter: {sq['squatters_open_at_end']} of {sq['squatters']} squatters kept their slot to the "
                   "phase's end")
    srv = res["server"]
    if srv.get("alive") is False or srv.get("healthz_ok") is False:
        out.append(f"server: alive {srv.get('alive')}, /healthz answered {srv.get('healthz_ok')}")
    if srv.get("stopped"):
        out.append(f"stopped early: {srv['stopped']}")
    return out


def _results(config: dict, lat: dict, attacks: dict, robot_errors: list, phases: list, server: dict) -> dict:
    kinds = tuple(config["kinds"])
    alone = _summary(lat["alone"])
    hostile = _summary([x for k in kinds for x in lat[k]])
    res = {"config": config, "robot": {"alone": alone, "hostile": hostile, "hostile_over_alone": _ratio(hostile, alone),
                                        "errors": robot_errors},
           "attacks": attacks, "refused": refusals(attacks), "per_attack": per_attack(lat, attacks, phases, kinds),
           "phases": phases, "server": server}
    res["violations"] = violations(res)
    return res


HEAD = "| phase | calls | p50 ms | p99 ms | mean ms | max ms | healthz p50 ms | healthz max ms | healthz failures |"


def _f(x, fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(results: dict) -> str:
    cfg, rob, pa = results["config"], results["robot"], results["per_attack"]
    lines = ["# oxygen-gym bench serve --hostile", "", f"`{cfg['command']}`", "",
             f"- model `{cfg['model']}`, robot `{cfg['robot']}`, {cfg['hostile_clients']} hostile client(s) of each kind, "
             f"server: {' '.join(cfg['server_args'])}",
             f"- {cfg['machine']}; load average before {cfg['load_before']}, after {cfg.get('load_after')}; "
             f"wall {cfg.get('wall_s', 0):.0f} s", "", HEAD, "|" + " --- |" * 9]
    alone_polls = [p["healthz"] for p in results["phases"] if p["phase"] == "alone"]
    ok = [p for p in alone_polls if "max_ms" in p]
    rows = [("alone", rob["alone"], {"p50_ms_worst_phase": max((p["p50_ms"] for p in ok), default=None),
                                     "max_ms": max((p["max_ms"] for p in ok), default=None),
                                     "failures": sum(p["failures"] for p in alone_polls)})]
    rows += [(k, v["robot"], v["healthz"]) for k, v in pa.items()]
    for name, s, h in rows:
        if s.get("calls"):
            lines.append(f"| {name} | {s['calls']} | {s['latency_ms_p50']:.0f} | {s['latency_ms_p99']:.0f} | "
                         f"{s['latency_ms_mean']:.0f} | {s['latency_ms_max']:.0f} | {_f(h['p50_ms_worst_phase'])} | "
                         f"{_f(h['max_ms'])} | {h['failures']} |")
        else:
            lines.append(f"| {name} | 0 | - | - | - | - | {_f(h['p50_ms_worst_phase'])} | {_f(h['max_ms'])} | "
                         f"{h['failures']} |")
    r = rob["hostile_over_alone"]
    if r:
        lines.append(f"\nhostile (all kinds) / alone: p50 {r['p50']:.2f}x, p99 {r['p99']:.2f}x; robot errors: "
                     f"{len(rob['errors'])}")
    lines += ["", "| attack | sent | error replies | refused handshakes | closed by server | binary replies | "
              "server CPU ms / message | robot's 503s | all counts |", "|" + " --- |" * 9]
    for kind, f in results["refused"].items():
        counts = ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in sorted(results["attacks"][kind].items()) if k != "errors")
        e = pa.get(kind, {})
        lines.append(f"| {kind} | {e.get('messages', 0)} | {f['error_replies']} | {f['refused_handshakes']} | "
                     f"{f['closed_by_server']} | {f['binary_replies']} | {_f(e.get('server_cpu_ms_per_message'), '{:.2f}')} "
                     f"| {e.get('robot_connect_refused_503', 0)} | {counts} |")
    sq = pa.get("squatter")
    if sq:
        lines.append(f"\nsquatter: {sq['squatters']} squatters, {sq['squatters_closed']} closed by the server, "
                     f"{sq['squatters_open_at_end']} still open at the phase's end, held {_f(sq['squat_s_mean'], '{:.1f}')} s "
                     f"on average; the robot was refused {sq['robot_connect_refused_503']} time(s) (503) and waited "
                     f"{sq['robot_connect_wait_s_max']:.1f} s at most")
    if "stats_spam" in pa:
        lines.append(f"\nstats_spam: {pa['stats_spam'].get('messages_per_s', 0):.0f} messages/s")
    srv = results["server"]
    lines += ["", f"server: RSS MB at start {srv.get('rss_mb_start')}, after each phase {srv.get('rss_mb_after_phase')}; "
              f"healthz at the end: {srv.get('healthz_ok')}; alive {srv.get('alive')}; frames dropped "
              f"{srv.get('frames_dropped')}", "",
              "violations: " + ("none" if not results["violations"] else "; ".join(results["violations"]))]
    return "\n".join(lines) + "\n"


async def _robot_phase(uri: str, messages: list[bytes], calls: int, warmup: int, timeout_s: float,
                       lat: list[float], errors: list, info: dict) -> None:
    """Connect (retrying while refused, up to CONNECT_WAIT_S: a squatter or a storm may hold the server full), then
    `warmup` untimed and `calls` timed calls. `info` gets the refusals and the wait."""
    from websockets.exceptions import InvalidStatus

    from .serve_load import Robot

    robot = Robot(uri, messages, timeout_s)
    t0 = time.monotonic()
    while True:
        try:
            await robot.connect()
            break
        except InvalidStatus as e:
            key = "robot_refused_503" if e.response.status_code == 503 else f"robot_refused_{e.response.status_code}"
            info[key] = info.get(key, 0) + 1
        except Exception as e:  # noqa: BLE001 - counted apart from the robot's errors
            info[f"robot_connect_{type(e).__name__}"] = info.get(f"robot_connect_{type(e).__name__}", 0) + 1
        if time.monotonic() - t0 > CONNECT_WAIT_S:
            errors.append(f"locked out: could not connect in {CONNECT_WAIT_S:g} s "
                          f"({ {k: v for k, v in info.items() if k.startswith('robot_')} })")
            return
        await asyncio.sleep(0.25)
    info["robot_connect_s"] = time.monotonic() - t0
    try:
        for i in range(warmup + calls):
            msg = robot.messages[robot.sent % len(robot.messages)]
            robot.sent += 1
            t1 = time.perf_counter()
            try:
                out = await robot.call(msg)
                assert out["actions"].ndim == 2
            except Exception as e:  # noqa: BLE001 - recorded; the phase goes on
                errors.append(f"call: {type(e).__name__}: {str(e)[:200]}")
                return
            finally:
                info["robot_calls"] = info.get("robot_calls", 0) + 1
            if i >= warmup:
                lat.append(1e3 * (time.perf_counter() - t1))
    finally:
        await robot.close()


def _wait_idle(uri: str, timeout_s: float = 60.0) -> dict | None:
    """The server's stats once no session, slot or request is left; None if it does not answer /stats in time."""
    from .serve_load import http_stats

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            s = http_stats(uri, timeout_s=max(1.0, deadline - time.monotonic()))
        except OSError:
            return None
        if (s["sessions"], s["pool_active"], s["requests_in_flight"]) == (0, 0, 0) or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def schedule(kinds: tuple[str, ...], rnd: int) -> list[str]:
    """One round's phases: alone before each attack kind (reversed on odd rounds, so drift cancels)."""
    out = [p for k in kinds for p in ("alone", k)]
    return out if rnd % 2 == 0 else out[::-1]


def run(args: argparse.Namespace) -> int:
    from oxygen_gym.serve import wire

    from .serve_load import openpi_observation, start_server

    if args.calls < 1 or args.rounds < 1 or args.warmup < 0 or args.threads < 1 or args.hostile_clients < 1:
        print("oxygen-gym bench serve --hostile: --calls, --rounds, --threads and --hostile-clients must be >= 1, "
              "--warmup >= 0", file=sys.stderr)
        return 2
    kinds = tuple(args.attacks)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.max_seconds
    srv_args = server_args(args)
    config = {
        "command": "oxygen-gym bench serve " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        if sys.argv[1:3] == ["bench", "serve"] else "oxygen-gym bench serve --hostile",
        "model": args.model, "robot": args.robot, "calls": args.calls, "rounds": args.rounds, "warmup": args.warmup,
        "hostile_clients": args.hostile_clients, "kinds": list(kinds), "server_args": srv_args,
        "threads": args.threads, "attack_pause_s": ATTACK_PAUSE_S, "squat_every_s": SQUAT_EVERY_S,
        "healthz_every_s": HEALTHZ_EVERY_S,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_before": [round(x, 2) for x in os.getloadavg()], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    rng = np.random.default_rng(0)
    messages = [wire.packb(openpi_observation(args.robot, rng, "put the bowl on the plate")) for _ in range(4)]
    lat: dict[str, list[float]] = {p: [] for p in ("alone", *kinds)}
    attacks: dict = {}
    robot_errors: list = []
    phases: list = []
    server_info: dict = {"rss_mb_after_phase": []}
    per_round = max(1, -(-args.calls // args.rounds))
    server = start_server("hostile", srv_args, threads=args.threads, max_seconds=args.max_seconds + 600,
                          log_file=args.out / "server-hostile.log")
    pid = server.proc.pid
    poller = HealthPoller(server.port)
    attackers = None

    def write() -> dict:
        config["load_after"] = [round(x, 2) for x in os.getloadavg()]
        config["wall_s"] = time.monotonic() - started
        res = _results(config, lat, attacks, robot_errors, phases, server_info)
        (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
        (args.out / "results.md").write_text(markdown(res))
        return res

    try:
        server_info["rss_mb_start"] = round(_rss_mb(pid) or 0, 1)
        poller.start()
        attackers = Attackers(server.uri, args.robot, args.hostile_clients, args.max_seconds + 300)
        print("| round | phase | calls | p50 ms | p99 ms | mean ms | max ms | healthz max ms |", flush=True)
        done, rnd = 0, 0
        while done < args.calls and time.monotonic() < deadline and not server_info.get("stopped"):
            calls = min(per_round, args.calls - done)
            for phase in schedule(kinds, rnd):
                if time.monotonic() > deadline:
                    break
                info: dict = {}
                t0, cpu0 = time.monotonic(), cpu_s(pid)
                if phase != "alone":
                    try:
                        attackers.start(phase)
                    except RuntimeError as e:
                        server_info["stopped"] = str(e)
                        break
                n0 = len(lat[phase])
                try:
                    asyncio.run(_robot_phase(server.uri, messages, calls, args.warmup, args.call_timeout,
                                             lat[phase], robot_errors, info))
                    poller.wait_for_poll_since(t0)  # the attack runs on until a health poll has seen it
                finally:
                    if phase != "alone":
                        _add(attacks, phase, attackers.stop())
                wall = time.monotonic() - t0
                idle = _wait_idle(server.uri)
                cpu1 = cpu_s(pid)
                server_info["rss_mb_after_phase"].append(round(_rss_mb(pid) or 0, 1))
                s = _summary(lat[phase][n0:])
                rec = {"round": rnd, "phase": phase, **s, "wall_s": wall, "robot_calls": info.get("robot_calls", 0),
                       "server_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
                       "healthz": poller.between(t0, time.monotonic()),
                       **{k: v for k, v in info.items() if k.startswith("robot_") and k != "robot_calls"}}
                if idle is None:
                    server_info["stopped"] = f"no /stats answer within 60 s after the {phase} phase"
                else:
                    server_info["frames_dropped"] = idle["totals"]["frames_dropped"]
                    rec["sessions_left"] = idle["sessions"]
                phases.append(rec)
                h = rec["healthz"]
                print(f"| {rnd} | {phase} | {s.get('calls', 0)} | {_f(s.get('latency_ms_p50'))} | "
                      f"{_f(s.get('latency_ms_p99'))} | {_f(s.get('latency_ms_mean'))} | {_f(s.get('latency_ms_max'))} | "
                      f"{_f(h.get('max_ms'))} |", flush=True)
                write()
                if idle is None or server.proc.poll() is not None:
                    break
            done += calls
            rnd += 1
        config["partial"] = done < args.calls
        if config["partial"]:
            print("oxygen-gym bench serve --hostile: stopped early (--max-seconds, or the server stopped answering)",
                  file=sys.stderr)
        try:
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            c.request("GET", "/healthz", headers={"Host": "127.0.0.1"})
            server_info["healthz_ok"] = c.getresponse().status == 200
        except OSError:
            server_info["healthz_ok"] = False
        server_info["alive"] = server.proc.poll() is None
    finally:
        poller.halt.set()
        if attackers is not None:
            attackers.close()
        server.stop()
    res = write()
    print(markdown(res))
    return 1 if res["violations"] else 0
