"""Per-stage timing of a frame: CUDA events on GPU (one synchronisation per frame), perf_counter on CPU."""
from __future__ import annotations

import resource
import time
from contextlib import contextmanager

import torch

STAGES = ("prefill", "denoise", "decode", "manager")


class StageTimer:
    """Accumulates time per stage within one frame. `read()` synchronises once and returns ms per stage."""

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self._spans: list[tuple[str, object, object]] = []

    def start_frame(self) -> None:
        self._spans.clear()
        self._frame_start = self._mark()

    @contextmanager
    def stage(self, name: str):
        start = self._mark()
        try:
            yield
        finally:
            self._spans.append((name, start, self._mark()))

    def _mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _ms(self, a, b) -> float:
        if self.cuda:
            return a.elapsed_time(b)
        return (b - a) * 1e3

    def read(self) -> tuple[float, dict[str, float]]:
        """(frame ms, {stage: ms}) since start_frame."""
        end = self._mark()
        if self.cuda:
            end.synchronize()
        out = dict.fromkeys(STAGES, 0.0)
        for name, a, b in self._spans:
            out[name] = out.get(name, 0.0) + self._ms(a, b)
        return self._ms(self._frame_start, end), out


def peak_memory_bytes(device: torch.device | str) -> int:
    """Measured peak memory: CUDA, the caching allocator's high-water mark; CPU, the process's peak resident set
    (getrusage), which counts everything the process ever held, not only the engine's tensors."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
