"""The robot side of `oxygen-gym serve`: a `RemotePolicy` whose `act()` has `MultiTaskPolicy.act`'s signature, so the
same robot loop (an action queue, asynchronous execution, the live clock) runs against a local policy or a server.

It speaks the server's own websocket protocol (openpi's, docs/api.md section 6) with the policy's observation format
(`images` by the robot's camera names, `state`, `prompt`), plus the real-time-chunking fields `prev_actions` and
`inference_delay`. openpi's `WebsocketClientPolicy` stays the client for openpi's own loops.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from websockets.sync.client import connect

from oxygen_gym.policies.language import LanguageUpdate
from oxygen_gym.policies.robots import get_robot

from . import wire


class ServerError(RuntimeError):
    """The server answered a message with an error (the text names the field)."""


class RemotePolicy:
    """A connection to one robot session of an `oxygen-gym serve` (closing it ends the session)."""

    def __init__(self, uri: str = "ws://127.0.0.1:8000", *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        self._ws = connect(uri, additional_headers=headers, compression=None, max_size=None, open_timeout=timeout_s,
                           proxy=None)
        self.timeout_s = timeout_s
        self.metadata: dict = wire.unpackb(self._ws.recv(timeout=timeout_s))
        self.robot = get_robot(self.metadata["robot"])
        self.horizon = int(self.metadata["action_horizon"])
        self.action_heads: list[str] = list(self.metadata.get("action_heads") or ["actions"])
        self.action_head = self.action_heads[0]
        self.last_reply: dict | None = None  # the whole last reply (timing, the RTC delay the server used, ...)

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
        return actions, updates

    def reset(self) -> None:
        """Episode boundary on the server: the session's requests are dropped, its frame counter restarts."""
        self._call({"__ctrl__": "reset"})

    def stats(self) -> dict:
        """This session's `policy.stats()` as the server computed it."""
        return self._call({"__ctrl__": "stats"})["session"]

    def _call(self, message: dict) -> dict:
        self._ws.send(wire.packb(message))
        raw = self._ws.recv(timeout=self.timeout_s)
        if isinstance(raw, str):
            raise ServerError(raw)
        reply = wire.unpackb(raw)
        self.last_reply = reply
        return reply

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> "RemotePolicy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
