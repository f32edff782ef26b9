"""One frame, per execution mode. Read `_oxygen` top to bottom: prefill into a slot, fan the slot out to the
action expert, admit language requests, decode k steps for every in-flight request, evict the finished.

isolated     action prefill + denoise; every new request gets its own prefill and decodes to completion
shared       one prefill serves the action expert and the frame's requests, which decode to completion
oxygen       one prefill; new requests join the in-flight batch; the batch decodes k steps; finished leave
upper_bound  like oxygen, but each request decodes only k tokens and is dropped (benchmarks' bound)
"""
from __future__ import annotations

from collections import deque
import torch

from ..model.pi05 import PI05Model
from .cuda_graphs import CudaGraphRunner, use_cuda_graphs
from .frame import FrameInput, FrameResult, FrameStats, PrefixInputs
from .request import Request, RequestTable
from .sampling import choose_tokens
from .slots import SlotPool
from .timing import StageTimer

MODES = ("isolated", "shared", "oxygen", "upper_bound")


class CapacityError(ValueError):
    """A request that can never fit a slot."""


class FrameScheduler:
    def __init__(
        self, model: PI05Model, pool: SlotPool, mode: str, *, num_steps: int | None = None, cuda_graphs: bool | None = None
    ) -> None:
        """`cuda_graphs`: replay decode steps and the denoise loop as CUDA graphs (None = on for CUDA; False =
        eager fallback)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.model = model
        self.pool = pool
        self.mode = mode
        self.num_steps = num_steps or model.config.num_steps
        self.table = RequestTable(pool)
        self.waiting: deque[tuple[Request, PrefixInputs]] = deque()
        self.timer = StageTimer(model.device)
        self.total_queued = 0  # requests that ever had to wait for a slot
        self.graphs = CudaGraphRunner(model, pool) if use_cuda_graphs(cuda_graphs, model.device) else None

    # ------------------------------------------------------------------ public
    def run(self, frame: FrameInput, k: int) -> FrameResult:
        return self._run(frame, k, getattr(self, f"_{self.mode}"))

    def run_language_only(self, frame: FrameInput) -> FrameResult:
        """Isolated language path alone (the `parallel` baseline's language worker); actions are None."""
        return self._run(frame, 0, self._isolated_language)

    def _run(self, frame: FrameInput, k: int, body) -> FrameResult:
        for r in frame.new_requests:
            self._check_fits(r, frame.prefix, frame.noise.shape[1])
        self.timer.start_frame()
        self._advanced: dict[int, tuple[Request, list[int]]] = {}
        self._batch_sizes: list[int] = []
        actions = body(frame, k)
        frame_ms, stage_ms = self.timer.read()
        stats = FrameStats(
            frame=frame.frame,
            frame_ms=frame_ms,
            stage_ms=stage_ms,
            batch_sizes=self._batch_sizes,
            tokens=sum(self._batch_sizes),
            active=len(self.table),
            queued=len(self.waiting),
            pool_used=self.pool.active,
        )
        return FrameResult(actions, list(self._advanced.values()), stats)

    def in_flight(self) -> list[Request]:
        return list(self.table.by_slot) + [r for r, _ in self.waiting]

    def reset(self) -> None:
        self.table.clear()
        self.waiting.clear()

    # ------------------------------------------------------------------ modes
    def _oxygen(self, frame: FrameInput, k: int) -> torch.Tensor:
        self._admit_waiting()
        slot, owner = self._frame_slot(frame.new_requests)
        n, actions = self._prefill_and_denoise(frame, slot)
        self._admit_new(frame, owner, slot, n)
        self._decode(steps=k)
        return actions

    def _upper_bound(self, frame: FrameInput, k: int) -> torch.Tensor:
        for r in frame.new_requests:
            r.max_new_tokens = min(r.max_new_tokens, k)
        return self._oxygen(frame, k)

    def _shared(self, frame: FrameInput, k: int) -> torch.Tensor:
        slot, owner = self._frame_slot(frame.new_requests)
        n, actions = self._prefill_and_denoise(frame, slot)
        self._admit_new(frame, owner, slot, n)
        self._decode(steps=None)
        while self.waiting:  # a pool smaller than the frame's task count: the rest run after, still this frame
            self._admit_waiting()
            self._decode(steps=None)
        return actions

    def _isolated(self, frame: FrameInput, k: int) -> torch.Tensor:
        _, actions = self._prefill_and_denoise(frame, self.pool.scratch)
        self._isolated_language(frame, k)
        return actions

    def _isolated_language(self, frame: FrameInput, k: int) -> None:
        for r in frame.new_requests:
            with self._manager():
                slot = self.table.persist(r)
            n = self._prefill(frame.prefix, slot)
            self._start(r, n)
            self._decode(steps=None)

    # ------------------------------------------------------------------ stages
    def _prefill(self, prefix_inputs: PrefixInputs, slot: int) -> int:
        with self.timer.stage("prefill"):
            p = prefix_inputs
            prefix = self.model.embed_prefix(p.images, p.image_masks, p.tokens, p.token_masks)
            self.model.prefill(self.pool.view(slot, slot + 1), prefix)
        self._prefix_lengths = prefix.lengths
        return int(prefix.lengths[0])

    def _prefill_and_denoise(self, frame: FrameInput, slot: int) -> tuple[int, torch.Tensor]:
        n = self._prefill(frame.prefix, slot)
        with self.timer.stage("denoise"):
            if self.graphs is not None:
                actions = self.graphs.denoise(slot, self._prefix_lengths, frame.noise, self.num_steps)
            else:
                actions = self.model.denoise(self.pool.view(slot, slot + 1), self._prefix_lengths, frame.noise, self.num_steps)
        return n, actions

    def _start(self, r: Request, prefix_len: int) -> None:
        """Write the task prompt after the prefix (all but its last token, which the first decode step feeds)."""
        r.prefix_len = r.length = prefix_len
        head = r.prompt_ids[:-1]
        if head:
            with self.timer.stage("prefill"):
                tokens = torch.tensor([head], dtype=torch.long, device=self.model.device)
                start = torch.tensor([prefix_len], dtype=torch.long, device=self.model.device)
                self.model.extend(self.pool.view(r.slot, r.slot + 1), tokens, start)
        r.length = prefix_len + len(head)
        r.pending = r.prompt_ids[-1]
        self.pool.lengths[r.slot] = r.length

    def _decode(self, steps: int | None) -> None:
        """Decode `steps` tokens for every active request (None: until all are done). Finished requests leave
        the batch right away, so the next step's batch is again the contiguous view [0, active)."""
        step = 0
        while len(self.table) and (steps is None or step < steps):
            with self._manager():
                batch = self.table.fetch(self.model.device)
            self._decode_step(batch, self.graphs is not None, lambda r: r.request_id)
            step += 1

    # ------------------------------------------------------------------ admission
    def _frame_slot(self, new: list[Request]) -> tuple[int, Request | None]:
        """The slot this frame's prefill writes: the first new request's own slot if one is free, else scratch."""
        with self._manager():
            if new and not self.waiting and self.pool.can_allocate():
                return self.table.persist(new[0]), new[0]
        return self.pool.scratch, None

    def _admit_new(self, frame: FrameInput, owner: Request | None, slot: int, n: int) -> None:
        for r in frame.new_requests:
            if r is owner:
                self._start(r, n)
                continue
            self._admit_copy(r, frame.prefix, slot, n, blocked=bool(self.waiting))

    def _decode_step(self, batch, use_graphs: bool, key) -> None:
        """One decode step over `batch` (pool rows 0..size): token choice, bookkeeping under `key(request)`, evictions."""
        with self.timer.stage("decode"):
            if use_graphs:
                logits = self.graphs.decode_step(batch.size, batch.last_tokens, batch.positions)
            else:
                logits = self.model.decode_step(self.pool.view(0, batch.size), batch.last_tokens, batch.positions)
            tokens = choose_tokens(logits, batch.requests)
        with self._manager():
            self.table.update(batch, tokens)
            for r, t in zip(batch.requests, tokens):
                self._advanced.setdefault(key(r), (r, []))[1].append(t)
            self.table.evict_finished()
        self._batch_sizes.append(batch.size)

    def _admit_copy(self, r: Request, prefix: PrefixInputs, src_row: int, n: int, blocked: bool) -> None:
        """Give `r` a slot holding a copy of row `src_row`'s `n` prefix positions, or queue it (FIFO, with its frame's
        inputs) when `blocked` (earlier requests wait) or the pool is full."""
        with self._manager():
            admitted = not blocked and self.pool.can_allocate()
            if admitted:
                self.table.persist(r)
                self.pool.copy(src_row, r.slot, n)
            else:
                self.waiting.append((r, prefix))
                self.total_queued += 1
        if admitted:
            self._start(r, n)

    def _admit_waiting(self) -> None:
        """Queued requests (FIFO) take free slots before this frame's new ones; their prefix is prefilled again."""
        while self.waiting and self.pool.can_allocate():
            with self._manager():
                r, prefix_inputs = self.waiting.popleft()
                self.table.persist(r)
            n = self._prefill(prefix_inputs, r.slot)
            self._start(r, n)

    def _manager(self):
        return self.timer.stage("manager")

    def _check_fits(self, r: Request, prefix: PrefixInputs, horizon: int) -> None:
        """`horizon`: the action tokens this frame denoises (the policy's chunk, not the config's maximum)."""
        if not r.prompt_ids:
            raise ValueError(f"request {r.request_id} ({r.task}): empty prompt")
        cameras = sum(bool(m.any()) for m in prefix.image_masks)  # masked cameras are compacted out of the cache
        n = cameras * self.model.config.vision.num_patches + int(prefix.token_masks[0].sum())
        need = max(n + horizon, n + len(r.prompt_ids) - 1 + r.max_new_tokens)
        if need > self.pool.capacity:
            raise CapacityError(
                f"request {r.request_id} ({r.task!r}): prefix {n} + prompt {len(r.prompt_ids)} + max_new_tokens "
                f"{r.max_new_tokens} needs {need} cache positions; slot capacity is {self.pool.capacity}"
            )
