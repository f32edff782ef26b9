"""The robot side of `oxygen-gym serve`: a `RemotePolicy` whose `act()` has `MultiTaskPolicy.act`'s signature, so the
same robot loop (an action queue, asynchronous execution, the live clock) runs against a local policy or a server.

It speaks the server's own websocket protocol (openpi's, docs/api.md section 6) with the policy's observation format
(`images` by the robot's camera names, `state`, `prompt`), plus the real-time-chunking fields `prev_actions` and
`inference_delay`. openpi's `WebsocketClientPolicy` stays the client for openpi's own loops.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from oxygen_gym.policies.language import LanguageUpdate
from oxygen_gym.policies.robots import get_robot

from . import wire


# closes after which a new session may succeed: going away (the fleet stops), abnormal (no close frame: the proxy
# itself went away), internal error, service restart (a fleet replica died or outstayed its drain: Serve's proxy
# sends it, serve/fleet/proxy_close.py), try again later
RECONNECT_CODES = (1001, 1006, 1011, 1012, 1013)
# handshake answers after which a new try may succeed: every seat taken (503), a replica lost mid-handshake (500, 502),
# a proxy timeout (504)
RETRY_STATUSES = (500, 502, 503, 504)


class ServerError(RuntimeError):
    """The server answered a message with an error (the text names the field)."""


class RemotePolicy:
    """A connection to one robot session of an `oxygen-gym serve` (closing it ends the session)."""

    def __init__(self, uri: str = "ws://127.0.0.1:8000", *, api_key: str | None = None, timeout_s: float = 600.0,
                 reconnects: int = 0, backoff_s: float = 0.5, max_backoff_s: float = 10.0) -> None:
        """`reconnects` > 0 (for a fleet, `serve --ray`): when the connection drops (a replica died or stopped:
        close codes 1001, 1006, 1011, 1012, 1013; or 500, 502, 503, 504 while connecting), open a new session,
        waiting `backoff_s` doubling up to `max_backoff_s` (each wait drawn between half and all of it, so a dead
        replica's robots do not come back in step), at most `reconnects` times in a row, and send the unanswered
        message again. The new session starts at frame 0 with no language request: the ones the old session had
        unfinished are appended to `lost_requests` (their last update; the close reason, in `last_close`, counts
        them too). 0 (the default): errors reach the caller."""
        self._headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self.uri = uri
        self.timeout_s = timeout_s
        self.max_reconnects, self.backoff_s, self.max_backoff_s = reconnects, backoff_s, max_backoff_s
        self.reconnects = 0  # sessions opened after the first
        self.lost_requests: list[LanguageUpdate] = []  # unfinished language requests of sessions that dropped
        self.last_close: tuple[int, str] | None = None  # the close code and reason of the last dropped session
        self._unfinished: dict[int, LanguageUpdate] = {}  # request id -> its last update, while not done
        self._stack = ExitStack()
        self._connect()
        self.robot = get_robot(self.metadata["robot"])
        self.horizon = int(self.metadata["action_horizon"])
        self.action_heads: list[str] = list(self.metadata.get("action_heads") or ["actions"])
        self.action_head = self.action_heads[0]
        self.last_reply: dict | None = None  # the whole last reply (timing, the RTC delay the server used, ...)

    def _connect(self) -> None:
        # entered as a context manager, as websockets >= 16 asks (a bare connect() warns); closed by close()
        self._stack.close()
        self._stack = ExitStack()
        self._ws = self._stack.enter_context(connect(
            self.uri, additional_headers=self._headers, compression=None, max_size=None, open_timeout=self.timeout_s,
            proxy=None,
        ))
        self.metadata: dict = wire.unpackb(self._ws.recv(timeout=self.timeout_s))

    def act(
        self,
        obs: dict,
        *,
        prev_actions: np.ndarray | dict[str, np.ndarray] | None = None,
        inference_delay: int | None = None,
        on_actions: Callable[[np.ndarray | dict[str, np.ndarray]], None] | None = None,
    ) -> tuple[np.ndarray | dict[str, np.ndarray], list[LanguageUpdate]]:
        """One frame on the server. `inference_delay` None with `prev_actions`: the server estimates it from its
        own timing of this robot. `on_actions` is called when the reply arrives (actions and language come
        together over the network)."""
        message = {"images": obs["images"], "state": obs["state"], "prompt": obs["prompt"]}
        if prev_actions is not None:
            message["prev_actions"] = prev_actions
            if inference_delay is not None:
                message["inference_delay"] = int(inference_delay)
        reply = self._call(message)
        heads = {h: np.asarray(a) for h, a in reply["heads"].items()}
        actions = heads[self.action_head] if len(heads) == 1 else heads
        if on_actions is not None:
            on_actions(actions)
        updates = [
            LanguageUpdate(u["request_id"], u["task"], u["frame"], tuple(u["new_token_ids"]), u["new_text"], u["text"],
                           u["done"])
            for u in reply["language"]
        ]
        for u in updates:
            if u.done:
                self._unfinished.pop(u.request_id, None)
            else:
                self._unfinished[u.request_id] = u
        return actions, updates

    def reset(self) -> None:
        """Episode boundary on the server: the session's requests are dropped, its frame counter restarts."""
        self._call({"__ctrl__": "reset"})
        self._unfinished.clear()  # dropped on purpose: a later lost session does not count them

    def stats(self) -> dict:
        """This session's `policy.stats()` as the server computed it."""
        return self._call({"__ctrl__": "stats"})["session"]

    def _call(self, message: dict) -> dict:
        packed = wire.packb(message)
        failures = 0
        while True:
            try:
                self._ws.send(packed)
                raw = self._ws.recv(timeout=self.timeout_s)
                break
            except ConnectionClosed as e:
                close = e.rcvd or e.sent  # neither: the connection dropped without a close frame (1006)
                self.last_close = (close.code, close.reason) if close else (1006, "no close frame")
                if failures >= self.max_reconnects or self.last_close[0] not in RECONNECT_CODES:
                    raise
                failures = self._reconnect(failures)
        if isinstance(raw, str):
            raise ServerError(raw)
        reply = wire.unpackb(raw)
        self.last_reply = reply
        return reply

    def _reconnect(self, failures: int) -> int:
        """A new session after the old one dropped (backoff between tries); returns the failures so far."""
        self.lost_requests.extend(self._unfinished.values())
        self._unfinished.clear()
        while True:
            time.sleep(min(self.max_backoff_s, self.backoff_s * 2**failures) * random.uniform(0.5, 1.0))
            failures += 1
            try:
                self._connect()
                self.reconnects += 1
                return failures
            except (InvalidStatus, OSError, ConnectionClosed) as e:
                status = e.response.status_code if isinstance(e, InvalidStatus) else None
                if failures > self.max_reconnects or (status is not None and status not in RETRY_STATUSES):
                    raise

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "RemotePolicy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
