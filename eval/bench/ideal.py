"""The ideal-time model: what a frame would cost if it were nothing but its stages, at this run's own stage costs.

Stage costs come from the run's measured frames (warm-up excluded; all modes but `parallel`, whose two workers run on
half the threads each; estimated per group of interleaved points, which share the machine's load at the time): P, one prefill (the prefill stage divided by the prefills the frame ran);
D, one denoise at S steps; d(B), one decode step at batch B (from frames whose decode steps all ran at batch B).
A frame's ideal time is then `prefills * P + E D + sum of d(B) over its decode steps` (E: action experts, each a
denoise D; D is measured per expert), which for the default workload (one N-token request per frame, E = 1) is the
paper's closed form:

    isolated     2P + D + N d(1)
    shared        P + D + N d(1)
    oxygen        P + D + k d(N/k)
    upper_bound   P + D + k d(1)        (each request decodes only k tokens)
    parallel     max(P + D, P + N d(1)) (the two workers overlapping perfectly)

With E experts, isolated gives each its own prefill ((E + 1) P + E D + N d(1)); the sharing modes still run one.

Efficiency = ideal / measured: how much of the frame is the model's own work. The ideal assumes the default
one-token continuation prompt; a longer task prompt's extension is timed as prefill and lands in P.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .records import FrameRecord, Point

FORMULAS = {
    "isolated": "2P + D + N d(1)",
    "shared": "P + D + N d(1)",
    "oxygen": "P + D + k d(N/k)",
    "upper_bound": "P + D + k d(1)",
    "parallel": "max(P + D, P + N d(1))",
}


def expert_formula(mode: str, E: int) -> str:
    """The closed form for E experts (the paper's for E = 1)."""
    if E == 1:
        return FORMULAS.get(mode, "")
    return {
        "isolated": f"{E + 1}P + {E}D + N d(1)",
        "shared": f"P + {E}D + N d(1)",
        "oxygen": f"P + {E}D + k d(N/k)",
        "upper_bound": f"P + {E}D + k d(1)",
        "parallel": f"max({E}P + {E}D, P + N d(1))",
    }.get(mode, "")


@dataclass
class StageCosts:
    """Per-stage costs in ms, estimated from one run."""

    prefill: float
    denoise: dict[int, float]  # S -> ms
    decode: dict[int, float]  # batch size -> ms per step
    samples: dict[str, int] = field(default_factory=dict)
    fallback: "StageCosts | None" = None  # the whole run's costs, for batch sizes this group did not measure

    def d(self, batch: int) -> tuple[float, bool]:
        """(ms of one decode step at `batch`, whether it was measured rather than interpolated)."""
        if batch in self.decode:
            return self.decode[batch], True
        if self.fallback is not None and batch in self.fallback.decode:
            return self.fallback.decode[batch], False
        sizes = sorted(self.decode)
        if not sizes:
            return float("nan"), False
        if len(sizes) == 1:
            return self.decode[sizes[0]], False
        lo = [s for s in sizes if s < batch]
        hi = [s for s in sizes if s > batch]
        a, b = (lo[-1], hi[0]) if lo and hi else ((sizes[-2], sizes[-1]) if lo else (sizes[0], sizes[1]))
        w = (batch - a) / (b - a)
        return float(self.decode[a] * (1 - w) + self.decode[b] * w), False

    def ratio(self, batch: int) -> float | None:
        """d(batch) / d(1), from measured costs only."""
        if batch in self.decode and 1 in self.decode and self.decode[1] > 0:
            return self.decode[batch] / self.decode[1]
        return None

    def to_json(self) -> dict:
        return {
            "P_ms": self.prefill,
            "D_ms": {str(s): v for s, v in sorted(self.denoise.items())},
            "d_ms": {str(b): v for b, v in sorted(self.decode.items())},
            "d_ratio_to_d1": {str(b): self.ratio(b) for b in sorted(self.decode)},
            "samples": self.samples,
        }


def estimate(runs: list[tuple[Point, list[FrameRecord]]], fallback: StageCosts | None = None) -> StageCosts:
    """Medians over measured frames of every non-parallel point. The sweep estimates them per group of interleaved
    points (which share the machine's load at the time), with the whole run's as `fallback`."""
    per_prefill: list[float] = []
    denoise: dict[int, list[float]] = defaultdict(list)
    decode: dict[int, list[float]] = defaultdict(list)
    for point, records in runs:
        if point.mode == "parallel":
            continue
        for r in records:
            if r.warmup:
                continue
            if r.prefills > 0 and not r.queue_involved:
                per_prefill.append(r.stage_ms["prefill"] / r.prefills)
            denoise[point.S].append(r.stage_ms["denoise"] / point.E)
            if r.batch_sizes and len(set(r.batch_sizes)) == 1:
                decode[r.batch_sizes[0]].append(r.stage_ms["decode"] / len(r.batch_sizes))
    costs = StageCosts(
        prefill=float(np.median(per_prefill)) if per_prefill else float("nan"),
        denoise={s: float(np.median(v)) for s, v in denoise.items()},
        decode={b: float(np.median(v)) for b, v in sorted(decode.items())},
        samples={"prefill": len(per_prefill), **{f"d({b})": len(v) for b, v in sorted(decode.items())}},
        fallback=fallback,
    )
    if fallback is not None:
        if not per_prefill:
            costs.prefill = fallback.prefill
        for s, v in fallback.denoise.items():
            costs.denoise.setdefault(s, v)
    return costs


def frame_ideal(mode: str, record: FrameRecord, S: int, costs: StageCosts, E: int = 1) -> tuple[float, bool]:
    """(ideal ms of one measured frame of E experts, whether every d(B) it used was measured)."""
    exact = True
    decode = 0.0
    for b in record.batch_sizes:
        ms, measured = costs.d(b)
        decode += ms
        exact &= measured
    d_cost = E * costs.denoise.get(S, float("nan"))
    if mode == "parallel":  # the action worker prefills once per expert; the language worker once per request
        return max(E * costs.prefill + d_cost, (record.prefills - E) * costs.prefill + decode), exact
    return record.prefills * costs.prefill + d_cost + decode, exact


def point_ideal(point: Point, records: list[FrameRecord], costs: StageCosts) -> dict:
    """The point's ideal frame time (median over its measured frames), its formula, and the terms filled in."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return {"ideal_frame_ms": None, "ideal_formula": FORMULAS.get(point.mode, ""), "ideal_exact": False}
    values, exact = zip(*(frame_ideal(point.mode, r, point.S, costs, point.E) for r in measured))
    ideal = float(np.median(values))
    formula = expert_formula(point.mode, point.E) if point.workload == "fixed" else "prefills P + E D + sum d(B)"
    terms = {"P": costs.prefill, "D": costs.denoise.get(point.S)}
    batches = sorted({b for r in measured for b in r.batch_sizes})
    terms.update({f"d({b})": costs.d(b)[0] for b in batches})
    return {"ideal_frame_ms": ideal, "ideal_formula": formula, "ideal_terms_ms": terms, "ideal_exact": all(exact)}
