"""The websocket policy server: openpi's protocol, one robot session per connection, one batched engine for all.

Protocol (what `openpi_client.websocket_client_policy.WebsocketClientPolicy` expects; openpi:
src/openpi/serving/websocket_policy_server.py): on connect the server sends a msgpack map of metadata; then every
binary msgpack observation gets exactly one reply, a msgpack map with `actions` and `server_timing`; an error is
a text frame (the client raises it as RuntimeError). Unlike openpi's server, which closes after an error, a bad message
here gets its error reply and the connection stays usable. Extras existing clients ignore: `language` (this call's
language updates), `frame`, `policy_timing`. Control messages: `{"__ctrl__": "reset" | "episode_start"}` drops the
robot's in-flight language requests and restarts its frame counter; `"episode_end"` is acknowledged; `"stats"` returns
that session's own stats. HTTP `GET /healthz` and `GET /stats` (JSON, server-wide) answer without a websocket.

Who may connect is settled in the handshake (`_http`), before a session exists: the API key (`Authorization: Api-Key
KEY`, openpi's client header), the `Host` of a loopback server (no DNS rebinding), a browser's `Origin`, and
capacity (HTTP 503 with Retry-After when --max-robots sessions are connected). Limits on what a message may hold are
checked before the costly work: size by the websocket library (close 1009), prompt characters and image pixels in
observations.py, prompt tokens here. Errors never carry a traceback: bad fields are named; anything else is logged
with an error id and answered with that id. docs/api.md section 6 lists the defaults and the threat model.
"""
from __future__ import annotations

import asyncio
import functools
import hmac
import http
import ipaddress
import itertools
import json
import logging
import math
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import websockets
from websockets.asyncio.server import ServerConnection, serve

from oxygen_gym.engine.batch import BatchScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.policies.inputs import ObservationError, check_aspect
from oxygen_gym.policies.numeric_range import NonFiniteActionsError
from oxygen_gym.policies.observation import served_observation

from . import wire
from .batch_loop import EngineBusy, EngineLoop, SessionClosed, SessionEngine, session_policy
from .memory import Trimmer
from .observations import Limits, ObservationKeyError, short, to_policy_obs
from .rtc_fields import DelayEstimator, rtc_fields

log = logging.getLogger("oxygen_gym.serve")

CLOSE_TRY_AGAIN = 1013  # RFC 6455 "try again later": a handshake that raced past the capacity check
CLOSE_IDLE = 1000  # normal closure, reason "idle ...": the session did no work for --idle-timeout-s
CLOSE_INVALID = 1008  # RFC 6455 "policy violation": --max-invalid-messages invalid messages in a row
SECURITY_HEADERS = ("Host", "Authorization", "Origin")  # sent twice, they are ambiguous: refused with 400
RETRY_AFTER_S = 5  # what a full server tells a refused robot (HTTP 503 Retry-After)
ERROR_CHARS = 400  # the longest error reply (a field's name and what was expected; values are clipped shorter)
# a session's second refused message in a row waits this long before the server reads its next, doubling per refusal
# up to REFUSED_WAIT_MAX_S: a client that only sends what is refused is served at a trickle (TCP holds the rest), at no
# CPU, while one mistake from a robot costs it nothing (as nginx's limit_req delays, not answers, an excess request)
REFUSED_WAIT_S = 0.05
REFUSED_WAIT_MAX_S = 0.5
API_KEY_ENV = "OXYGEN_GYM_API_KEY"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name (or "" / "0.0.0.0"-like wildcards): not known to stay on this machine
        return False


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_robots: int = 8
    batching: bool = True
    window_ms: float = 20.0  # the longest a frame waits for companions
    max_message_bytes: int = 8 * 2**20  # four 640x480 cameras fit twice over
    default_prompt: str | None = None
    num_slots: int | None = None  # None: enough that no robot's language request ever queues
    prefill_rows: int | None = None
    frame_timeout_s: float = 600.0
    api_key: str | None = None  # None: no key asked (loopback, or --insecure)
    insecure: bool = False  # bind beyond loopback without a key
    allow_origins: tuple[str, ...] = ()  # browser Origin values accepted (none by default)
    limits: Limits = field(default_factory=Limits)
    max_prompt_tokens: int = 256
    max_buffered_frames: int = 2  # websocket frames read ahead per connection before the server stops reading
    idle_timeout_s: float = 120.0  # a session that sends no frame this long is closed (0: never)
    max_invalid_messages: int = 20  # a session whose messages are refused this many times in a row is closed
    stats_per_s: float = 2.0  # `stats` control messages a session may send per second (a burst of 5 allowed)
    control_hz: float | None = None  # the robots' control rate, for estimating an RTC delay (None: the robot's)

    def check(self) -> "ServeConfig":
        if not 1 <= self.max_robots <= 1024:
            raise ValueError(f"--max-robots must be in [1, 1024], got {self.max_robots}")
        if not 0 <= self.window_ms <= 10_000:
            raise ValueError(f"--window-ms must be in [0, 10000], got {self.window_ms}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535], got {self.port}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"--max-message-mb is too small: {self.max_message_bytes} bytes")
        if self.api_key is not None and (len(self.api_key) < 8 or not self.api_key.isprintable() or " " in self.api_key):
            raise ValueError("--api-key must be at least 8 printable characters without spaces")
        if not is_loopback(self.host) and not self.api_key and not self.insecure:
            raise ValueError(
                f"--host {self.host!r} is reachable beyond this machine, and without a key anyone who can reach port "
                f"{self.port} can drive the robot and read its camera images. Set a key (--api-key, or the "
                f"{API_KEY_ENV} environment variable, which stays out of shell history), or pass --insecure on a "
                "network you trust"
            )
        for name, value, low in (
            ("--max-prompt-chars", self.limits.max_prompt_chars, 1), ("--max-prompt-tokens", self.max_prompt_tokens, 1),
            ("--max-image-pixels", self.limits.max_image_pixels, 64), ("--max-buffered-frames", self.max_buffered_frames, 1),
        ):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if self.max_invalid_messages < 1:
            raise ValueError(f"--max-invalid-messages must be >= 1, got {self.max_invalid_messages}")
        if not self.stats_per_s > 0:
            raise ValueError(f"stats_per_s must be > 0, got {self.stats_per_s}")
        if self.idle_timeout_s < 0:
            raise ValueError(f"--idle-timeout-s must be >= 0 (0: never), got {self.idle_timeout_s}")
        if self.control_hz is not None and not 0 < self.control_hz <= 10_000:
            raise ValueError(f"--control-hz must be in (0, 10000], got {self.control_hz}")
        return self


def slots_per_robot(policy) -> int:
    """In-flight requests one robot can hold with a fixed budget k: a request of task t lives ceil(N/k) frames and
    one starts every `every` frames (+1: the frame that starts one while another finishes)."""
    k = policy.budget.k if hasattr(policy.budget, "k") else 1
    return max(1, sum(math.ceil(math.ceil(t.max_new_tokens / k) / t.every) + 1 for t in policy.tasks))


class PolicyServer:
    """Serves `template` (a `MultiTaskPolicy` in oxygen mode; it never acts itself) to many robots at once: each
    connection is a `PolicySession` of it (policies/policy_session.py) over this server's one engine and pool."""

    def __init__(self, template, config: ServeConfig) -> None:
        if template.mode != "oxygen":
            raise ValueError(f"the server runs the oxygen engine; build the policy with mode='oxygen', not {template.mode!r}")
        self.template = template
        self.config = config.check()
        model = template.model
        kv = model.kv_layout  # any family: the engine seam says what a slot holds
        max_batch = config.max_robots if config.batching else 1
        num_slots = config.num_slots or config.max_robots * slots_per_robot(template)
        # the one KV pool of every robot's requests (the template builds none of its own: its engine is made on first
        # use, and it never runs a frame)
        self.pool = SlotPool(
            num_slots, template.pool_args["capacity"], layers=kv.layers, kv_heads=kv.kv_heads,
            head_dim=kv.head_dim, device=model.device, dtype=model.dtype, scratch_rows=max_batch,
        )
        self.scheduler = BatchScheduler(model, self.pool, num_steps=template.num_steps, prefill_rows=config.prefill_rows)
        self.engine = EngineLoop(
            self.scheduler, max_batch=max_batch, window_s=config.window_ms / 1e3 if config.batching else 0.0,
            max_queue=2 * config.max_robots,
        )
        self.sessions: dict[int, object] = {}
        self._prompt_ok: dict[int, str] = {}  # session -> its last prompt that passed the token check (robots repeat it)
        self._delays: dict[int, DelayEstimator] = {}  # session -> its measured inference delay (RTC without one)
        self._ids = itertools.count()
        self._threads = ThreadPoolExecutor(max_workers=config.max_robots + 2, thread_name_prefix="oxygen-serve-act")
        self.placement: dict | None = None  # the threads this process chose (engine/placement.py), in /stats
        self.trimmer = Trimmer()  # returns freed message memory to the OS (glibc keeps it: docs/serve.md, Memory)
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
            # actions of each chunk the checkpoint declares to execute per call (None: not declared; the client's own)
            "replan_steps": t.replan_steps,
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
            "placement": self.placement,
            "batches": batches.summary(self.template.horizon),
            "mean_robots_per_batch": float(np.mean([b["robots"] for b in recent])) if recent else 0.0,
            # running totals: differences between two reads describe the batches in between (bench serve)
            "totals": {
                "batches": batches.frames, "robot_frames": self.engine.robot_frames, "frame_ms": batches.frame_ms_sum,
                "stage_ms": dict(batches.stage_ms_sum), "tokens": batches.tokens,
                "frames_dropped": self.engine.frames_dropped, "memory_trims": self.trimmer.trims,
            },
            **self.engine.snapshot(),
        }

    # ------------------------------------------------------------------ handshake (HTTP)
    async def _http(self, connection: ServerConnection, request):
        """Every request before it becomes a session: `/healthz` open; the rest behind the Host, Origin and key checks;
        a websocket beyond --max-robots refused with 503 + Retry-After. None: go on with the websocket handshake (the
        library then checks the Origin against --allow-origin)."""
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        refused = self._refusal(connection, request, http_path=path != "/")
        if refused is not None:
            return refused
        if path == "/stats":
            stats = await asyncio.get_running_loop().run_in_executor(self._threads, self.stats)
            return connection.respond(http.HTTPStatus.OK, json.dumps(_jsonable(stats)) + "\n")
        if len(self.sessions) >= self.config.max_robots:
            log.info("refused a robot from %s: %d robots connected", connection.remote_address, len(self.sessions))
            response = connection.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"oxygen-gym serve: {self.config.max_robots} robots are connected (--max-robots); retry later\n",
            )
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
            return response
        return None

    def _refusal(self, connection: ServerConnection, request, http_path: bool):
        headers, cfg = request.headers, self.config
        for name in SECURITY_HEADERS:  # one value each, or the checks below could read a different one than a proxy
            if len(headers.get_all(name)) > 1:
                return self._refuse(connection, http.HTTPStatus.BAD_REQUEST, f"duplicate {name} header")
        if is_loopback(cfg.host) and _hostname(headers.get("Host", "")) not in LOOPBACK_NAMES:
            # a loopback server answers loopback names only: a web page whose name re-resolves to 127.0.0.1 (DNS
            # rebinding) would otherwise be same-origin with it
            return self._refuse(connection, http.HTTPStatus.FORBIDDEN, "Host header is not a loopback name")
        if http_path and headers.get("Origin") is not None and headers["Origin"] not in cfg.allow_origins:
            return self._refuse(connection, http.HTTPStatus.FORBIDDEN, "Origin not allowed (--allow-origin)")
        if cfg.api_key is not None:
            given = headers.get("Authorization", "")
            want = f"Api-Key {cfg.api_key}"
            if not hmac.compare_digest(given.encode("utf-8", "replace"), want.encode()):
                response = self._refuse(connection, http.HTTPStatus.UNAUTHORIZED,
                                        "missing or wrong API key (send the header 'Authorization: Api-Key KEY')")
                response.headers["WWW-Authenticate"] = "Api-Key"
                return response
        return None

    @staticmethod
    def _refuse(connection: ServerConnection, status: http.HTTPStatus, why: str):
        log.info("refused %s: %s", connection.remote_address, why)
        return connection.respond(status, f"oxygen-gym serve: {why}\n")

    # ------------------------------------------------------------------ websocket side
    async def _handler(self, ws: ServerConnection) -> None:
        if len(self.sessions) >= self.config.max_robots:  # two handshakes raced past `_http`'s check
            await ws.close(CLOSE_TRY_AGAIN, "server full (--max-robots); retry later")
            return
        sid = next(self._ids)
        policy = session_policy(self.template, SessionEngine(self.engine, sid, self.config.frame_timeout_s))
        self.sessions[sid] = policy
        self._delays[sid] = DelayEstimator(self.config.control_hz or policy.robot.control_hz)
        self.engine.register(sid)
        idle = self.config.idle_timeout_s or None
        stats_bucket = _TokenBucket(self.config.stats_per_s, burst=5)
        log.info("robot session %d connected from %s", sid, ws.remote_address)
        try:
            await ws.send(wire.packb(self.metadata(sid)))
            prev_total_ms = None
            last_work = time.monotonic()  # only frames answered with actions keep a session (docs/serve.md)
            invalid_in_row = 0
            while True:
                wait = None if idle is None else max(0.0, last_work + idle - time.monotonic())
                try:
                    message = await asyncio.wait_for(ws.recv(), timeout=wait)
                except TimeoutError:
                    log.info("robot session %d sent no frame for %s s; closing it", sid, idle)
                    await ws.close(CLOSE_IDLE, f"idle timeout: no frame for {idle:g} s (--idle-timeout-s)")
                    break
                start = time.perf_counter()
                outcome = await self._reply_unless_gone(ws, sid, policy, message, prev_total_ms, stats_bucket)
                if outcome is None:
                    break
                reply, kind = outcome
                await ws.send(reply)
                self.trimmer.note(len(message))
                if kind == _FRAME:
                    prev_total_ms = 1e3 * (time.perf_counter() - start)
                    last_work = time.monotonic()
                invalid_in_row = invalid_in_row + 1 if kind == _INVALID else 0
                if invalid_in_row >= self.config.max_invalid_messages:
                    log.info("robot session %d: %d invalid messages in a row; closing it", sid, invalid_in_row)
                    await ws.close(CLOSE_INVALID, f"{invalid_in_row} invalid messages in a row (--max-invalid-messages)")
                    break
                if invalid_in_row >= 2:  # never past the idle deadline: a refused sender is still closed on time
                    left = float("inf") if idle is None else last_work + idle - time.monotonic()
                    await asyncio.sleep(max(0.0, min(refused_wait(invalid_in_row), left)))
        except websockets.ConnectionClosed:
            pass
        finally:
            self.sessions.pop(sid, None)
            self._prompt_ok.pop(sid, None)
            self._delays.pop(sid, None)
            await asyncio.wrap_future(self.engine.unregister(sid))
            log.info("robot session %d left; its requests and slots are freed", sid)

    async def _reply_unless_gone(self, ws, sid: int, policy, message, prev_total_ms, stats_bucket):
        """`_reply`, unless the robot disconnects first: then its queued frame is dropped unrun (None)."""
        reply = asyncio.ensure_future(self._reply(sid, policy, message, prev_total_ms, stats_bucket))
        gone = asyncio.ensure_future(ws.wait_closed())
        try:
            await asyncio.wait({reply, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if reply.done():
            return reply.result()
        self.sessions.pop(sid, None)
        self.engine.unregister(sid)  # drops its queued frame; the frame's act() then ends with SessionClosed
        await asyncio.wait({reply})
        return None

    async def _reply(self, sid: int, policy, message, prev_total_ms, stats_bucket) -> tuple[bytes | str, str]:
        """The reply to one message (msgpack bytes, or a short text error naming what was wrong) and its kind:
        `_FRAME` (actions), `_CONTROL`, `_INVALID` (the client's message was refused) or `_FAILED` (the server's)."""
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            # decoding and validation off the event loop: /healthz, other robots and SIGTERM never wait on them
            parsed = await loop.run_in_executor(self._threads, self._parse, sid, policy, message)
            if parsed[0] == "ctrl":
                return wire.packb(await self._control(loop, policy, parsed[1], stats_bucket)), _CONTROL
            _, obs, checked, rtc = parsed
            act = functools.partial(policy.act, checked)  # checked once, in _parse: act() takes it as it is
            actions, updates = await loop.run_in_executor(self._threads, act)
            heads = actions if isinstance(actions, dict) else {policy.action_head: actions}
        except (wire.WireError, ObservationKeyError, ObservationError) as e:
            return _clip(f"oxygen-gym serve: bad message: {e}"), _INVALID
        except NonFiniteActionsError as e:  # never a NaN to a robot (policies/numeric_range.py)
            log.warning("robot session %d: %s", sid, e)
            return _clip(f"oxygen-gym serve: no actions: {e}"), _FAILED
        except SessionClosed:
            return "oxygen-gym serve: session closed", _FAILED
        except EngineBusy:
            return f"oxygen-gym serve: busy, retry in {RETRY_AFTER_S} s (the engine's frame queue is full)", _FAILED
        except Exception:  # noqa: BLE001 - the server and the connection survive; details stay in the server's log
            error_id = secrets.token_hex(4)
            log.exception("robot session %d: internal error %s", sid, error_id)
            return f"oxygen-gym serve: internal error {error_id} (the server log has the details under this id)", _FAILED
        frame = policy.last_frame or {}
        timing = {"infer_ms": 1e3 * (time.perf_counter() - start)}
        if sid in self._delays:
            self._delays[sid].observe(timing["infer_ms"])
        if prev_total_ms is not None:
            timing["prev_total_ms"] = prev_total_ms
        extra = {}
        if rtc:  # what the chunk was guided with (the delay the server estimated, when the robot sent none)
            extra["rtc"] = {"inference_delay": rtc["inference_delay"], "estimated": rtc["estimated"]}
        reply = wire.packb(
            {
                **extra,
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
        return reply, _FRAME

    def _parse(self, sid: int, policy, message) -> tuple:
        """One message decoded and checked, every field once (runs on a worker thread): ("ctrl", value) or ("frame",
        the decoded observation, act()'s `CheckedObservation` with its RTC arguments, those arguments). Raises the
        named errors `_reply` answers with."""
        obs = wire.unpackb(message, self.config.max_message_bytes)
        if isinstance(obs, dict) and "__ctrl__" in obs:
            return "ctrl", obs["__ctrl__"]
        policy_obs = to_policy_obs(obs, policy.robot, self.config.default_prompt, self.config.limits)
        self._check_prompt_tokens(sid, policy_obs["prompt"])
        rtc = self._rtc_arguments(sid, policy, obs)
        try:
            checked = served_observation(
                policy_obs, policy.robot, heads=policy.action_heads, prev_actions=rtc.get("prev_actions"),
                inference_delay=rtc.get("inference_delay", 0),
            )
        except ObservationError:
            raise
        except ValueError as e:  # a bare previous chunk for a several-head model
            raise ObservationKeyError(str(e)) from None
        return "frame", obs, checked, rtc

    def _rtc_arguments(self, sid: int, policy, obs: dict) -> dict:
        """act()'s real-time-chunking arguments from the request (none for openpi-client's plain requests)."""
        prev, delay = rtc_fields(obs, policy.action_heads, policy.robot.action_dim, min(policy.head_chunks.values()))
        if prev is None:
            return {}
        estimated = delay is None
        if estimated:
            delay = self._delays[sid].estimate(min(policy.head_chunks.values()))
        return {"prev_actions": prev, "inference_delay": delay, "estimated": estimated}

    def _check_prompt_tokens(self, sid: int, prompt: str) -> None:
        """--max-prompt-tokens on the instruction alone (its characters are already bounded, so this is cheap)."""
        if prompt == self._prompt_ok.get(sid):
            return
        n = len(self.template.tokenizer.encode(prompt))
        if n > self.config.max_prompt_tokens:
            raise ObservationKeyError(f"prompt: {n} tokens, over the limit of {self.config.max_prompt_tokens} (--max-prompt-tokens)")
        self._prompt_ok[sid] = prompt

    async def _control(self, loop, policy, ctrl, stats_bucket: "_TokenBucket") -> dict:
        if not isinstance(ctrl, str):
            raise ObservationKeyError(f"__ctrl__: expected a string (reset, episode_start, episode_end or stats), got {short(ctrl)}")
        if ctrl in ("reset", "episode_start"):
            await loop.run_in_executor(self._threads, policy.reset)
            return {"__ack__": ctrl}
        if ctrl == "episode_end":
            return {"__ack__": ctrl}
        if ctrl == "stats":  # this session's own figures; server-wide ones are at GET /stats (behind the key)
            if not stats_bucket.take():
                raise ObservationKeyError(f"__ctrl__: stats asked too often (at most {self.config.stats_per_s:g} per "
                                          "second per session)")
            figures = await loop.run_in_executor(self._threads, policy.stats)
            return {"__ack__": ctrl, "session": _jsonable(figures)}
        raise ObservationKeyError(f"__ctrl__: unknown control {short(ctrl)}; expected reset, episode_start, episode_end or stats")

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, on_ready=None, max_seconds: float | None = None) -> None:
        """Serve until `stop()` (or `max_seconds`). `on_ready(port)` runs once the socket listens."""
        self._stop = asyncio.Event()
        cfg = self.config
        async with serve(
            self._handler, cfg.host, cfg.port, compression=None, max_size=cfg.max_message_bytes,
            max_queue=cfg.max_buffered_frames, process_request=self._http, origins=[None, *cfg.allow_origins],
            open_timeout=10, ping_interval=20, ping_timeout=20, close_timeout=5,
        ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            trimming = asyncio.create_task(self.trimmer.run())
            if on_ready:
                on_ready(self.port)
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=max_seconds)
            except TimeoutError:
                log.info("stopping after --max-seconds %s", max_seconds)
            finally:
                trimming.cancel()
        self.close()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def close(self) -> None:
        self.engine.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)


_FRAME, _CONTROL, _INVALID, _FAILED = "frame", "control", "invalid", "failed"  # what a reply answered


def refused_wait(in_row: int) -> float:
    """Seconds a session waits before its next message is read, after `in_row` refused messages in a row: none after
    one, REFUSED_WAIT_S after two, doubling, at most REFUSED_WAIT_MAX_S."""
    return 0.0 if in_row < 2 else min(REFUSED_WAIT_MAX_S, REFUSED_WAIT_S * 2.0 ** (in_row - 2))


class _TokenBucket:
    """At most `rate` events per second on average, `burst` at once: a session's `stats` requests."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def _hostname(host: str) -> str:
    """The name of a Host header (`name:port`, `[v6]:port`, `name`)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _clip(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
