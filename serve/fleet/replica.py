"""One Ray Serve replica of the fleet: a whole `PolicyServer` (engine, slot pool, batch loop, sessions) behind ASGI.

Serve's proxy hands each request to the replica the `SeatRouter` chose; a websocket handshake goes through the same
checks as the single server (`PolicyServer._http`: /healthz, key, Host, Origin, 503 when this replica's seats are
full, which the router only lets happen when every replica's are), then the session runs in `PolicyServer._handler`
for as long as the robot stays. `GET /stats` answers for the whole fleet: this replica's figures, fresh, and the
others' as they last pushed them to the `FleetBoard` actor (at most `stats_push_s` old; each entry says its age).
"""
from __future__ import annotations

import asyncio
import http
import json
import logging
import time
from collections import Counter
from collections.abc import Callable

from ..server import PolicyServer, ServeConfig, _FRAME, _jsonable
from .asgi import AsgiWebsocket, HandshakeConnection, HandshakeRequest, deny_websocket, scope_path, send_http

log = logging.getLogger("oxygen_gym.serve.fleet")

BOARD_NAMESPACE = "oxygen-gym"
CLOSE_GOING_AWAY = 1001  # RFC 6455: the server is going down (the fleet stops); a robot may reconnect later
STALE_AFTER_PUSHES = 5  # a replica whose stats are this many push periods old is counted as gone (not in the totals)
SUMMED = ("sessions", "pool_active", "num_slots", "requests_in_flight", "requests_queued")
SUMMED_TOTALS = ("batches", "robot_frames", "frame_ms", "tokens", "frames_dropped", "memory_trims")


class FleetBoard:
    """A Ray actor (owned by the process that started the fleet) holding each replica's last pushed stats."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[float, dict]] = {}
        self.stopping = False

    def put(self, replica: str, at: float, stats: dict) -> bool:
        """Store a replica's stats; True tells it the fleet is stopping (it closes its robots' sessions)."""
        self.entries[replica] = (at, stats)
        return self.stopping

    def stop(self) -> None:
        self.stopping = True

    def remove(self, replica: str) -> None:
        self.entries.pop(replica, None)

    def all(self) -> dict[str, tuple[float, dict]]:
        return dict(self.entries)


class FleetServer(PolicyServer):
    """A `PolicyServer` that names its replica in the metadata a robot gets on connect and in its stats, and counts
    each session's answered frames (the fleet's /stats shows which replica ran which robot's frames)."""

    def __init__(self, template, config: ServeConfig, replica: str) -> None:
        super().__init__(template, config)
        self.replica = replica
        self.frames_by_session: Counter[int] = Counter()

    def metadata(self, session: int) -> dict:
        return {**super().metadata(session), "replica": self.replica}

    async def _reply(self, sid: int, *args, **kwargs):
        reply, kind = await super()._reply(sid, *args, **kwargs)
        if kind == _FRAME:
            self.frames_by_session[sid] += 1
        return reply, kind

    def stats(self) -> dict:
        for sid in [s for s in self.frames_by_session if s not in self.sessions]:  # left: forget its count
            del self.frames_by_session[sid]
        frames = {str(s): n for s, n in self.frames_by_session.items()}
        # the per-task LoRA adapters this replica's bank holds (each replica builds the template, adapters included)
        adapters = getattr(getattr(self.template, "adapters", None), "names", [])
        return {"replica": self.replica, **super().stats(), "session_frames": frames, "adapters": list(adapters)}


def fleet_stats(answered_by: str, own: dict, board: dict[str, tuple[float, dict]], now: float, stale_after_s: float,
                max_robots: int) -> dict:
    """The fleet's /stats: the single server's top-level figures summed over live replicas (so readers of one
    server's /stats, like `bench serve`, read a fleet the same way), plus every replica's own under `replicas`."""
    replicas = {answered_by: (now, own)}
    stale = []
    for rid, (at, stats) in board.items():
        if rid == answered_by:
            continue
        if now - at > stale_after_s:
            stale.append(rid)
        else:
            replicas[rid] = (at, stats)
    live = [{**s, "replica": rid, "stats_age_s": round(now - at, 3)} for rid, (at, s) in sorted(replicas.items())]
    out: dict = {k: sum(int(s.get(k, 0)) for s in live) for k in SUMMED}
    totals = {k: sum(s.get("totals", {}).get(k, 0) for s in live) for k in SUMMED_TOTALS}
    stages: dict[str, float] = {}
    for s in live:
        for name, ms in s.get("totals", {}).get("stage_ms", {}).items():
            stages[name] = stages.get(name, 0.0) + ms
    totals["stage_ms"] = stages
    out["totals"] = totals
    out["mean_robots_per_batch"] = totals["robot_frames"] / totals["batches"] if totals["batches"] else 0.0
    out["uptime_s"] = max((s.get("uptime_s", 0.0) for s in live), default=0.0)
    out["fleet"] = {"replicas": len(live), "max_robots": len(live) * max_robots, "answered_by": answered_by,
                    "stale_replicas": sorted(stale)}
    out["replicas"] = live
    return out


class _Asgi:
    """The ASGI callable Serve's ingress wraps (a plain object with an async __call__, as ASGI 3 asks)."""

    def __init__(self, replica: "FleetReplica") -> None:
        self.replica = replica

    async def __call__(self, scope, receive, send) -> None:
        await self.replica.handle(scope, receive, send)


class FleetReplica:
    """The deployment class (wrapped by `serve.ingress()` and `serve.deployment` in fleet/app.py)."""

    def __init__(self, policy_factory: Callable[[], object], config: ServeConfig, board_name: str,
                 stats_push_s: float = 1.0, threads: int | None = None) -> None:
        import ray
        from ray import serve

        from oxygen_gym.engine.placement import place

        placement = place(threads=threads)  # the cores Ray gave this replica's process (engine/placement.py)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.server = FleetServer(policy_factory(), config, self.replica)
        self.server.placement = placement.as_record()
        self.board = ray.get_actor(board_name, namespace=BOARD_NAMESPACE)
        self.stats_push_s = stats_push_s
        self._tasks: list[asyncio.Task] = []
        self._connections: set[AsgiWebsocket] = set()
        self._start_tasks()
        log.info("fleet replica %s ready (max robots %d)", self.replica, config.max_robots)

    def __serve_build_asgi_app__(self) -> _Asgi:
        return _Asgi(self)

    # ------------------------------------------------------------------ Serve hooks
    async def record_routing_stats(self) -> dict:
        """What the `SeatRouter` ranks replicas by (Serve's controller calls this every routing-stats period)."""
        loop = asyncio.get_running_loop()
        occupancy = await loop.run_in_executor(self.server._threads, self.server.engine.snapshot)
        return {"robots": len(self.server.sessions), "max_robots": self.server.config.max_robots,
                "free_kv_slots": occupancy["num_slots"] - occupancy["pool_active"], "at": time.time()}

    def check_health(self) -> None:
        """A replica whose engine thread died cannot serve: Serve replaces it (its robots reconnect elsewhere)."""
        if not self.server.engine._thread.is_alive():
            raise RuntimeError(f"replica {self.replica}: the engine thread is not running")

    def __del__(self) -> None:
        """Serve's graceful shutdown, after the drain (no robot left): leave the board, stop the engine."""
        for task in self._tasks:
            task.cancel()
        try:
            self.board.remove.remote(self.replica)
        except Exception:  # noqa: BLE001 - the board may be gone with its owner
            pass
        self.server.close()

    # ------------------------------------------------------------------ requests
    def _start_tasks(self) -> None:
        """The stats push and the memory trimmer, on the event loop the replica's code runs on (started from the
        constructor when Serve runs it on that loop, else at the first request)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._push_stats()), asyncio.ensure_future(self.server.trimmer.run())]

    async def _push_stats(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                stats = await loop.run_in_executor(self.server._threads, self.server.stats)
                if await self.board.put.remote(self.replica, time.time(), _jsonable(stats)):
                    await self._close_all(CLOSE_GOING_AWAY, "oxygen-gym serve: the fleet is stopping")
            except Exception as e:  # noqa: BLE001 - the next push tries again
                log.warning("replica %s: stats push failed: %s", self.replica, e)
            await asyncio.sleep(self.stats_push_s)

    async def handle(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        self._start_tasks()
        if scope["type"] == "http":
            await self._http(scope, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)

    async def _http(self, scope, send) -> None:
        request, connection = HandshakeRequest(scope), HandshakeConnection(scope)
        if scope_path(scope) == "/stats":
            response = self.server._refusal(connection, request, http_path=True)
            if response is None:
                body = json.dumps(_jsonable(await self.fleet_stats())) + "\n"
                response = connection.respond(http.HTTPStatus.OK, body)
                response.headers["Content-Type"] = "application/json"
        else:
            response = await self.server._http(connection, request)
            if response is None:  # a plain GET of the websocket endpoint, as the websockets library answers it
                response = connection.respond(http.HTTPStatus.UPGRADE_REQUIRED,
                                              "oxygen-gym serve: this endpoint takes websocket connections\n")
                response.headers["Upgrade"] = "websocket"
        await send_http(send, response)

    async def _websocket(self, scope, receive, send) -> None:
        cfg = self.server.config
        request, connection = HandshakeRequest(scope), HandshakeConnection(scope)
        response = await self.server._http(connection, request)
        origin = request.headers.get("Origin")
        if response is None and origin is not None and origin not in cfg.allow_origins:
            # the websockets library's own Origin check in the single server (origins=[None, *allow_origins])
            response = self.server._refuse(connection, http.HTTPStatus.FORBIDDEN, "Origin not allowed (--allow-origin)")
        if response is not None:
            await deny_websocket(scope, send, response)
            return
        if (await receive())["type"] != "websocket.connect":
            return
        ws = AsgiWebsocket(scope, receive, send, max_size=cfg.max_message_bytes, max_queue=cfg.max_buffered_frames)
        await ws.accept()
        self._connections.add(ws)
        try:
            await self.server._handler(ws)
        finally:
            self._connections.discard(ws)
            await ws.finish()

    async def _close_all(self, code: int, reason: str) -> None:
        for ws in list(self._connections):
            await ws.close(code, reason)

    async def fleet_stats(self) -> dict:
        loop = asyncio.get_running_loop()
        own = await loop.run_in_executor(self.server._threads, self.server.stats)
        board = await self.board.all.remote()
        return fleet_stats(self.replica, _jsonable(own), board, time.time(), STALE_AFTER_PUSHES * self.stats_push_s + 2,
                           self.server.config.max_robots)


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
