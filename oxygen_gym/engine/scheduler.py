"""One frame, per execution mode (modes.py), for one robot or several at once (batch.py, the server).

Read `_oxygen` top to bottom: admit queued requests, prefill each robot's observation (a lone frame straight into its
first new request's own slot when one is free, several robots' into contiguous scratch rows), fan the prefixes out to
every action head as one batch, admit the new language requests (each gets a copy of its robot's prefix KV), decode k
steps for the in-flight requests of exactly these robots, evict the finished. A lone policy's frame is a batch of one
through this same path; `upper_bound` is it with each request cut to k tokens. The baselines (`isolated`, `shared`)
have bodies of their own.

What a robot gets does not depend on its companions: its rows never attend to another robot's rows (each prefix is
its own cache row, masks follow each row's length), its requests advance k tokens per frame *of its own* (a robot
absent from a batch is not decoded in it), and queued requests are admitted per robot, first in first out.

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

Actions = dict[str, torch.Tensor]  # per action head, a batch of chunks (row i: frame i)
Noises = list[dict[str, torch.Tensor]]  # per frame, the noise of each head it denoises
Body = Callable[[list[FrameInput], Noises, list[int], FrameProgress], Actions]


class CapacityError(ValueError):
    """A request that can never fit a slot."""


class FrameScheduler:
    prefill_rows = 1  # frames per prefill call (BatchScheduler sets it per device)

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
        self._bodies: dict[str, Body] = {  # the mode table: what one frame does in each mode
            "isolated": self._isolated,
            "shared": self._shared,
            "oxygen": self._oxygen,
            "upper_bound": self._upper_bound,
        }

    # ------------------------------------------------------------------ public
    def run(self, frame: FrameInput, k: int, on_actions: Callable[[Actions], None] | None = None) -> FrameResult:
        """One frame. `on_actions(head_actions)` is called as soon as the action heads finish, before the frame's
        language work (the actions can be dispatched while decoding runs: the OxyGen paper's Sec. 4.7)."""
        return self._run([frame], [k], self._bodies[self.mode], on_actions)[0]

    def run_language_only(self, frame: FrameInput) -> FrameResult:
        """Isolated language path alone (the `parallel` baseline's language worker); no action head runs."""
        return self._run([frame], [0], self._language_only)[0]

    def check_frame(self, frame: FrameInput) -> dict[str, torch.Tensor]:
        """Raise (changing nothing) for a frame that can never run: a request of another session, one too long for a
        slot, guidance that does not match the noise. Returns the noise per head the frame denoises."""
        noise = frame.head_noise(self.heads)
        check_guidance(frame.guidance, noise)
        for r in frame.new_requests:
            if r.session != frame.session:
                raise ValueError(f"request {r.request_id} belongs to session {r.session}, not {frame.session}")
            self._check_fits(r, frame.prefix, noise)
        return noise

    def in_flight(self) -> list[Request]:
        return list(self.table.by_slot) + [r for r, _ in self.waiting]

    def reset(self) -> None:
        self.table.clear()
        self.waiting.clear()

    def steps_of(self, head: str) -> int:
        return self.num_steps or self.head_specs[head].num_steps

    def _run(self, frames: list[FrameInput], ks: list[int], body: Body, on_actions=None) -> list[FrameResult]:
        """Check every frame, run `body` over them as one batch, and split its results per frame (row i = frame i)."""
        noises = [self.check_frame(f) for f in frames]  # the heads each frame denoises, resolved once
        if any(list(n) != list(noises[0]) for n in noises):
            raise ValueError(f"frames of one batch must denoise the same heads, got {[list(n) for n in noises]}")
        self.timer.start_frame()
        progress = FrameProgress(on_actions=on_actions)
        actions = body(frames, noises, ks, progress)
        frame_ms, stage_ms = self.timer.read()
        out = []
        for i, f in enumerate(frames):
            advanced = progress.advanced_of(f.session)
            stats = FrameStats(
                f.frame, frame_ms, dict(stage_ms), list(progress.batch_sizes), sum(len(t) for _, t in advanced),
                len(self.table), len(self.waiting), self.pool.active,
            )
            out.append(FrameResult({h: a[i : i + 1] for h, a in actions.items()}, advanced, stats))
        return out

    # ------------------------------------------------------------------ modes
    def _oxygen(self, frames: list[FrameInput], noises: Noises, ks: list[int], progress: FrameProgress) -> Actions:
        self._admit_waiting({f.session for f in frames})
        actions = self._act_and_admit(frames, noises, progress)
        self._decode(progress, {f.session: k for f, k in zip(frames, ks)})
        return actions

    def _upper_bound(self, frames: list[FrameInput], noises: Noises, ks: list[int], progress: FrameProgress) -> Actions:
        for f, k in zip(frames, ks):
            for r in f.new_requests:
                r.max_new_tokens = min(r.max_new_tokens, k)
        return self._oxygen(frames, noises, ks, progress)

    def _shared(self, frames: list[FrameInput], noises: Noises, ks: list[int], progress: FrameProgress) -> Actions:
        actions = self._act_and_admit(frames, noises, progress)
        self._decode(progress)
        while self.waiting:  # a pool smaller than the frame's task count: the rest run after, still this frame
            self._admit_waiting({r.session for r, _ in self.waiting})
            self._decode(progress)
        return actions

    def _isolated(self, frames: list[FrameInput], noises: Noises, ks: list[int], progress: FrameProgress) -> Actions:
        """The baseline: every head gets its own prefill, then every request its own prefill and full decode."""
        (frame,), (noise,) = frames, noises
        actions = {}
        for head, head_noise in noise.items():
            state = self._prefill(frame.prefix, self.pool.scratch)
            actions[head] = self._denoise(head, self.pool.scratch, state, head_noise, frame.guidance.get(head))
        progress.actions_ready(actions)
        self._isolated_language(frame, progress)
        return actions

    def _language_only(self, frames: list[FrameInput], noises: Noises, ks: list[int], progress: FrameProgress) -> Actions:
        (frame,) = frames
        self._isolated_language(frame, progress)
        return {}

    def _isolated_language(self, frame: FrameInput, progress: FrameProgress) -> None:
        for r in frame.new_requests:
            with self._manager():
                slot = self.table.persist(r)
            self._start(r, self._prefill(frame.prefix, slot), 0)
            self._decode(progress)

    # ------------------------------------------------------------------ stages
    def _act_and_admit(self, frames: list[FrameInput], noises: Noises, progress: FrameProgress) -> Actions:
        """One prefill per frame, every head denoised over all of them (actions handed out at once), then each
        frame's new requests take slots holding its prefix (or queue)."""
        row, owner = self._frame_rows(frames)
        state = self._prefill_rows(frames, row)
        actions = progress.actions_ready(self._fan_out(frames, noises, row, state))
        for i, f in enumerate(frames):
            self._admit_new(f, owner, row + i, state, i)
        return actions

    def _prefill(self, inputs: Any, row: int, rows: int = 1) -> PrefixState:
        with self.timer.stage("prefill"):
            state = self.runner.prefill(row, rows, inputs)
        self.pool.lengths[row : row + rows] = state.host_lengths
        return state

    def _prefill_rows(self, frames: list[FrameInput], first: int) -> PrefixState:
        """Prefill frame i into pool row `first + i`, `prefill_rows` frames per call."""
        n, states = self.prefill_rows, []
        for i in range(0, len(frames), n):
            chunk = [f.prefix for f in frames[i : i + n]]
            states.append(self._prefill(self.model.batch_prefix_inputs(chunk), first + i, len(chunk)))
        return PrefixState.cat(states)

    def _fan_out(self, frames: list[FrameInput], noises: Noises, first: int, state: PrefixState) -> Actions:
        """Every head the frames' noise names denoises rows [first, first + len(frames)) as one batch; each row keeps
        its own RTC guidance (rows without any: plain)."""
        out = {}
        for h in noises[0]:
            x = torch.cat([n[h] for n in noises])
            guidance = Guidance.cat([f.guidance.get(h) for f in frames], x.shape[1], x.shape[2])
            out[h] = self._denoise(h, first, state, x, guidance)
        return out

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

    def _decode(self, progress: FrameProgress, steps: dict[int, int] | None = None) -> None:
        """Decode step j batches the in-flight requests of the sessions with `steps[session] > j` (None: every request,
        until all are done), gathered at the front of the pool so the step reads one contiguous view. Finished requests
        leave the batch right away (the last slot moves into the hole)."""
        j = 0
        while True:
            with self._manager():
                reqs = [r for r in self.table.by_slot if steps is None or steps.get(r.session, 0) > j]
                if not reqs:
                    return
                self.table.move_to_front(reqs)
                batch = self.table.fetch(self.model.device, len(reqs))
            with self.timer.stage("decode"):
                logits = self.runner.decode_step(
                    batch.size, batch.last_tokens, batch.cache_index, batch.positions, adapters=batch.adapters
                )
                tokens = choose_tokens(logits, batch.requests)
            with self._manager():
                self.table.update(batch, tokens)
                for r, t in zip(batch.requests, tokens):
                    progress.record(r, t)
                self.table.evict_finished()
            progress.batch_sizes.append(batch.size)
            j += 1

    # ------------------------------------------------------------------ admission
    def _frame_rows(self, frames: list[FrameInput]) -> tuple[int, Request | None]:
        """The first row the frames' prefills write: a lone frame's first new request's own slot if one is free and
        none of its robot's requests waits (no copy), else the scratch rows (contiguous: one batch to denoise)."""
        new = frames[0].new_requests
        with self._manager():
            if len(frames) == 1 and new and not self._queued(frames[0].session) and self.pool.can_allocate():
                return self.table.persist(new[0]), new[0]
        return self.pool.scratch, None

    def _admit_new(self, frame: FrameInput, owner: Request | None, row: int, state: PrefixState, i: int) -> None:
        """The frame's new requests (prefilled into pool row `row`, row `i` of `state`) take slots, behind their
        robot's queue if it has one; `owner` already holds the prefix in its own slot."""
        for r in frame.new_requests:
            if r is owner:
                self._start(r, state, i)
            else:
                self._admit_copy(r, frame.prefix, row, state, i, blocked=self._queued(frame.session))

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

    def _admit_waiting(self, sessions: set[int]) -> None:
        """Queued requests of these robots take free slots before their frames' new ones (FIFO per robot); their
        prefix is prefilled again, in the slot itself."""
        while self.pool.can_allocate():
            with self._manager():
                nxt = next((i for i, (r, _) in enumerate(self.waiting) if r.session in sessions), None)
                if nxt is None:
                    return
                r, prefix_inputs = self.waiting[nxt]
                del self.waiting[nxt]
                self.table.persist(r)
            self._start(r, self._prefill(prefix_inputs, r.slot), 0)

    def _queued(self, session: int) -> bool:
        return any(r.session == session for r, _ in self.waiting)

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
