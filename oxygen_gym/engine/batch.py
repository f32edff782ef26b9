"""One frame for several robots at once: the `oxygen` frame of scheduler.py, batched across robots (sessions).

Read `run_batch` top to bottom: prefill every robot's observation into a contiguous block of scratch rows, denoise
them as one batch, hand each robot's prefix KV to its new language requests, then decode k steps for the in-flight
requests of exactly the robots in this batch, in one batch.

What a robot gets does not depend on its companions: its rows never attend to another robot's rows (each prefix is
its own cache row, masks follow each row's length), its language requests advance k tokens per frame *of its own*
(a robot absent from a batch is not decoded in it), and queued requests are admitted per robot, first in first out.
Actions therefore match the robot served alone to fp32 rounding and greedy tokens are identical
(tests/serve/test_serve_equivalence.py), as long as the pool has room (a full pool makes robots queue behind each other).
"""
from __future__ import annotations

from collections import deque

import torch

from ..core.guidance import Guidance, check_guidance
from ..core.model_contract import EngineModel, PrefixState
from .frame import FrameInput, FrameProgress, FrameResult, FrameStats
from .request import Request, RequestTable
from .scheduler import FrameScheduler
from .slots import SlotPool


class SessionTable(RequestTable):
    """The request table of many robots: each robot numbers its own requests from 0 (as a lone policy does), so a slot's
    owner is the pair (session, request_id)."""

    def persist(self, request: Request) -> int:
        request.slot = self.pool.allocate((request.session, request.request_id))
        self.by_slot.append(request)
        return request.slot


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
        self.table = SessionTable(pool)

    @property
    def max_batch(self) -> int:
        return self.pool.scratch_rows

    # ------------------------------------------------------------------ public
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
        for f in frames:
            self.check_frame(f)
            check_guidance(f.guidance, f.head_noise(self.heads))
        ks = [k] * len(frames) if isinstance(k, int) else list(k)
        if len(ks) != len(frames) or any(not isinstance(x, int) or x < 0 for x in ks):
            raise ValueError(f"k must be an int >= 0 or one per frame, got {k!r} for {len(frames)} frames")
        self.timer.start_frame()
        progress = FrameProgress()

        self._admit_waiting_of(set(sessions))
        first = self.pool.scratch
        state = self._prefill_rows(frames, first)
        actions = self._fan_out_rows(frames, first, state)
        for i, f in enumerate(frames):
            self._admit_new_from(f, first + i, state, i)
        self._decode_sessions(dict(zip(sessions, ks)), progress)

        frame_ms, stage_ms = self.timer.read()
        out = []
        for i, f in enumerate(frames):
            # by request id: the order a robot sees must not depend on where companions moved its slots
            mine = ((r, t) for (s, _), (r, t) in progress.advanced.items() if s == f.session)
            advanced = sorted(mine, key=lambda x: x[0].request_id)
            stats = FrameStats(
                frame=f.frame,
                frame_ms=frame_ms,
                stage_ms=dict(stage_ms),
                batch_sizes=list(progress.batch_sizes),
                tokens=sum(len(t) for _, t in advanced),
                active=len(self.table),
                queued=len(self.waiting),
                pool_used=self.pool.active,
            )
            out.append(FrameResult({h: a[i : i + 1] for h, a in actions.items()}, advanced, stats))
        return out

    def check_frame(self, frame: FrameInput) -> None:
        """Raise (changing nothing) for a frame that can never run: a request of another session, or too long."""
        noise = frame.head_noise(self.heads)
        for r in frame.new_requests:
            if r.session != frame.session:
                raise ValueError(f"request {r.request_id} belongs to session {r.session}, not {frame.session}")
            self._check_fits(r, frame.prefix, noise)

    def drop_session(self, session: int) -> int:
        """Free every request of `session` (a robot that disconnected or reset). Returns how many were dropped."""
        dropped = [r for r in self.table.by_slot if r.session == session]
        for r in dropped:
            self.table.evict(r)
        queued = len(self.waiting)
        self.waiting = deque((r, p) for r, p in self.waiting if r.session != session)
        return len(dropped) + queued - len(self.waiting)

    # ------------------------------------------------------------------ stages
    def _prefill_rows(self, frames: list[FrameInput], first: int) -> PrefixState:
        """Prefill frame i into row `first + i`, `prefill_rows` robots per call."""
        states = []
        with self.timer.stage("prefill"):
            for start in range(0, len(frames), self.prefill_rows):
                chunk = frames[start : start + self.prefill_rows]
                inputs = self.model.batch_prefix_inputs([f.prefix for f in chunk])
                states.append(self.runner.prefill(first + start, len(chunk), inputs))
        state = PrefixState.cat(states)
        for i, n in enumerate(state.host_lengths):
            self.pool.lengths[first + i] = n
        return state

    def _fan_out_rows(self, frames: list[FrameInput], first: int, state: PrefixState) -> dict[str, torch.Tensor]:
        """Every head denoises rows [first, first + len(frames)) as one batch. Frames name the same heads (a
        server's sessions share one policy's head list); each row keeps its own RTC guidance (delay, previous chunk)."""
        noises = [f.head_noise(self.heads) for f in frames]
        names = list(noises[0])
        if any(list(n) != names for n in noises):
            raise ValueError(f"frames of one batch must denoise the same heads, got {[list(n) for n in noises]}")
        out = {}
        for h in names:
            x = torch.cat([n[h] for n in noises])
            guidance = Guidance.cat([f.guidance.get(h) for f in frames], x.shape[1], x.shape[2])  # rows without: plain
            out[h] = self._denoise(h, first, state, x, guidance)
        return out

    def _admit_new_from(self, frame: FrameInput, row: int, state: PrefixState, i: int) -> None:
        """The frame's new requests take slots and a copy of its prefix KV; behind this robot's queue if it has one."""
        for r in frame.new_requests:
            self._admit_copy(r, frame.prefix, row, state, i, blocked=self._queued(frame.session))

    def _admit_waiting_of(self, members: set[int]) -> None:
        """Queued requests of this batch's robots take free slots first (FIFO per robot); their prefix is prefilled
        again, in the slot itself."""
        while self.pool.can_allocate():
            with self._manager():
                nxt = next((i for i, (r, _) in enumerate(self.waiting) if r.session in members), None)
                if nxt is None:
                    return
                r, prefix_inputs = self.waiting[nxt]
                del self.waiting[nxt]
                self.table.persist(r)
            self._start(r, self._prefill(prefix_inputs, r.slot), 0)

    def _queued(self, session: int) -> bool:
        return any(r.session == session for r, _ in self.waiting)

    def _decode_sessions(self, steps: dict[int, int], progress: FrameProgress) -> None:
        """Decode step j batches the in-flight requests of the sessions with `steps[session] > j` (and no others),
        gathered at the front of the pool. Finished requests leave at once (as in `_decode`)."""
        for j in range(max(steps.values(), default=0)):
            with self._manager():
                members = {s for s, k in steps.items() if k > j}
                batch_reqs = [r for r in self.table.by_slot if r.session in members]
                if not batch_reqs:
                    return
                self.table.move_to_front(batch_reqs)
                batch = self.table.fetch(self.model.device, len(batch_reqs))
            self._decode_step(batch, progress, lambda r: (r.session, r.request_id))
