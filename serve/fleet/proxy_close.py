"""A close code for robots whose replica is gone, sent by Ray Serve's HTTP proxy (an ASGI middleware there).

When a replica's process dies (a crash, `ray.kill`, or Serve's force-kill at the end of a drain), the robot's
websocket is not on the replica but on Serve's proxy: the proxy's call into the replica fails after the websocket
was accepted, Serve then ends the ASGI call without a `websocket.close`, and the robot sees its socket dropped (1006,
no reason). Nothing in the replica can run by then, and Serve has no hook for it; but Serve's proxy applies the
Starlette middlewares returned by the function named in `RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH` (read in the
proxy's process). `ReplicaLossClose` is one: it watches each websocket's messages, and when the proxy's call ends
after an accept with neither side having closed, it closes the robot's socket itself with 1012 (service restart)
and a reason naming the replica and the unfinished language requests the robot lost with it (counted from the
replies it relayed: a request is unfinished from its first update until one with `done`; a reset drops them all).

Where Ray leaves no way to send a close frame, the robot still sees 1006: when the proxy's own process or node dies
(the robot's TCP connection ends with it), or where the proxy was started without this middleware (a Serve instance
already running in the cluster before the fleet, see `fleet/app.py`). serve/client.py reconnects on 1006 as on 1012.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
CALLBACK = "oxygen_gym.serve.fleet.proxy_close.proxy_middlewares"
CLOSE_SERVICE_RESTART = 1012  # RFC 6455 / IANA: the service is restarting; the client may reconnect
MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason is at most 123 bytes of UTF-8
_RESET_ACKS = ("reset", "episode_start")  # controls after which the server holds no language request of the session


def proxy_middlewares() -> list:
    """The callback Serve's proxy calls (by its import path in `CALLBACK_ENV`) for the middlewares it applies."""
    from starlette.middleware import Middleware

    return [Middleware(ReplicaLossClose)]


def loss_reason(replica: str | None, unfinished: int) -> str:
    """The close reason a robot gets when its replica is gone (within the 123 bytes a close frame allows)."""
    who = f"replica {replica}" if replica else "replica"
    plural = "" if unfinished == 1 else "s"
    text = f"{who} gone: {unfinished} unfinished language request{plural} dropped; reconnect"
    return text.encode()[:MAX_REASON_BYTES].decode(errors="ignore")


@dataclass
class SessionWatch:
    """What the proxy saw of one robot's websocket: accepted, closed by either side, its replica, its requests."""

    accepted: bool = False
    closed: bool = False  # the replica sent a close, or the robot's disconnect arrived
    replica: str | None = None
    unfinished: set = field(default_factory=set)

    def outgoing(self, message: dict) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            self.accepted = True
        elif kind == "websocket.close":
            self.closed = True
        elif kind == "websocket.send" and message.get("bytes"):
            self._reply(message["bytes"])

    def incoming(self, message: dict) -> None:
        if message["type"] == "websocket.disconnect":
            self.closed = True

    def _reply(self, data: bytes) -> None:
        """Track the session from a reply the replica sent (our own msgpack: trusted, small, decoded in C)."""
        try:
            reply = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception:  # noqa: BLE001 - not one of ours; nothing to track
            return
        if not isinstance(reply, dict):
            return
        if self.replica is None and isinstance(reply.get("replica"), str):  # the metadata sent on connect
            self.replica = reply["replica"]
        if reply.get("__ack__") in _RESET_ACKS:
            self.unfinished.clear()
        for update in reply.get("language") or ():
            if isinstance(update, dict) and "request_id" in update:
                if update.get("done"):
                    self.unfinished.discard(update["request_id"])
                else:
                    self.unfinished.add(update["request_id"])

    def lost_without_close(self) -> bool:
        return self.accepted and not self.closed


class ReplicaLossClose:
    """ASGI middleware for Serve's proxy: 1012 and what was lost, where the proxy would drop the socket silently."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        watch = SessionWatch()

        async def watched_receive():
            message = await receive()
            watch.incoming(message)
            return message

        async def watched_send(message):
            await send(message)
            watch.outgoing(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        finally:
            if watch.lost_without_close():
                watch.closed = True
                try:
                    await send({"type": "websocket.close", "code": CLOSE_SERVICE_RESTART,
                                "reason": loss_reason(watch.replica, len(watch.unfinished))})
                except Exception:  # noqa: BLE001 - the robot's socket is gone too: nothing to tell it
                    pass
