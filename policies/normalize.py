"""State/action normalisation with a checkpoint's statistics (pi0.5: quantiles q01/q99 to [-1, 1])."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-6


@dataclass(frozen=True)
class QuantileNormalizer:
    """Maps [q01, q99] to [-1, 1] per dimension; dimensions beyond the stats pass through unchanged."""

    q01: np.ndarray
    q99: np.ndarray

    def normalize(self, x: np.ndarray) -> np.ndarray:
        n = min(len(self.q01), x.shape[-1])
        out = x.astype(np.float32).copy()
        out[..., :n] = (x[..., :n] - self.q01[:n]) / (self.q99[:n] - self.q01[:n] + EPS) * 2.0 - 1.0
        return out

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        n = min(len(self.q01), x.shape[-1])
        out = x.astype(np.float32).copy()
        out[..., :n] = (x[..., :n] + 1.0) / 2.0 * (self.q99[:n] - self.q01[:n] + EPS) + self.q01[:n]
        return out


class Identity:
    """Built-in models have no dataset statistics: values pass through."""

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32)

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float32)


def from_stats(stats: dict | None, *keys: str):
    """The normaliser for the first of `keys` present in `stats` (openpi: state/actions; lerobot:
    observation.state/action), or Identity when there are no stats."""
    if not stats:
        return Identity()
    for key in keys:
        if key in stats:
            s = stats[key]
            return QuantileNormalizer(np.asarray(s["q01"], np.float32), np.asarray(s["q99"], np.float32))
    raise ValueError(f"normalisation stats have none of {keys}; found {sorted(stats)}")
