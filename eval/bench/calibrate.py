"""How one decode step's cost grows with batch size, per kernel path: the number that decides how much batching can
save. Measured on the model's own `decode_step` over a pool whose rows hold a real prefix, outside the scheduler.

CPU paths: `eager` (F.linear, MKL) and `onednn` (prepacked weights, cpu_kernels). CUDA paths: `eager` and
`cuda_graphs` (the model runner's bucketed capture of the same call).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from oxygen_gym.engine.runner import ModelRunner
from oxygen_gym.engine.slots import SlotPool
from oxygen_gym.model import cpu_kernels
from oxygen_gym.model.pi05.modeling import PI05Model

from .point_runner import pool_args
from .workloads import ObservationSet

DEFAULT_BATCHES = (1, 2, 4, 6, 8, 16, 30)


def kernel_paths(model: PI05Model) -> list[str]:
    if model.device.type == "cuda":
        return ["eager", "cuda_graphs"]
    paths = ["eager"]
    if cpu_kernels.available() and model.dtype == torch.float32:
        paths.append("onednn")
    return paths


@torch.inference_mode()
def decode_scaling(
    model: PI05Model, obs: ObservationSet, batches=DEFAULT_BATCHES, *, reps: int = 7, restore: str = "eager"
) -> dict:
    """{path: {batch: median ms of one decode step}} plus each path's d(B)/d(1). Leaves the model on `restore`."""
    batches = sorted(set(int(b) for b in batches))
    pool = SlotPool(**pool_args(model, max(batches), obs.capacity(8)))
    p = obs.prefixes[0]
    n = int(model.prefill_frame(pool.view(0, 1), p).lengths[0])
    for row in range(1, max(batches)):
        pool.copy(0, row, n)
    pool.active = max(batches)
    tokens = torch.full((max(batches),), obs.task_prompt_ids[-1], dtype=torch.long, device=model.device)
    positions = torch.full((max(batches),), n, dtype=torch.long, device=model.device)
    out: dict = {"batches": batches, "ms": {}, "ratio_to_d1": {}}
    cuda = model.device.type == "cuda"
    for path in kernel_paths(model):
        if path == "cuda_graphs":
            runner = ModelRunner(model, pool, cuda_graphs=True)

            def step(b: int):
                pool.active = b  # the graph pads with the rows after the batch (their index 0 is overwritten)
                return runner.decode_step(b, tokens[:b], positions[:b], positions[:b])
        else:
            if not cuda:
                cpu_kernels.set_path(model, path)
            step = lambda b: model.decode_step(pool.view(0, b), tokens[:b], positions[:b])  # noqa: E731
        times: dict[int, list[float]] = {b: [] for b in batches}
        for b in batches:
            step(b)  # warm-up (packing, graph capture)
        for _ in range(reps):
            for b in batches:
                if cuda:
                    torch.cuda.synchronize(model.device)
                t = time.perf_counter()
                step(b)
                if cuda:
                    torch.cuda.synchronize(model.device)
                times[b].append((time.perf_counter() - t) * 1e3)
        ms = {b: float(np.median(v)) for b, v in times.items()}
        out["ms"][path] = {str(b): v for b, v in ms.items()}
        out["ratio_to_d1"][path] = {str(b): v / ms[batches[0]] for b, v in ms.items()}
    if not cuda:
        cpu_kernels.set_path(model, restore)
    pool.reset()
    return out
