"""State/action normalisation in a checkpoint's declared mode, with its family's formula.

Modes are lerobot's `NormalizationMode` names. The two families write the formulas differently:
- openpi (`transforms.Normalize` / `Unnormalize`): MEAN_STD `(x - mean) / (std + 1e-6)`, inverse `x * (std + 1e-6) + mean`;
  QUANTILES `(x - q01) / (q99 - q01 + 1e-6) * 2 - 1` and its exact inverse. openpi has no other mode.
- lerobot (`processor/normalize_processor.py`, `eps` from the processor JSON, 1e-8 by default): MEAN_STD
  `(x - mean) / (std + eps)` but inverse `x * std + mean` (no eps); MIN_MAX, QUANTILES, QUANTILE10
  `2 (x - lo) / (hi - lo) - 1` with `eps` only where `hi == lo`.
Our own checkpoints use openpi's formulas (what the policy always applied). Statistics longer than the value are cut
to its dims (openpi does the same); shorter ones are an error when the policy is built, not here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("IDENTITY", "MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10")
FORMULAS = ("openpi", "lerobot")
OPENPI_EPS = 1e-6
LEROBOT_EPS = 1e-8
# mode -> (low stat, high stat) of the range modes
_RANGE = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}
_NEEDS = {"MEAN_STD": ("mean", "std"), **_RANGE}


def needed_stats(mode: str) -> tuple[str, ...]:
    """The statistics a mode reads (empty for IDENTITY)."""
    return _NEEDS.get(mode, ())


@dataclass(frozen=True)
class Normalizer:
    """One feature's normaliser: `normalize` robot units -> model space, `unnormalize` back, over the last axis."""

    mode: str = "IDENTITY"
    stats: dict | None = None  # stat name -> 1-D float array
    formula: str = "openpi"
    eps: float = LEROBOT_EPS  # lerobot's eps (the openpi formula has its fixed 1e-6)
    feature: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"{self.feature or 'normalisation'}: unknown mode {self.mode!r}; expected one of {MODES}")
        if self.formula not in FORMULAS:
            raise ValueError(f"normalisation formula must be one of {FORMULAS}, got {self.formula!r}")
        if self.formula == "openpi" and self.mode not in ("IDENTITY", "MEAN_STD", "QUANTILES"):
            raise ValueError(f"{self.feature}: openpi checkpoints normalise with MEAN_STD or QUANTILES, not {self.mode}")
        missing = [s for s in needed_stats(self.mode) if (self.stats or {}).get(s) is None]
        if missing:
            raise ValueError(f"{self.feature}: {self.mode} normalisation needs the statistics {missing}; "
                             f"found {sorted(k for k, v in (self.stats or {}).items() if v is not None)}")

    @property
    def dims(self) -> int | None:
        """How many dims the statistics cover (None for IDENTITY)."""
        names = needed_stats(self.mode)
        return int(np.asarray(self.stats[names[0]]).size) if names else None

    def _stat(self, name: str, n: int) -> np.ndarray:
        value = np.asarray(self.stats[name], dtype=np.float64).reshape(-1)
        if value.size < n:
            raise ValueError(f"{self.feature}: value has {n} dims but the '{name}' statistics have {value.size}")
        return value[:n]

    def _range(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        lo_name, hi_name = _RANGE[self.mode]
        lo, hi = self._stat(lo_name, n), self._stat(hi_name, n)
        if self.formula == "openpi":
            return lo, hi - lo + OPENPI_EPS
        span = hi - lo
        return lo, np.where(span == 0, self.eps, span)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[-1]
        if self.mode == "IDENTITY":
            out = x
        elif self.mode == "MEAN_STD":
            eps = OPENPI_EPS if self.formula == "openpi" else self.eps
            out = (x - self._stat("mean", n)) / (self._stat("std", n) + eps)
        else:
            lo, span = self._range(n)
            out = (x - lo) / span * 2.0 - 1.0
        return out.astype(np.float32)

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[-1]
        if self.mode == "IDENTITY":
            out = x
        elif self.mode == "MEAN_STD":
            std = self._stat("std", n) + (OPENPI_EPS if self.formula == "openpi" else 0.0)
            out = x * std + self._stat("mean", n)
        else:
            lo, span = self._range(n)
            out = (x + 1.0) / 2.0 * span + lo
        return out.astype(np.float32)

    def describe(self) -> str:
        if self.mode == "IDENTITY":
            return "IDENTITY (no statistics)"
        names = needed_stats(self.mode)
        eps = f"+{OPENPI_EPS:g} (openpi)" if self.formula == "openpi" else f"eps {self.eps:g} (lerobot)"
        return f"{self.mode} from {'/'.join(names)} over {self.dims} dims, {eps}"


def from_stats(stats: dict | None, *keys: str, mode: str = "QUANTILES", formula: str = "openpi",
               eps: float = LEROBOT_EPS) -> Normalizer:
    """The normaliser for the first of `keys` present in `stats` (openpi: state/actions; lerobot:
    observation.state/action), or IDENTITY when there are no stats."""
    if not stats or mode == "IDENTITY":
        return Normalizer("IDENTITY", feature=keys[0] if keys else "")
    for key in keys:
        if key in stats:
            s = stats[key]
            values = {name: s[name] for name in needed_stats(mode) if name in s}
            return Normalizer(mode, values, formula=formula, eps=eps, feature=key)
    raise ValueError(f"normalisation stats have none of {keys}; found {sorted(stats)}")
