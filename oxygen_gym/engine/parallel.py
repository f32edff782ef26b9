"""The `parallel` baseline: isolated execution with the action path and the language path in two worker
processes on the same device (each with its own prefill), as serving stacks that run tasks side by side do."""
from __future__ import annotations

import time
import traceback

import torch
import torch.multiprocessing as mp

from ..core.model_contract import EngineModel
from .frame import FrameInput, FrameResult, FrameStats
from .placement import available_cores, choose, prepare_environment
from .request import Request
from .scheduler import FrameScheduler
from .slots import SlotPool
from .timing import STAGES


def _worker(role: str, model: EngineModel, pool_args: dict, num_steps: int | None, threads: int, inbox, outbox) -> None:
    torch.set_num_threads(threads)
    pool = SlotPool(**pool_args)
    scheduler = FrameScheduler(model, pool, "isolated", num_steps=num_steps)
    while True:
        msg = inbox.get()
        if msg is None:
            return
        try:
            frame, k = msg
            if role == "action":
                frame.new_requests = []
                outbox.put(("ok", scheduler.run(frame, k)))
            else:  # language: each request gets its own prefill and decodes to completion; no denoise
                outbox.put(("ok", scheduler.run_language_only(frame) if frame.new_requests else None))
        except Exception:  # noqa: BLE001 - reported to the caller with its traceback
            outbox.put(("error", traceback.format_exc()))


class ParallelExecutor:
    """Same interface as FrameScheduler (`run`, `reset`, `in_flight`, `close`)."""

    mode = "parallel"

    def __init__(
        self, model: EngineModel, pool_args: dict, *, num_steps: int | None = None, threads: int | None = None
    ) -> None:
        ctx = mp.get_context("spawn")
        model.share_memory()
        # two processes share this one's cores: the placement rule sizes each (engine/placement.py); --threads splits
        self.placement = choose(available_cores(), processes=2, threads=max(1, threads // 2) if threads else None)
        per_worker = self.placement.threads
        prepare_environment(self.placement)  # spawned workers start with it: their OpenMP waits passively
        self.model = model
        self._queues = []
        self._procs = []
        for role in ("action", "language"):
            inbox, outbox = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=_worker, args=(role, model, pool_args, num_steps, per_worker, inbox, outbox), daemon=True)
            p.start()
            self._queues.append((inbox, outbox))
            self._procs.append(p)

    def run(self, frame: FrameInput, k: int, on_actions=None) -> FrameResult:
        """`on_actions(head_actions)`: called when the action worker answers (the language worker may still run)."""
        start = time.perf_counter()
        for inbox, _ in self._queues:
            inbox.put((frame, k))
        results = []
        for _, outbox in self._queues:  # the action worker first
            status, payload = outbox.get()
            if status != "ok":
                raise RuntimeError(f"parallel worker failed:\n{payload}")
            if not results and on_actions is not None:
                on_actions(payload.head_actions)
            results.append(payload)
        frame_ms = (time.perf_counter() - start) * 1e3
        action, language = results
        stage_ms = dict.fromkeys(STAGES, 0.0)
        batch_sizes: list[int] = []
        advanced: list[tuple[Request, list[int]]] = []
        for r in (action, language):
            if r is None:
                continue
            for s in STAGES:
                stage_ms[s] += r.stats.stage_ms.get(s, 0.0)
        if language is not None:
            batch_sizes = language.stats.batch_sizes
            by_id = {r.request_id: r for r in frame.new_requests}
            for worker_req, tokens in language.advanced:  # copy the worker's progress onto our request objects
                mine = by_id[worker_req.request_id]
                mine.generated, mine.done, mine.finish_reason = worker_req.generated, worker_req.done, worker_req.finish_reason
                advanced.append((mine, tokens))
        stats = FrameStats(frame.frame, frame_ms, stage_ms, batch_sizes, sum(batch_sizes), 0, 0, 0)
        return FrameResult(action.head_actions, advanced, stats)

    def in_flight(self) -> list[Request]:
        return []

    def reset(self) -> None:
        pass

    def close(self) -> None:
        for (inbox, _), p in zip(self._queues, self._procs):
            if p.is_alive():
                inbox.put(None)
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        self._procs.clear()
