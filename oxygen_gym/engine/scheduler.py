"""One frame, per execution mode (modes.py). Read `_oxygen` top to bottom: prefill into a slot, fan the slot out to
every action head, admit language requests, decode k steps for every in-flight request, evict the finished.

The scheduler decides what runs; the runner (runner.py) decides how (eager or CUDA graph); the model is reached only
through its engine interface (core/model_contract.py). Per-frame state lives in a `FrameProgress` made for that frame.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from ..core.guidance import Guidance, check_guidance
from ..core.model_contract import EngineModel, PrefixState
from .cpu_allocator import tune_allocator
from .frame import FrameInput, FrameProgress, FrameResult, FrameStats
from .modes import SCHEDULER_MODES, check_mode
from .request import Request, RequestTable
from .runner import ModelRunner
from .sampling import choose_tokens
from .slots import SlotPool
from .timing import StageTimer


class CapacityError(ValueError):
    """A request that can never fit a slot."""


class FrameScheduler:
    def __init__(
        self,
        model: EngineModel,
        pool: SlotPool,
        mode: str,
        *,
        num_steps: int | None = None,
        cuda_graphs: bool | None = None,
    ) -> None:
        """`num_steps`: denoise steps of every head (None: each head's own). `cuda_graphs`: replay decode steps and
        the denoise loops as CUDA graphs (None = on for CUDA; False = eager fallback)."""
        check_mode(mode, SCHEDULER_MODES)
        self.model = model
        self.pool = pool
        self.mode = mode
        self.num_steps = num_steps
        self.head_specs = model.action_heads  # read once: a family may build this table on every access
        self.heads = list(self.head_specs)
        self.runner = ModelRunner(model, pool, cuda_graphs=cuda_graphs)
        self.table = RequestTable(pool)
        self.waiting: deque[tuple[Request, Any]] = deque()
        self.timer = StageTimer(model.device)
        self.total_queued = 0  # requests that ever had to wait for a slot
        if model.device.type == "cpu":
            tune_allocator()  # every frame frees and re-allocates its activations: keep them in the heap
        self._bodies = {  # the mode table: what one frame does in each mode
            "isolated": self._isolated,
            "shared": self._shared,
            "oxygen": self._oxygen,
            "upper_bound": self._upper_bound,
        }

    # ------------------------------------------------------------------ public
    def run(self, frame: FrameInput, k: int, on_actions: Callable[[dict[str, torch.Tensor]], None] | None = None) -> FrameResult:
        """One frame. `on_actions(head_actions)` is called as soon as the action heads finish, before the frame's
        language work (the actions can be dispatched while decoding runs: the OxyGen paper's Sec. 4.7)."""
        return self._run(frame, k, self._bodies[self.mode], on_actions)

    def run_language_only(self, frame: FrameInput) -> FrameResult:
        """Isolated language path alone (the `parallel` baseline's language worker); no action head runs."""
        return self._run(frame, 0, self._language_only)

    def in_flight(self) -> list[Request]:
        return list(self.table.by_slot) + [r for r, _ in self.waiting]

    def reset(self) -> None:
        self.table.clear()
        self.waiting.clear()

    def steps_of(self, head: str) -> int:
        return self.num_steps or self.head_specs[head].num_steps

    def _run(self, frame: FrameInput, k: int, body, on_actions=None) -> FrameResult:
        noise = frame.head_noise(self.heads)  # the heads this frame denoises, resolved once
        check_guidance(frame.guidance, noise)
        for r in frame.new_requests:
            self._check_fits(r, frame.prefix, noise)
        self.timer.start_frame()
        progress = FrameProgress(on_actions=on_actions)
        actions = body(frame, noise, k, progress)
        return FrameResult(actions, list(progress.advanced.values()), self._stats(frame.frame, progress))

    def _stats(self, frame: int, progress: FrameProgress) -> FrameStats:
        frame_ms, stage_ms = self.timer.read()
        sizes = progress.batch_sizes
        return FrameStats(frame, frame_ms, stage_ms, sizes, sum(sizes), len(self.table), len(self.waiting), self.pool.active)

    # ------------------------------------------------------------------ modes
    def _oxygen(self, frame: FrameInput, noise: dict[str, torch.Tensor], k: int, progress: FrameProgress) -> dict[str, torch.Tensor]:
        self._admit_waiting()
        slot, owner = self._frame_slot(frame.new_requests)
        state = self._prefill(frame.prefix, slot)
        actions = progress.actions_ready(self._fan_out(noise, slot, state, frame.guidance))
        self._admit_new(frame, owner, slot, state)
        self._decode(progress, steps=k)
        return actions

    def _upper_bound(self, frame: FrameInput, noise: dict[str, torch.Tensor], k: int, progress: FrameProgress) -> dict[str, torch.Tensor]:
        for r in frame.new_requests:
            r.max_new_tokens = min(r.max_new_tokens, k)
        return self._oxygen(frame, noise, k, progress)

    def _shared(self, frame: FrameInput, noise: dict[str, torch.Tensor], k: int, progress: FrameProgress) -> dict[str, torch.Tensor]:
        slot, owner = self._frame_slot(frame.new_requests)
        state = self._prefill(frame.prefix, slot)
        actions = progress.actions_ready(self._fan_out(noise, slot, state, frame.guidance))
        self._admit_new(frame, owner, slot, state)
        self._decode(progress, steps=None)
        while self.waiting:  # a pool smaller than the frame's task count: the rest run after, still this frame
            self._admit_waiting()
            self._decode(progress, steps=None)
        return actions

    def _isolated(self, frame: FrameInput, noise: dict[str, torch.Tensor], k: int, progress: FrameProgress) -> dict[str, torch.Tensor]:
        """The baseline: every head gets its own prefill, then every request its own prefill and full decode."""
        actions = {}
        for head, head_noise in noise.items():
            state = self._prefill(frame.prefix, self.pool.scratch)
            actions[head] = self._denoise(head, self.pool.scratch, state, head_noise, frame.guidance.get(head))
        progress.actions_ready(actions)
        self._isolated_language(frame, progress)
        return actions

    def _language_only(self, frame: FrameInput, noise: dict[str, torch.Tensor], k: int, progress: FrameProgress) -> dict[str, torch.Tensor]:
        self._isolated_language(frame, progress)
        return {}

    def _isolated_language(self, frame: FrameInput, progress: FrameProgress) -> None:
        for r in frame.new_requests:
            with self._manager():
                slot = self.table.persist(r)
            self._start(r, self._prefill(frame.prefix, slot), 0)
            self._decode(progress, steps=None)

    # ------------------------------------------------------------------ stages
    def _prefill(self, inputs: Any, slot: int) -> PrefixState:
        with self.timer.stage("prefill"):
            state = self.runner.prefill(slot, 1, inputs)
        self.pool.lengths[slot] = state.host_lengths[0]
        return state

    def _fan_out(
        self, noise: dict[str, torch.Tensor], row: int, state: PrefixState, guidance: dict[str, Guidance]
    ) -> dict[str, torch.Tensor]:
        """Every action head named by the frame's noise reads the one prefix in `row`."""
        return {head: self._denoise(head, row, state, x, guidance.get(head)) for head, x in noise.items()}

    def _denoise(
        self, head: str, row: int, state: PrefixState, noise: torch.Tensor, guidance: Guidance | None = None
    ) -> torch.Tensor:
        with self.timer.stage("denoise"):
            return self.runner.denoise(head, row, state, noise, self.steps_of(head), guidance)

    def _start(self, r: Request, state: PrefixState, row: int) -> None:
        """Write the task prompt after the prefix (all but its last token, which the first decode step feeds).
        `row`: the request's row within `state`."""
        r.prefix_len = r.length = state.host_lengths[row]
        r.position = state.host_positions[row]
        head = r.prompt_ids[:-1]
        if head:
            with self.timer.stage("prefill"):
                self.runner.extend(r.slot, head, r.length, r.position, adapter=r.adapter)
        r.length += len(head)
        r.position += len(head)
        r.pending = r.prompt_ids[-1]
        self.pool.lengths[r.slot] = r.length

    def _decode(self, progress: FrameProgress, steps: int | None) -> None:
        """Decode `steps` tokens for every active request (None: until all are done). Finished requests leave
        the batch right away, so the next step's batch is again the contiguous view [0, active)."""
        step = 0
        while len(self.table) and (steps is None or step < steps):
            with self._manager():
                batch = self.table.fetch(self.model.device)
            self._decode_step(batch, progress, lambda r: r.request_id)
            step += 1

    def _decode_step(self, batch, progress: FrameProgress, key) -> None:
        """One decode step over `batch` (pool rows 0..size): token choice, bookkeeping under `key(request)`, evictions."""
        with self.timer.stage("decode"):
            logits = self.runner.decode_step(
                batch.size, batch.last_tokens, batch.cache_index, batch.positions, adapters=batch.adapters
            )
            tokens = choose_tokens(logits, batch.requests)
        with self._manager():
            self.table.update(batch, tokens)
            for r, t in zip(batch.requests, tokens):
                progress.record(key(r), r, t)
            self.table.evict_finished()
        progress.batch_sizes.append(batch.size)

    # ------------------------------------------------------------------ admission
    def _frame_slot(self, new: list[Request]) -> tuple[int, Request | None]:
        """The slot this frame's prefill writes: the first new request's own slot if one is free, else scratch."""
        with self._manager():
            if new and not self.waiting and self.pool.can_allocate():
                return self.table.persist(new[0]), new[0]
        return self.pool.scratch, None

    def _admit_new(self, frame: FrameInput, owner: Request | None, slot: int, state: PrefixState) -> None:
        for r in frame.new_requests:
            if r is owner:
                self._start(r, state, 0)
                continue
            self._admit_copy(r, frame.prefix, slot, state, 0, blocked=bool(self.waiting))

    def _admit_copy(self, r: Request, prefix: Any, src_row: int, state: PrefixState, i: int, blocked: bool) -> None:
        """Give `r` a slot holding a copy of pool row `src_row`'s prefix (row `i` of `state`), or queue it (FIFO, with
        its frame's inputs) when `blocked` (earlier requests wait) or the pool is full."""
        with self._manager():
            admitted = not blocked and self.pool.can_allocate()
            if admitted:
                self.table.persist(r)
                self.pool.copy(src_row, r.slot, state.host_lengths[i])
            else:
                self.waiting.append((r, prefix))
                self.total_queued += 1
        if admitted:
            self._start(r, state, i)

    def _admit_waiting(self) -> None:
        """Queued requests (FIFO) take free slots before this frame's new ones; their prefix is prefilled again."""
        while self.waiting and self.pool.can_allocate():
            with self._manager():
                r, prefix_inputs = self.waiting.popleft()
                self.table.persist(r)
            self._start(r, self._prefill(prefix_inputs, r.slot), 0)

    def _manager(self):
        return self.timer.stage("manager")

    def _check_fits(self, r: Request, prefix: Any, noise: dict[str, torch.Tensor]) -> None:
        """`noise`: the heads this frame denoises, at the horizons it denoises (not the config's maximum)."""
        if not r.prompt_ids:
            raise ValueError(f"request {r.request_id} ({r.task}): empty prompt")
        n = self.model.prefix_length(prefix)
        heads = self.head_specs
        action_need = max((heads[h].cache_positions(x.shape[1]) for h, x in noise.items()), default=0)
        need = max(n + action_need, n + len(r.prompt_ids) - 1 + r.max_new_tokens)
        if need > self.pool.capacity:
            raise CapacityError(
                f"request {r.request_id} ({r.task!r}): prefix {n} + prompt {len(r.prompt_ids)} + max_new_tokens "
                f"{r.max_new_tokens} needs {need} cache positions; slot capacity is {self.pool.capacity}"
            )
