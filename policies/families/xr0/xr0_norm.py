"""XR0's action unnormalisation on the policy side: the statistics of one `robot_type` (model/xr0/xr0_stats.py), its
formula `a * (std + 1e-6) + mean` (physical-ai-studio `policies/xr0/preprocessor.py` `denormalize_action`, the
inverse of its `normalize_action`), per action dim `[A]` or per step and dim `[H, A]`.

The policy hands `unnormalize` one head's model-space actions cut to `(horizon, robot action_dim)`: the chunk's first
`horizon` steps and the robot's leading dims, so per-step statistics are cut the same way."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oxygen_gym.model.xr0.xr0_stats import ACTIVE_STD, EPS, XR0Stats


@dataclass(frozen=True)
class XR0ActionNormalizer:
    """`normalize` robot units -> model space, `unnormalize` back, for `(horizon, dims)` or `(dims,)` arrays."""

    mean: np.ndarray  # [A] or [H, A]
    std: np.ndarray
    robot_type: str
    eps: float = EPS
    feature: str = "actions"
    mode: str = "MEAN_STD"

    @staticmethod
    def from_stats(stats: XR0Stats) -> "XR0ActionNormalizer":
        return XR0ActionNormalizer(stats.action_mean.double().numpy(), stats.action_std.double().numpy(),
                                   stats.robot_type)

    @property
    def dims(self) -> int:
        """Action dims the statistics cover (the model's padded width, e.g. 32)."""
        return int(self.mean.shape[-1])

    @property
    def steps(self) -> int | None:
        """Steps of per-step statistics (None: one row for every step)."""
        return int(self.mean.shape[0]) if self.mean.ndim == 2 else None

    @property
    def active(self) -> np.ndarray:
        """bool `[A]`: dims any step's std marks as real (xr0_stats `ACTIVE_STD`)."""
        return (self.std.reshape(-1, self.dims) > ACTIVE_STD).any(0)

    def _cut(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[-1]
        if n > self.dims:
            raise ValueError(f"actions: value has {n} dims but the {self.robot_type!r} statistics have {self.dims}")
        mean, std = self.mean[..., :n], self.std[..., :n]
        if self.mean.ndim == 2:
            if x.ndim < 2:
                raise ValueError(f"actions: per-step statistics need (steps, dims) values, got shape {x.shape}")
            h = x.shape[-2]
            if h > self.mean.shape[0]:
                raise ValueError(f"actions: {h} steps but the {self.robot_type!r} statistics have {self.mean.shape[0]}")
            mean, std = mean[:h], std[:h]
        return mean, std

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        mean, std = self._cut(x)
        return ((x - mean) / (std + self.eps)).astype(np.float32)

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        mean, std = self._cut(x)
        return (x * (std + self.eps) + mean).astype(np.float32)

    def describe(self) -> str:
        shape = f"per step ({self.steps} x {self.dims})" if self.steps else f"per dim ({self.dims})"
        return (f"MEAN_STD of robot_type {self.robot_type!r}, {shape}, a * (std + {self.eps:g}) + mean (XR0); "
                f"{int(self.active.sum())} active dims (std > {ACTIVE_STD:g})")
