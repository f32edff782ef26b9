"""The websocket policy server: openpi's protocol, one robot session per connection, one batched engine for all.

Protocol (what `openpi_client.websocket_client_policy.WebsocketClientPolicy` expects; openpi:
src/openpi/serving/websocket_policy_server.py): on connect the server sends a msgpack map of metadata; then every
binary msgpack observation gets exactly one reply, a msgpack map with `actions` and `server_timing`; an error is
a text frame (the client raises it as RuntimeError). Unlike openpi's server, which closes after an error, a bad message
here gets its error reply and the connection stays usable. Extras existing clients ignore: `language` (this call's
language updates), `frame`, `policy_timing`. Control messages: `{"__ctrl__": "reset" | "episode_start"}` drops the
robot's in-flight language requests and restarts its frame counter; `"episode_end"` is acknowledged; `"stats"` returns
the session's and the server's stats. HTTP `GET /healthz` and `GET /stats` (JSON) answer without a websocket.
"""
from __future__ import annotations

import asyncio
import http
import itertools
import json
import logging
import math
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import websockets
from websockets.asyncio.server import ServerConnection, serve

from oxygen_gym.engine.batch import BatchScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.policies.inputs import ObservationError

from . import wire
from .batch_loop import EngineLoop, SessionEngine, session_policy
from .observations import ObservationKeyError, to_policy_obs

log = logging.getLogger("oxygen_gym.serve")

CLOSE_TRY_AGAIN = 1013  # RFC 6455 "try again later": the server holds --max-robots sessions already


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_robots: int = 8
    batching: bool = True
    window_ms: float = 20.0  # the longest a frame waits for companions
    max_message_bytes: int = 32 * 2**20
    default_prompt: str | None = None
    num_slots: int | None = None  # None: enough that no robot's language request ever queues
    prefill_rows: int | None = None
    frame_timeout_s: float = 600.0

    def check(self) -> "ServeConfig":
        if not 1 <= self.max_robots <= 1024:
            raise ValueError(f"--max-robots must be in [1, 1024], got {self.max_robots}")
        if not 0 <= self.window_ms <= 10_000:
            raise ValueError(f"--window-ms must be in [0, 10000], got {self.window_ms}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535], got {self.port}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"--max-message-mb is too small: {self.max_message_bytes} bytes")
        return self


def slots_per_robot(policy) -> int:
    """In-flight requests one robot can hold with a fixed budget k: a request of task t lives ceil(N/k) frames and
    one starts every `every` frames (+1: the frame that starts one while another finishes)."""
    k = policy.budget.k if hasattr(policy.budget, "k") else 1
    return max(1, sum(math.ceil(math.ceil(t.max_new_tokens / k) / t.every) + 1 for t in policy.tasks))


class PolicyServer:
    """Serves `template` (a `MultiTaskPolicy` in oxygen mode; it never acts itself) to many robots at once."""

    def __init__(self, template, config: ServeConfig) -> None:
        if template.mode != "oxygen":
            raise ValueError(f"the server runs the oxygen engine; build the policy with mode='oxygen', not {template.mode!r}")
        self.template = template
        self.config = config.check()
        model = template.model
        kv = model.kv_layout  # any family: the engine seam says what a slot holds
        max_batch = config.max_robots if config.batching else 1
        num_slots = config.num_slots or config.max_robots * slots_per_robot(template)
        self.pool = SlotPool(
            num_slots, template.pool.capacity, layers=kv.layers, kv_heads=kv.kv_heads,
            head_dim=kv.head_dim, device=model.device, dtype=model.dtype, scratch_rows=max_batch,
        )
        self.scheduler = BatchScheduler(model, self.pool, num_steps=template.num_steps, prefill_rows=config.prefill_rows)
        self.engine = EngineLoop(
            self.scheduler, max_batch=max_batch, window_s=config.window_ms / 1e3 if config.batching else 0.0,
            max_queue=2 * config.max_robots,
        )
        self.sessions: dict[int, object] = {}
        self._ids = itertools.count()
        self._threads = ThreadPoolExecutor(max_workers=config.max_robots + 2, thread_name_prefix="oxygen-serve-act")
        self.started = time.time()
        self.port: int | None = None
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ metadata and stats
    def metadata(self, session: int) -> dict:
        t = self.template
        return {
            "server": "oxygen-gym",
            "robot": t.robot.name,
            "action_horizon": int(t.horizon),
            "action_dim": int(t.robot.action_dim),
            "action_heads": list(t.action_heads),
            "tasks": [{"name": x.name, "prompt": x.prompt, "max_new_tokens": x.max_new_tokens, "every": x.every} for x in t.tasks],
            "decode_budget": getattr(t.budget, "k", "auto"),
            "session": session,
            "max_robots": self.config.max_robots,
            "batching": self.config.batching,
            "window_ms": self.config.window_ms if self.config.batching else 0.0,
        }

    def stats(self) -> dict:
        batches = self.engine.batches
        recent = list(batches)
        return {
            "sessions": len(self.sessions),
            "uptime_s": time.time() - self.started,
            "batches": batches.summary(self.template.horizon),
            "mean_robots_per_batch": float(np.mean([b["robots"] for b in recent])) if recent else 0.0,
            # running totals: differences between two reads describe the batches in between (bench serve)
            "totals": {
                "batches": batches.frames, "robot_frames": self.engine.robot_frames, "frame_ms": batches.frame_ms_sum,
                "stage_ms": dict(batches.stage_ms_sum), "tokens": batches.tokens,
            },
            **self.engine.snapshot(),
        }

    # ------------------------------------------------------------------ websocket side
    async def _handler(self, ws: ServerConnection) -> None:
        if len(self.sessions) >= self.config.max_robots:
            await ws.send(f"oxygen-gym serve: {self.config.max_robots} robots are connected (--max-robots); try later")
            await ws.close(CLOSE_TRY_AGAIN, "server full")
            return
        sid = next(self._ids)
        policy = session_policy(self.template, SessionEngine(self.engine, sid, self.config.frame_timeout_s))
        self.sessions[sid] = policy
        self.engine.register(sid)
        loop = asyncio.get_running_loop()
        log.info("robot session %d connected from %s", sid, ws.remote_address)
        try:
            await ws.send(wire.packb(self.metadata(sid)))
            prev_total_ms = None
            while True:
                message = await ws.recv()
                start = time.perf_counter()
                reply = await self._reply(loop, policy, message, prev_total_ms)
                await ws.send(reply)
                if isinstance(reply, bytes):
                    prev_total_ms = 1e3 * (time.perf_counter() - start)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.sessions.pop(sid, None)
            dropped = self.engine.unregister(sid)
            await asyncio.wrap_future(dropped)
            log.info("robot session %d left; its requests and slots are freed", sid)

    async def _reply(self, loop, policy, message, prev_total_ms) -> bytes | str:
        """The reply to one message: msgpack bytes, or a text error naming what was wrong."""
        start = time.perf_counter()
        try:
            obs = wire.unpackb(message, self.config.max_message_bytes)
            if isinstance(obs, dict) and "__ctrl__" in obs:
                return wire.packb(await self._control(loop, policy, obs["__ctrl__"]))
            policy_obs = to_policy_obs(obs, policy.robot, self.config.default_prompt)
            actions, updates = await loop.run_in_executor(self._threads, policy.act, policy_obs)
            heads = actions if isinstance(actions, dict) else {policy.action_head: actions}
        except (wire.WireError, ObservationKeyError, ObservationError) as e:
            return f"oxygen-gym serve: bad message: {e}"
        except Exception:  # noqa: BLE001 - the server and the connection survive; the client gets the traceback
            return "oxygen-gym serve: internal error\n" + traceback.format_exc()
        frame = policy.last_frame or {}
        timing = {"infer_ms": 1e3 * (time.perf_counter() - start)}
        if prev_total_ms is not None:
            timing["prev_total_ms"] = prev_total_ms
        return wire.packb(
            {
                "actions": heads[policy.action_head],  # the first head's chunk: what openpi-client reads
                "heads": heads,  # every head's chunk under its name (one entry for a one-head model)
                "language": [
                    {
                        "request_id": u.request_id, "task": u.task, "frame": u.frame, "new_token_ids": list(u.new_token_ids),
                        "new_text": u.new_text, "text": u.text, "done": u.done,
                    }
                    for u in updates
                ],
                "frame": int(frame.get("frame", policy.frame - 1)),
                "server_timing": timing,
                "policy_timing": {"infer_ms": float(frame.get("frame_ms", 0.0))},
            }
        )

    async def _control(self, loop, policy, ctrl) -> dict:
        if ctrl in ("reset", "episode_start"):
            await loop.run_in_executor(self._threads, policy.reset)
            return {"__ack__": ctrl}
        if ctrl == "episode_end":
            return {"__ack__": ctrl}
        if ctrl == "stats":
            server = await loop.run_in_executor(self._threads, self.stats)
            return {"__ack__": ctrl, "session": _jsonable(policy.stats()), "server": _jsonable(server)}
        raise ObservationKeyError(f"__ctrl__: unknown control {ctrl!r}; expected reset, episode_start, episode_end or stats")

    async def _http(self, connection: ServerConnection, request):
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if request.path == "/stats":
            stats = await asyncio.get_running_loop().run_in_executor(self._threads, self.stats)
            return connection.respond(http.HTTPStatus.OK, json.dumps(_jsonable(stats)) + "\n")
        return None

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, on_ready=None, max_seconds: float | None = None) -> None:
        """Serve until `stop()` (or `max_seconds`). `on_ready(port)` runs once the socket listens."""
        self._stop = asyncio.Event()
        async with serve(
            self._handler, self.config.host, self.config.port, compression=None,
            max_size=self.config.max_message_bytes, process_request=self._http, max_queue=4,
        ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            if on_ready:
                on_ready(self.port)
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=max_seconds)
            except TimeoutError:
                log.info("stopping after --max-seconds %s", max_seconds)
        self.close()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def close(self) -> None:
        self.engine.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
