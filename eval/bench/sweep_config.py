"""What one `oxygen-gym bench` run measures, checked up front, and the named presets."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from oxygen_gym.policies.model_io import builtin_names
from oxygen_gym.policies.robots import ROBOTS

from .records import ALL_MODES

KERNELS = ("auto", "eager", "onednn")


class BenchConfigError(ValueError):
    """A benchmark option out of range; the message names the option."""


@dataclass
class BenchConfig:
    out: Path
    model: str = "small"
    robot: str = "libero"
    device: str = "cpu"
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on CUDA
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    modes: tuple[str, ...] = ALL_MODES
    N: tuple[int, ...] = (1, 5, 10, 20, 30)
    k: tuple[int, ...] = (1, 5, 10)
    S: tuple[int, ...] = (10,)  # the first is the main sweep's; the rest add isolated + oxygen at the largest N
    heads: tuple[int, ...] = (1,)  # action experts per prefill (the model's first E heads): a sweep over E
    workloads: tuple[str, ...] = ("fixed",)
    frames: int = 20
    warmup: int | None = None  # None: ceil(N/k) + 2 for oxygen (a full batch), 2 for the others
    chunk: int = 4
    seed: int = 0
    kernels: str = "auto"
    cuda_graphs: bool | None = None  # None: on for CUDA
    soak_frames: int = 0
    soak_k: int = 2
    soak_slots: int = 40
    calibrate: bool = True
    observations: int = 8
    task_prompt: str | None = None
    plots: bool = True
    preset: str | None = None
    command: str = ""

    def check(self) -> "BenchConfig":
        if self.model not in builtin_names():
            raise BenchConfigError(f"--model must be one of {builtin_names()}, got {self.model!r}")
        if self.robot not in ROBOTS:
            raise BenchConfigError(f"--robot must be one of {sorted(ROBOTS)}, got {self.robot!r}")
        if not self.device.startswith(("cpu", "cuda")):
            raise BenchConfigError(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise BenchConfigError(f"--dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        bad = [m for m in self.modes if m not in ALL_MODES]
        if bad or not self.modes:
            raise BenchConfigError(f"--modes must be a non-empty subset of {ALL_MODES}, got {list(self.modes)}")
        for name in ("N", "k", "S", "heads"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise BenchConfigError(f"--{name} must be a list of integers >= 1, got {list(values)}")
        for name in ("threads", "frames", "chunk", "observations", "soak_k", "soak_slots"):
            if getattr(self, name) < 1:
                raise BenchConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.warmup is not None and self.warmup < 0:
            raise BenchConfigError(f"--warmup must be >= 0, got {self.warmup}")
        if self.soak_frames < 0:
            raise BenchConfigError(f"--soak-frames must be >= 0, got {self.soak_frames}")
        if self.kernels not in KERNELS:
            raise BenchConfigError(f"--kernels must be one of {KERNELS}, got {self.kernels!r}")
        if self.cuda_graphs and not self.device.startswith("cuda"):
            raise BenchConfigError("--cuda-graphs on needs --device cuda")
        from .workloads import Arrivals, WorkloadError  # torch: here, so `oxygen-gym bench --help` stays fast

        for w in self.workloads:
            try:
                kind = Arrivals.parse(w).kind
            except WorkloadError as e:
                raise BenchConfigError(f"--workloads: {e}") from None
            if kind == "soak":
                raise BenchConfigError("--workloads: the soak runs on its own; use --soak-frames")
        return self

    def to_json(self) -> dict:
        d = asdict(self)
        d["out"] = str(self.out)
        for key in ("modes", "N", "k", "S", "workloads", "heads"):
            d[key] = list(d[key])
        return d


# Named runs. `gpu`: the pi0.5-dims LIBERO sweep the issue asks to fit in 8 minutes on one H200 (N=30, k in {1, 5},
# plus isolated and shared; N=5 for the sharing ratio; S=5 for the heatmap's second column; a 3,000-frame soak).
# `cpu`: the `small` LIBERO sweep in docs/benchmarks.md. `smoke`: every output from a `tiny` run in seconds.
# `xr0-cpu`, `heads-cpu`, `starvla-cpu`: paper Tables 1 (XR0 row) and 4 on a CPU (docs/benchmarks.md).
PRESETS: dict[str, dict] = {
    "gpu": dict(
        model="pi05", robot="libero", device="cuda", modes=("isolated", "shared", "oxygen"), N=(5, 30), k=(1, 5),
        S=(10, 5), frames=30, soak_frames=3000, soak_k=2,
    ),
    "cpu": dict(
        model="small", robot="libero", device="cpu", modes=ALL_MODES, N=(1, 5, 10, 20, 30), k=(1, 5, 10), S=(10, 5),
        frames=20, workloads=("fixed", "poisson:1", "mixed:5/30"),
    ),
    # Paper Table 1's Xiaomi-Robotics-0 row on a CPU: xr0-small (Qwen3-VL backbone + DiT), 5 Euler steps.
    "xr0-cpu": dict(
        model="xr0-small", robot="libero", device="cpu", modes=("isolated", "shared", "oxygen"), N=(10, 30), k=(1, 5),
        S=(5,), frames=20,
    ),
    # Paper Table 4's trend: 1-3 action experts on one prefill (multi-small: pi0.5 small + two experts).
    "heads-cpu": dict(
        model="multi-small", robot="libero", device="cpu", modes=("isolated", "shared", "oxygen"), N=(5, 30), k=(5,),
        S=(10,), heads=(1, 2, 3), frames=16,
    ),
    # The same on StarVLA (starvla-small: pi, groot, oft on one Qwen3-VL prefill); E = 1, 2, 3 action heads is the
    # paper's E = 2, 3, 4 (it counts language). S = 4: both flow heads' own Euler steps (OFT regresses in one pass).
    "starvla-cpu": dict(
        model="starvla-small", robot="libero", device="cpu", modes=("isolated", "shared", "oxygen"), N=(5, 10, 30),
        k=(5,), S=(4,), heads=(1, 2, 3), frames=48,
    ),
    "smoke": dict(
        model="tiny", robot="libero", device="cpu", modes=ALL_MODES, N=(2, 6), k=(1, 3), S=(10, 5), frames=6,
        soak_frames=30, soak_slots=8, workloads=("fixed", "poisson:1", "mixed:2/6"),
    ),
}


def with_preset(cfg: BenchConfig, name: str | None, explicit: set[str]) -> BenchConfig:
    """Apply preset `name` under the options the user set explicitly."""
    if name is None:
        return cfg
    if name not in PRESETS:
        raise BenchConfigError(f"--preset must be one of {sorted(PRESETS)}, got {name!r}")
    values = {k: v for k, v in PRESETS[name].items() if k not in explicit}
    return replace(cfg, preset=name, **values)
