"""`oxygen-gym bench serve --hostile`: a well-behaved robot's round trip while hostile clients attack the same server.

    oxygen-gym bench serve --hostile --model small --calls 100 --out bench/serve-hostile

One server on loopback (`--max-message-mb 2`, `--idle-timeout-s 5`, room for the robot and every attacker but the
storms), one closed-loop robot. Rounds alternate two phases on that server, so both see the same machine load: the
robot alone, and the robot while `--hostile-clients` clients of each kind attack (in one subprocess of their own, so
their client-side CPU does not share the robot's event loop):

- `oversized`: prompts over --max-prompt-chars and over --max-prompt-tokens (error replies), messages over the cap
  (the server closes with 1009; the client reconnects);
- `junk`: bytes that are not msgpack, text frames, malformed fields (ragged state, degenerate images, bad controls);
- `idle`: connect and stay silent, holding a robot slot until the idle timeout closes them, then reconnect;
- `storm`: connect/close and TCP-reset storms: full handshakes closed at once, TCP connections reset (RST) before and
  after the HTTP upgrade request, and handshakes refused (503) while the server is full.

Bounded: the attackers run only during hostile phases, pace themselves (`ATTACK_PAUSE_S` between attempts) and stop
on the phase's end or after --max-seconds; loopback only (the server binds 127.0.0.1). Reported: the robot's p50/p99
alone and under attack and their ratio, what each attack kind got back (error replies, refused handshakes by HTTP
status, closes by code), the robot's own errors (should be none), the server's RSS, and whether it still answers
/healthz. Writes results.json and results.md under --out after every phase.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

KINDS = ("oversized", "junk", "idle", "storm")
PHASES = ("alone", "hostile")
CAP_MB = 2
IDLE_TIMEOUT_S = 5.0
ATTACK_PAUSE_S = 0.05  # between one attacker's attempts: a storm, but a bounded one


def server_args(args: argparse.Namespace) -> list[str]:
    n = args.hostile_clients
    out = ["--checkpoint", args.model, "--robot", args.robot, "--max-robots", str(1 + 3 * n),
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


# ---------------------------------------------------------------------------------------------- the attackers
def _attack_messages(robot: str) -> dict[str, list]:
    from oxygen_gym.serve import wire

    from .serve_load import openpi_observation

    rng = np.random.default_rng(1)
    base = lambda **kw: {**openpi_observation(robot, rng, "put the bowl on the plate"), **kw}  # noqa: E731
    cap = CAP_MB * 2**20
    oversized = [
        wire.packb(base(prompt="x" * (cap - 400_000))),  # under the message cap, far over --max-prompt-chars
        wire.packb(base(prompt="a b " * 240)),  # 960 characters, ~480 tokens: over --max-prompt-tokens
    ]
    over_cap = wire.packb(base(prompt="x" * (cap + 1024)))
    junk = [
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
    ]
    return {"oversized": oversized, "over_cap": [over_cap], "junk": junk}


class Attack:
    def __init__(self, uri: str, messages: dict, stop: asyncio.Event) -> None:
        self.uri, self.messages, self.stop = uri, messages, stop
        self.port = int(uri.rsplit(":", 1)[1])
        self.counts = {k: Counter() for k in KINDS}

    async def _connect(self, kind: str):
        """A websocket past the handshake and the metadata, or None (refusal counted)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        c = self.counts[kind]
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

    def _closed(self, kind: str, ws) -> None:
        self.counts[kind][f"closed_{ws.close_code}"] += 1

    async def talker(self, kind: str) -> None:
        """oversized / junk: send bad messages on one connection, count the replies; reconnect when closed."""
        from websockets.exceptions import ConnectionClosed

        msgs = self.messages[kind]
        c, i = self.counts[kind], 0
        while not self.stop.is_set():
            ws = await self._connect(kind)
            if ws is None:
                await self._pause(0.5)
                continue
            try:
                while not self.stop.is_set():
                    over = kind == "oversized" and i % 5 == 4
                    m = self.messages["over_cap"][0] if over else msgs[i % len(msgs)]
                    i += 1
                    c["sent"] += 1
                    await ws.send(m)
                    reply = await asyncio.wait_for(ws.recv(), 60)
                    c["error_replies" if isinstance(reply, str) else "binary_replies"] += 1
                    if isinstance(reply, str) and "internal error" in reply:  # an attack that reached a crash
                        c["internal_errors"] += 1
                    await self._pause()
            except ConnectionClosed:
                self._closed(kind, ws)
            except Exception as e:  # noqa: BLE001
                c[f"failed_{type(e).__name__}"] += 1
            finally:
                await ws.close()

    async def idler(self) -> None:
        """Connect, say nothing; the server closes the session after its idle timeout; connect again."""
        from websockets.exceptions import ConnectionClosed

        while not self.stop.is_set():
            ws = await self._connect("idle")
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
                    self.counts["idle"]["unexpected_message"] += 1
                except ConnectionClosed:
                    self._closed("idle", ws)
            else:
                recv.cancel()
            await ws.close()

    async def storm(self, n: int) -> None:
        """Handshake then close at once; TCP reset before and after the upgrade request; raw garbage HTTP."""
        c = self.counts["storm"]
        while not self.stop.is_set():
            step = n % 4
            n += 1
            c["attempts"] += 1
            if step == 0:
                ws = await self._connect("storm")
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
            await self._pause()

    async def run(self, per_kind: int, ready) -> None:
        tasks = [asyncio.ensure_future(self.talker(k)) for k in ("oversized", "junk") for _ in range(per_kind)]
        tasks += [asyncio.ensure_future(self.idler()) for _ in range(per_kind)]
        tasks += [asyncio.ensure_future(self.storm(i)) for i in range(per_kind)]
        await asyncio.sleep(0.5)  # every attacker has started
        ready()
        await self.stop.wait()
        await asyncio.wait(tasks, timeout=20)
        for t in tasks:
            t.cancel()


def attack_main(uri: str, robot: str, per_kind: int, max_seconds: float) -> None:
    """The attackers' process: 'ready' on stdout once they run; on stdin's end (or max_seconds), their counts as JSON."""

    async def main() -> dict:
        stop = asyncio.Event()
        attack = Attack(uri, _attack_messages(robot), stop)
        loop = asyncio.get_running_loop()
        stdin_closed = loop.run_in_executor(None, sys.stdin.read)
        stdin_closed.add_done_callback(lambda _: stop.set())
        loop.call_later(max_seconds, stop.set)
        await attack.run(per_kind, lambda: print("ready", flush=True))
        return {k: dict(v) for k, v in attack.counts.items()}

    counts = asyncio.run(main())
    print(json.dumps(counts), flush=True)
    os._exit(0)  # the stdin reader thread may still block


class Attackers:
    """The attack subprocess for one hostile phase."""

    def __init__(self, uri: str, robot: str, per_kind: int, max_seconds: float) -> None:
        code = ("import sys; from oxygen_gym.eval.bench.serve_hostile import attack_main; "
                f"attack_main({uri!r}, {robot!r}, {per_kind}, {max_seconds})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"attackers did not start: {line!r}")

    def stop(self) -> dict:
        try:
            out, _ = self.proc.communicate(input="", timeout=60)  # stdin's end: the attackers stop
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"no counts from the attackers: {out[-500:]!r}"}


# ---------------------------------------------------------------------------------------------- the measurement
def _add(total: dict, counts: dict) -> None:
    for kind, c in counts.items():
        if isinstance(c, dict):
            for k, v in c.items():
                total.setdefault(kind, {})
                total[kind][k] = total[kind].get(k, 0) + v


def refusals(attacks: dict) -> dict:
    """Per kind: error replies, refused handshakes (HTTP 4xx/5xx) and server closes (1009 too big, 1000 idle)."""
    out = {}
    for kind, c in attacks.items():
        refused = sum(v for k, v in c.items() if k.startswith(("refused_http_", "http_4", "http_5")))
        out[kind] = {"error_replies": c.get("error_replies", 0), "refused_handshakes": refused,
                     "closed_by_server": sum(v for k, v in c.items() if k.startswith("closed_")),
                     "binary_replies": c.get("binary_replies", 0), "internal_errors": c.get("internal_errors", 0)}
    return out


def _summary(lat: list[float]) -> dict:
    if not lat:
        return {"calls": 0}
    return {"calls": len(lat), "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)), "latency_ms_mean": float(np.mean(lat)),
            "latency_ms_max": float(np.max(lat))}


def _results(config: dict, lat: dict, attacks: dict, robot_errors: list, phases: list, server: dict) -> dict:
    alone, hostile = _summary(lat["alone"]), _summary(lat["hostile"])
    ratio = {}
    if alone.get("calls") and hostile.get("calls"):
        ratio = {"p50": hostile["latency_ms_p50"] / alone["latency_ms_p50"],
                 "p99": hostile["latency_ms_p99"] / alone["latency_ms_p99"]}
    return {"config": config, "robot": {"alone": alone, "hostile": hostile, "hostile_over_alone": ratio,
                                        "errors": robot_errors},
            "attacks": attacks, "refused": refusals(attacks), "phases": phases, "server": server}


HEAD = "| phase | calls | p50 ms | p99 ms | mean ms | max ms |"


def markdown(results: dict) -> str:
    cfg, rob = results["config"], results["robot"]
    lines = ["# oxygen-gym bench serve --hostile", "", f"`{cfg['command']}`", "",
             f"- model `{cfg['model']}`, robot `{cfg['robot']}`, {cfg['hostile_clients']} hostile client(s) of each kind, "
             f"server: {' '.join(cfg['server_args'])}",
             f"- {cfg['machine']}; load average before {cfg['load_before']}, after {cfg.get('load_after')}; "
             f"wall {cfg.get('wall_s', 0):.0f} s", "", HEAD, "|" + " --- |" * 6]
    for ph in PHASES:
        s = rob[ph]
        if s.get("calls"):
            lines.append(f"| {ph} | {s['calls']} | {s['latency_ms_p50']:.0f} | {s['latency_ms_p99']:.0f} | "
                         f"{s['latency_ms_mean']:.0f} | {s['latency_ms_max']:.0f} |")
    r = rob["hostile_over_alone"]
    if r:
        lines.append(f"\nhostile / alone: p50 {r['p50']:.2f}x, p99 {r['p99']:.2f}x; robot errors: {len(rob['errors'])}")
    lines += ["", "| attack | error replies | refused handshakes | closed by server | binary replies | all counts |",
              "|" + " --- |" * 6]
    for kind, f in results["refused"].items():
        counts = ", ".join(f"{k} {v}" for k, v in sorted(results["attacks"][kind].items()))
        lines.append(f"| {kind} | {f['error_replies']} | {f['refused_handshakes']} | {f['closed_by_server']} | "
                     f"{f['binary_replies']} | {counts} |")
    srv = results["server"]
    lines += ["", f"server: RSS MB at start {srv.get('rss_mb_start')}, after each phase {srv.get('rss_mb_after_phase')}; "
              f"healthz at the end: {srv.get('healthz_ok')}; frames dropped {srv.get('frames_dropped')}"]
    return "\n".join(lines) + "\n"


async def _robot_phase(uri: str, messages: list[bytes], calls: int, warmup: int, timeout_s: float,
                       lat: list[float], errors: list, retries: Counter) -> None:
    from .serve_load import Robot

    robot = Robot(uri, messages, timeout_s)
    for attempt in range(20):  # a storm may have the server full for a moment: retry (not timed)
        try:
            await robot.connect()
            break
        except Exception as e:  # noqa: BLE001 - counted apart from the robot's errors: a full server says 503
            retries[type(e).__name__] += 1
            await asyncio.sleep(0.25)
    else:
        errors.append("could not connect in 20 attempts")
        return
    try:
        await robot.run(warmup, None)
        for _ in range(calls):
            msg = robot.messages[robot.sent % len(robot.messages)]
            robot.sent += 1
            t0 = time.perf_counter()
            try:
                out = await robot.call(msg)
                assert out["actions"].ndim == 2
            except Exception as e:  # noqa: BLE001 - recorded; the phase goes on
                errors.append(f"call: {type(e).__name__}: {str(e)[:200]}")
                return
            lat.append(1e3 * (time.perf_counter() - t0))
    finally:
        await robot.close()


def _wait_idle(uri: str, timeout_s: float = 60.0) -> dict:
    from .serve_load import http_stats

    deadline = time.monotonic() + timeout_s
    while True:
        s = http_stats(uri)
        if (s["sessions"], s["pool_active"], s["requests_in_flight"]) == (0, 0, 0) or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def run(args: argparse.Namespace) -> int:
    from oxygen_gym.serve import wire

    from .serve_load import openpi_observation, start_server

    if args.calls < 1 or args.rounds < 1 or args.warmup < 0 or args.threads < 1 or args.hostile_clients < 1:
        print("oxygen-gym bench serve --hostile: --calls, --rounds, --threads and --hostile-clients must be >= 1, "
              "--warmup >= 0", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.max_seconds
    srv_args = server_args(args)
    config = {
        "command": "oxygen-gym bench serve " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        if sys.argv[1:3] == ["bench", "serve"] else "oxygen-gym bench serve --hostile",
        "model": args.model, "robot": args.robot, "calls": args.calls, "rounds": args.rounds, "warmup": args.warmup,
        "hostile_clients": args.hostile_clients, "kinds": list(KINDS), "server_args": srv_args,
        "threads": args.threads, "attack_pause_s": ATTACK_PAUSE_S,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_before": [round(x, 2) for x in os.getloadavg()], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    rng = np.random.default_rng(0)
    messages = [wire.packb(openpi_observation(args.robot, rng, "put the bowl on the plate")) for _ in range(4)]
    lat = {p: [] for p in PHASES}
    attacks: dict = {}
    robot_errors: list = []
    connect_retries: Counter = Counter()
    phases: list = []
    server_info: dict = {"rss_mb_after_phase": []}
    per_round = max(1, -(-args.calls // args.rounds))
    server = start_server("hostile", srv_args, threads=args.threads, max_seconds=args.max_seconds + 600,
                          log_file=args.out / "server-hostile.log")

    def write() -> dict:
        config["load_after"] = [round(x, 2) for x in os.getloadavg()]
        config["wall_s"] = time.monotonic() - started
        res = _results(config, lat, attacks, robot_errors, phases, {**server_info, "robot_connect_retries": dict(connect_retries)})
        (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
        (args.out / "results.md").write_text(markdown(res))
        return res

    try:
        server_info["rss_mb_start"] = round(_rss_mb(server.proc.pid) or 0, 1)
        print(HEAD.replace("| phase |", "| round | phase |"), flush=True)
        done, rnd = 0, 0
        while done < args.calls and time.monotonic() < deadline:
            calls = min(per_round, args.calls - done)
            for phase in (PHASES if rnd % 2 == 0 else PHASES[::-1]):
                attackers = None
                if phase == "hostile":
                    attackers = Attackers(server.uri, args.robot, args.hostile_clients,
                                          max(10.0, deadline - time.monotonic() + 30))
                n0 = len(lat[phase])
                try:
                    asyncio.run(_robot_phase(server.uri, messages, calls, args.warmup, args.call_timeout,
                                             lat[phase], robot_errors, connect_retries))
                finally:
                    if attackers is not None:
                        _add(attacks, attackers.stop())
                idle = _wait_idle(server.uri)
                server_info["rss_mb_after_phase"].append(round(_rss_mb(server.proc.pid) or 0, 1))
                server_info["frames_dropped"] = idle["totals"]["frames_dropped"]
                s = _summary(lat[phase][n0:])
                phases.append({"round": rnd, "phase": phase, **s, "sessions_left": idle["sessions"]})
                if s.get("calls"):
                    print(f"| {rnd} | {phase} | {s['calls']} | {s['latency_ms_p50']:.0f} | {s['latency_ms_p99']:.0f} | "
                          f"{s['latency_ms_mean']:.0f} | {s['latency_ms_max']:.0f} |", flush=True)
                write()
            done += calls
            rnd += 1
        if done < args.calls:
            print("oxygen-gym bench serve --hostile: --max-seconds reached (partial results)", file=sys.stderr)
        config["partial"] = done < args.calls
        try:
            import urllib.request

            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(server.uri.replace("ws://", "http://") + "/healthz", timeout=30) as r:
                server_info["healthz_ok"] = r.status == 200
        except OSError:
            server_info["healthz_ok"] = False
        server_info["alive"] = server.proc.poll() is None
    finally:
        server.stop()
    print(markdown(write()))
    return 0 if not robot_errors and server_info.get("healthz_ok") else 1
