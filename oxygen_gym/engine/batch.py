"""One frame for several robots at once (the server): the scheduler's own `oxygen` frame path (scheduler.py), run
over several robots' frames, one frame per robot. A lone policy runs the same path with a batch of one.

Actions match the robot served alone to fp32 rounding and greedy tokens are identical
(tests/serve/test_serve_equivalence.py), as long as the pool has room (a full pool makes robots queue behind each other).
"""
from __future__ import annotations

from collections import deque

from ..core.model_contract import EngineModel
from .frame import FrameInput, FrameResult
from .scheduler import FrameScheduler
from .slots import SlotPool


class BatchScheduler(FrameScheduler):
    """`oxygen` frames of many robots sharing one model, one slot pool and one request table.

    `prefill_rows`: robots per embed + prefill call. Prefill is compute-bound: on a CPU a bigger batch buys nothing and
    its attention scratch outgrows the caches (measured 1.4x slower per robot at 4 rows with `small`), so a CPU
    prefills one robot per call, which also keeps every robot's prefix KV bit-identical to its lone run; GPUs take the
    whole batch (None = all rows on CUDA, 1 on CPU). Denoise and decode are always batched.
    """

    def __init__(
        self,
        model: EngineModel,
        pool: SlotPool,
        *,
        num_steps: int | None = None,
        prefill_rows: int | None = None,
        cuda_graphs: bool | None = None,
    ) -> None:
        super().__init__(model, pool, "oxygen", num_steps=num_steps, cuda_graphs=cuda_graphs)
        if prefill_rows is None:
            prefill_rows = 1 if model.device.type == "cpu" else pool.scratch_rows
        if prefill_rows < 1:
            raise ValueError(f"prefill_rows must be >= 1, got {prefill_rows}")
        self.prefill_rows = prefill_rows

    @property
    def max_batch(self) -> int:
        return self.pool.scratch_rows

    def run_batch(self, frames: list[FrameInput], k: int | list[int]) -> list[FrameResult]:
        """One frame for each robot in `frames` (at most one frame per session); results in the same order.
        `k`: decode steps for every robot, or one per frame (each robot's own budget)."""
        if not frames:
            return []
        if len(frames) > self.max_batch:
            raise ValueError(f"batch of {len(frames)} frames exceeds the pool's {self.max_batch} scratch rows")
        sessions = [f.session for f in frames]
        if len(set(sessions)) != len(sessions):
            raise ValueError(f"a batch holds at most one frame per session, got sessions {sessions}")
        ks = [k] * len(frames) if isinstance(k, int) else list(k)
        if len(ks) != len(frames) or any(not isinstance(x, int) or x < 0 for x in ks):
            raise ValueError(f"k must be an int >= 0 or one per frame, got {k!r} for {len(frames)} frames")
        return self._run(frames, ks, self._oxygen)

    def drop_session(self, session: int) -> int:
        """Free every request of `session` (a robot that disconnected or reset). Returns how many were dropped."""
        dropped = [r for r in self.table.by_slot if r.session == session]
        for r in dropped:
            self.table.evict(r)
        queued = len(self.waiting)
        self.waiting = deque((r, p) for r, p in self.waiting if r.session != session)
        return len(dropped) + queued - len(self.waiting)
