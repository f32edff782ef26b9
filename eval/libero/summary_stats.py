"""Confidence intervals and percentiles for evaluation summaries.

The pi0.5/OxyGen papers report LIBERO success as the mean over seeds with a 95% Student-t interval over the
seed-level success rates (each seed is one full pass over the episode set): mean +- t_{(1+c)/2, n-1} * s / sqrt(n).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as _sp


@dataclass(frozen=True)
class TInterval:
    mean: float
    low: float | None        # None when fewer than two values: no spread to estimate
    high: float | None
    half_width: float | None
    sd: float | None         # sample standard deviation (ddof=1)
    n: int
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> TInterval:
    """Mean and two-sided Student-t confidence interval of `values` (e.g. one success rate per seed)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        raise ValueError("t_interval: no values")
    mean = float(x.mean())
    if x.size < 2:
        return TInterval(mean, None, None, None, None, int(x.size), confidence)
    sd = float(x.std(ddof=1))
    half = float(_sp.t.ppf(0.5 + confidence / 2.0, df=x.size - 1)) * sd / math.sqrt(x.size)
    return TInterval(mean, mean - half, mean + half, half, sd, int(x.size), confidence)


def percentiles(values: Sequence[float], qs: Sequence[float] = (5, 50, 95)) -> dict[str, float] | None:
    """{'p5': .., 'p50': .., 'p95': .., 'mean': .., 'n': ..} over finite values; None when there are none."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return None
    out = {f"p{q:g}": float(np.percentile(x, q)) for q in qs}
    out["mean"] = float(x.mean())
    out["n"] = int(x.size)
    return out
