"""What a benchmark point is, and what one measured frame of it recorded."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from oxygen_gym.engine.modes import ALL_MODES, K_MODES  # noqa: F401 - the one definition, re-exported for bench


@dataclass(frozen=True)
class Point:
    mode: str
    N: int  # tokens per request (the longest, for mixed workloads)
    k: int | None  # decode steps per frame (None: the mode decodes each request to completion)
    S: int  # denoise steps
    workload: str = "fixed"
    E: int = 1  # action experts fanned out from each prefill (the model's first E heads)

    @property
    def key(self) -> str:
        k = "-" if self.k is None else self.k
        experts = f"|E={self.E}" if self.E != 1 else ""
        return f"{self.workload}|{self.mode}|N={self.N}|k={k}|S={self.S}{experts}"

    @property
    def budget(self) -> int:
        """The k passed to the engine (modes without a budget ignore it)."""
        return self.k if self.k is not None else self.N


@dataclass
class FrameRecord:
    frame: int
    warmup: bool
    frame_ms: float
    stage_ms: dict[str, float]
    batch_sizes: list[int]
    tokens: int
    new_requests: int
    prefills: int  # prefills this frame ran (action path + per-request in isolated + readmitted queued requests)
    queue_involved: bool  # a request waited for a slot around this frame (its prefill count is then approximate)
    active: int
    queued: int
    completed: int = 0
    transient_bytes: int | None = None  # CUDA: peak allocation above the frame's start
    energy_j: float | None = None  # CUDA: NVML energy during the frame
    memory_bytes: int | None = None  # soak: tensor bytes held after the frame
    rss_bytes: int | None = None  # soak: resident set size after the frame
    request_latency_ms: list[float] = field(default_factory=list)  # requests finished this frame: start to finish

    def to_json(self) -> dict:
        return asdict(self)
