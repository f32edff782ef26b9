"""The issue's speed targets, checked against a run's own points. A target whose point the run did not measure is
reported as not measured, never as met."""
from __future__ import annotations

from dataclasses import dataclass

from .ideal import StageCosts
from .metrics import find


@dataclass(frozen=True)
class Target:
    name: str
    op: str  # ">=" | "<=" | "<"
    threshold: float
    value: float | None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return {">=": self.value >= self.threshold, "<=": self.value <= self.threshold, "<": self.value < self.threshold}[self.op]

    def to_json(self) -> dict:
        return {"name": self.name, "op": self.op, "threshold": self.threshold, "value": self.value, "met": self.met, "note": self.note}


def _get(points: list[dict], field: str, **match) -> float | None:
    p = find(points, workload="fixed", **match)
    return None if p is None else p.get(field)


def _memory_ratio(points: list[dict], S: int, k: int, field: str = "peak_memory_bytes") -> float | None:
    ox = _get(points, field, mode="oxygen", N=30, k=k, S=S)
    iso = _get(points, field, mode="isolated", N=30, S=S)
    return ox / iso if ox and iso else None


def evaluate(points: list[dict], costs: StageCosts, *, S: int, device_type: str) -> list[Target]:
    """CPU targets on a CPU run, the paper's RTX 4090 ratios on a CUDA run (at the run's main S)."""
    speed_k5 = _get(points, "speedup_vs_isolated", mode="oxygen", N=30, k=5, S=S)
    speed_k1 = _get(points, "speedup_vs_isolated", mode="oxygen", N=30, k=1, S=S)
    share_n5 = _get(points, "speedup_vs_isolated", mode="shared", N=5, S=S)
    ideal = {
        "k5": _get(points, "ideal_speedup_vs_isolated", mode="oxygen", N=30, k=5, S=S),
        "k1": _get(points, "ideal_speedup_vs_isolated", mode="oxygen", N=30, k=1, S=S),
        "n5": _get(points, "ideal_speedup_vs_isolated", mode="shared", N=5, S=S),
    }
    bound = {key: f"ideal at this run's stage costs: {v:.2f}x" if v else "" for key, v in ideal.items()}
    if device_type == "cuda":
        return [
            Target("oxygen / isolated, N=30, k=5", ">=", 2.9, speed_k5, "paper, RTX 4090; " + bound["k5"]),
            Target("oxygen / isolated, N=30, k=1", ">=", 5.8, speed_k1, "paper, RTX 4090; " + bound["k1"]),
            Target("shared / isolated, N=5", ">=", 1.4, share_n5, "paper, RTX 4090; " + bound["n5"]),
        ]
    return [
        Target("efficiency oxygen, N=30, k=5", ">=", 0.95, _get(points, "efficiency", mode="oxygen", N=30, k=5, S=S)),
        Target("efficiency oxygen, N=30, k=1", ">=", 0.95, _get(points, "efficiency", mode="oxygen", N=30, k=1, S=S)),
        Target("decode step d(6) / d(1)", "<=", 2.2, costs.ratio(6), "scheduler stage costs, N=30 group"),
        Target("decode step d(30) / d(1)", "<=", 6.0, costs.ratio(30), "scheduler stage costs, N=30 group"),
        Target("oxygen / isolated, N=30, k=5", ">=", 2.3, speed_k5, bound["k5"]),
        Target("oxygen / isolated, N=30, k=1", ">=", 3.3, speed_k1, bound["k1"]),
        Target("shared / isolated, N=5", ">=", 1.3, share_n5, bound["n5"]),
        Target("manager share at batch 30 (oxygen N=30, k=1)", "<", 0.01, _get(points, "manager_share", mode="oxygen", N=30, k=1, S=S)),
        # CPU: no measured per-point peak (metrics.py); the ratio of the computed held tensor bytes, named as such
        Target("held memory (computed) oxygen / isolated, N=30, k=5", "<=", 1.15, _memory_ratio(points, S, 5, "held_memory_bytes")),
        Target("held memory (computed) oxygen / isolated, N=30, k=1", "<=", 1.15, _memory_ratio(points, S, 1, "held_memory_bytes")),
    ]
