"""What a policy session asks of the engine it runs its frames on, as a protocol.

Why: three engines take a session's frames, and nothing but their method names tied them together: the scheduler of
the single-process modes (engine/scheduler.py `FrameScheduler`), the `parallel` baseline's two worker processes
(engine/parallel.py `ParallelExecutor`) and the server's adapter onto its batching loop (serve/batch_loop.py
`SessionEngine`). tests/policy/test_frame_engine.py checks each against this protocol.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from oxygen_gym.engine.frame import FrameInput, FrameResult
from oxygen_gym.engine.request import Request


@runtime_checkable
class FrameEngine(Protocol):
    """Runs one robot's frames. `close()` (release workers) is optional: the policy calls it where it exists, and
    reads an optional `total_queued` (requests that ever waited for a KV slot) for its stats."""

    def run(
        self, frame: FrameInput, k: int, on_actions: Callable[[dict[str, torch.Tensor]], None] | None = None
    ) -> FrameResult:
        """One frame: its action heads, then up to `k` decode steps for every in-flight language request.
        `on_actions(head_actions)` is called once, as soon as the actions are known."""
        ...

    def in_flight(self) -> list[Request]:
        """This robot's language requests not yet done (the decode budget reads them)."""
        ...

    def reset(self) -> None:
        """Drop this robot's in-flight requests (an episode boundary)."""
        ...
