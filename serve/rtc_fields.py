"""Real-time chunking over the wire: a request's `prev_actions` / `inference_delay`, and the delay the server
estimates for a robot that sends a previous chunk without one.

`prev_actions`: the previous chunk's actions not yet executed when the observation was taken, robot units,
`(n, action_dim)` (a map head -> array for a several-head model); `inference_delay`: control steps that pass while
the server computes the reply. openpi-client requests carry neither and are served exactly as before.

The estimate follows lerobot's rollout (`rollout/inference/rtc.py`: ceil(max recent latency / dt)) with its later
fix (lerobot PR #4454): a robot's first call (cold start) is left out of the window. The latency is what this server
measured for that robot, from receiving a message to its reply being ready: the network's share is the client's to
add, by sending `inference_delay` itself.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from oxygen_gym.policies.rtc_inputs import check_delay, check_prev_actions

from .observations import ObservationKeyError

MAX_PREV_ROWS = 1024  # a previous chunk longer than this is a malformed request, not a chunk


def rtc_fields(obs: dict, heads: list[str], action_dim: int, chunk: int):
    """(prev_actions, inference_delay or None = estimate) from a request, or (None, None) without them. Errors
    name the field and keep the connection usable (ObservationKeyError)."""
    prev, delay = obs.get("prev_actions"), obs.get("inference_delay")
    if prev is None:
        if delay is not None:
            raise ObservationKeyError("inference_delay: given without prev_actions (the previous chunk's unexecuted "
                                      "actions it is measured against)")
        return None, None
    try:
        if isinstance(prev, dict):
            unknown = [str(h)[:40] for h in prev if h not in heads]
            if unknown:
                raise ValueError(f"prev_actions: unknown action head(s) {unknown}; the model has {heads}")
            prev = {h: _rows(check_prev_actions(a, action_dim, f"prev_actions[{h!r}]"), h) for h, a in prev.items()}
        else:
            prev = _rows(check_prev_actions(prev, action_dim), None)
        if delay is not None:
            delay = check_delay(delay, chunk)
    except ValueError as e:
        raise ObservationKeyError(str(e)) from None
    return prev, delay


def _rows(a: np.ndarray, head: str | None) -> np.ndarray:
    if len(a) > MAX_PREV_ROWS:
        field = "prev_actions" if head is None else f"prev_actions[{head!r}]"
        raise ValueError(f"{field}: {len(a)} rows, over the limit of {MAX_PREV_ROWS}")
    return a


class DelayEstimator:
    """One robot's inference delay in control steps: ceil(max of its recent reply latencies / control period),
    its first call left out. 0 before any call has been timed."""

    def __init__(self, control_hz: float, window: int = 10) -> None:
        if not control_hz > 0:
            raise ValueError(f"control_hz must be > 0, got {control_hz}")
        self.period_ms = 1e3 / control_hz
        self.recent: deque[float] = deque(maxlen=window)
        self.calls = 0

    def observe(self, latency_ms: float) -> None:
        self.calls += 1
        if self.calls > 1:  # the cold start (first call: allocations, lazy inits) is not what the next call costs
            self.recent.append(float(latency_ms))

    def estimate(self, chunk: int) -> int:
        if not self.recent:
            return 0
        return min(chunk, math.ceil(max(self.recent) / self.period_ms))
