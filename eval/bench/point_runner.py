"""Runs benchmark points on the engine: one engine per point, frames fed from a shared observation set, the
scheduler's own frame stats recorded per frame. Points of one group run interleaved, a few frames each in turn, so
load from other processes on the machine falls on every mode alike and the ratios stay fair."""
from __future__ import annotations

import time
import traceback

import torch

from oxygen_gym.engine.parallel import ParallelExecutor
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model import cpu_kernels
from oxygen_gym.engine.model_api import EngineModel

from .energy import EnergyMeter
from .records import FrameRecord, Point
from .workloads import Arrivals, ObservationSet


def weight_bytes(model: EngineModel) -> int:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def model_bytes(model: EngineModel) -> int:
    """Weights and buffers, plus this process's prepacked copies (cpu_kernels)."""
    return weight_bytes(model) + cpu_kernels.packed_bytes(model)


def pool_args(model: EngineModel, num_slots: int, capacity: int) -> dict:
    kv = model.kv_layout
    return dict(
        num_slots=num_slots, capacity=capacity, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim,
        device=model.device, dtype=model.dtype,
    )


class Engines:
    """Builds one engine per point; the `parallel` baseline's two worker processes are started once per S and
    reused (they keep no state between frames: each request finishes within its frame)."""

    def __init__(
        self, model: EngineModel, *, threads: int, cuda_graphs: bool | None, parallel_capacity: int, horizon: int
    ) -> None:
        self.model = model
        self.horizon = horizon
        self.threads = threads
        self.cuda_graphs = cuda_graphs
        self.parallel_capacity = parallel_capacity
        self._parallel: dict[int, ParallelExecutor] = {}

    def make(self, point: Point, num_slots: int, capacity: int) -> tuple[object, int]:
        """(engine, bytes it holds: weights, packed weights and KV pools)."""
        if point.mode == "parallel":
            if point.S not in self._parallel:
                args = pool_args(self.model, 1, self.parallel_capacity)
                self._parallel[point.S] = ParallelExecutor(self.model, args, num_steps=point.S, threads=self.threads)
            # Two workers, each with a 1-slot pool; they share the weights (shared memory) but each packs its own
            # copy on the oneDNN path.
            kv = 2 * _pool_nbytes(self.model, 1, self.parallel_capacity)
            return self._parallel[point.S], weight_bytes(self.model) + 2 * cpu_kernels.packed_bytes(self.model) + kv
        pool = SlotPool(**pool_args(self.model, num_slots, capacity))
        engine = FrameScheduler(self.model, pool, point.mode, num_steps=point.S, cuda_graphs=self.cuda_graphs)
        # capture before the first frame, so no measured frame pays for it (a no-op without graphs)
        engine.runner.capture(point.S, dict.fromkeys(self.model.action_heads, self.horizon))
        return engine, model_bytes(self.model) + pool.nbytes()

    def close(self) -> None:
        for ex in self._parallel.values():
            ex.close()
        self._parallel.clear()


def _pool_nbytes(model: EngineModel, num_slots: int, capacity: int) -> int:
    return model.kv_layout.row_bytes(capacity, model.dtype) * (num_slots + 1)


def share_frame_tensors(frame) -> None:
    """Move a frame's tensors to shared memory on this (the main) thread before ParallelExecutor queues them.

    Why: a multiprocessing queue pickles on its feeder thread, and pickling a CPU tensor copies it into shared memory
    with an OpenMP-parallel copy. That gives the process a second OpenMP thread team; with more OpenMP threads than
    cores, libgomp stops spin-waiting, and from then on every parallel region of the main thread pays a futex wake-up.
    Measured on `small` with 2 threads: denoise 150 -> 300 ms and a batch-6 decode step 25 -> 35 ms for every mode
    run after the first `parallel` frame, even after the executor closed. (The fix belongs in ParallelExecutor.run.)"""
    p = frame.prefix
    for t in _tensors([p, frame.noise]):
        t.share_memory_()


def _tensors(x) -> list[torch.Tensor]:
    """Every tensor inside `x` (a prefix bundle of any family: dataclass fields, lists, dicts)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if hasattr(x, "__dict__"):
        return _tensors(list(vars(x).values()))
    return []


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PointRun:
    """One point's engine and frame loop. Frame f feeds observation (f - warmup) mod count with the arrivals of
    measured-frame index f - warmup, so every point's measured frames see the same inputs."""

    def __init__(
        self,
        point: Point,
        engine,
        held_bytes: int,
        obs: ObservationSet,
        arrivals: Arrivals,
        *,
        warmup: int,
        frames: int,
        seed: int,
        meter: EnergyMeter | None = None,
        track_memory: bool = False,
    ) -> None:
        self.point, self.engine, self.held_bytes, self.obs = point, engine, held_bytes, obs
        self.arrivals, self.warmup, self.total, self.seed = arrivals, warmup, warmup + frames, seed
        self.meter = meter
        self.track_memory = track_memory
        self.cuda = obs.device.type == "cuda"
        self.frame = 0
        self.next_id = 0
        self.records: list[FrameRecord] = []
        self.error: str | None = None
        self._frame_ms: list[float] = []

    @property
    def done(self) -> bool:
        return self.error is not None or self.frame >= self.total

    def step(self) -> None:
        try:
            self._step()
        except Exception:  # noqa: BLE001 - one failing point must not lose the rest of the sweep
            self.error = traceback.format_exc()

    def _step(self) -> None:
        f, m = self.frame, self.frame - self.warmup
        lengths = self.arrivals.at(m, self.point.N, self.seed)
        frame = self.obs.frame_input(m, lengths, self.next_id, self.point.E)
        frame.frame = f
        for r in frame.new_requests:
            r.frame = f
        self.next_id += len(frame.new_requests)
        eng = self.engine
        if self.point.mode == "parallel":
            share_frame_tensors(frame)
        waiting0, queued0 = len(getattr(eng, "waiting", ())), getattr(eng, "total_queued", 0)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.obs.device)
            base = torch.cuda.memory_allocated(self.obs.device)
        e0, t0 = (self.meter.mark(), time.perf_counter()) if self.meter else (None, None)
        result = eng.run(frame, self.point.budget)
        energy = None
        if self.meter:
            torch.cuda.synchronize(self.obs.device)
            energy = self.meter.joules(e0, self.meter.mark(), time.perf_counter() - t0)
        waiting1, queued1 = len(getattr(eng, "waiting", ())), getattr(eng, "total_queued", 0)
        readmitted = waiting0 + (queued1 - queued0) - waiting1
        iso = self.point.mode in ("isolated", "parallel")  # a prefill per expert and per request
        prefills = self.point.E + len(lengths) if iso else 1 + readmitted
        s = result.stats
        self._frame_ms.append(s.frame_ms)
        latencies = [sum(self._frame_ms[r.frame : f + 1]) for r, _ in result.advanced if r.done]
        rec = FrameRecord(
            frame=f, warmup=f < self.warmup, frame_ms=s.frame_ms, stage_ms=dict(s.stage_ms), batch_sizes=list(s.batch_sizes),
            tokens=s.tokens, new_requests=len(lengths), prefills=prefills,
            queue_involved=bool(waiting0 or waiting1 or queued1 > queued0), active=s.active, queued=s.queued,
            completed=len(latencies), energy_j=energy, request_latency_ms=latencies,
        )
        if self.cuda:
            rec.transient_bytes = int(torch.cuda.max_memory_allocated(self.obs.device) - base)
        if self.track_memory:
            pool = getattr(eng, "pool", None)
            rec.memory_bytes = int(torch.cuda.memory_allocated(self.obs.device)) if self.cuda else self.held_bytes
            rec.rss_bytes = rss_bytes()
            if pool is not None:
                rec.active = pool.active
        self.records.append(rec)
        self.frame += 1


def run_interleaved(runs: list[PointRun], chunk: int, progress=None) -> None:
    """Round-robin: each unfinished point runs `chunk` frames in turn until all are done."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    while any(not r.done for r in runs):
        for r in runs:
            for _ in range(chunk):
                if r.done:
                    break
                r.step()
                if progress is not None:
                    progress.update(1)
            if r.error and progress is not None:
                progress.update(r.total - r.frame)
                r.frame = r.total
