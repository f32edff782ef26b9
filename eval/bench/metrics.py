"""Per-point metrics from measured frames (warm-up excluded), as results.json records them (docs/api.md's fields
first)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from oxygen_gym.engine.timing import STAGES

from .ideal import StageCosts, point_ideal
from .records import FrameRecord, Point


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def point_metrics(
    point: Point, records: list[FrameRecord], *, horizon: int, held_bytes: int, costs: StageCosts, error: str | None = None
) -> dict:
    measured = [r for r in records if not r.warmup]
    out: dict = {
        "mode": point.mode, "N": point.N, "k": point.k, "S": point.S, "workload": point.workload, "E": point.E,
        "frames": len(measured), "warmup_frames": sum(r.warmup for r in records),
    }
    if error:
        out["error"] = error
    if not measured:
        return out
    frame = np.array([r.frame_ms for r in measured])
    steps = [b for r in measured for b in r.batch_sizes]
    total_s = frame.sum() / 1e3
    stage = {s: float(np.mean([r.stage_ms.get(s, 0.0) for r in measured])) for s in STAGES}
    tokens = sum(r.tokens for r in measured)
    out.update(
        frame_ms_mean=float(frame.mean()),
        frame_ms_p50=_pct(frame, 50),
        frame_ms_p99=_pct(frame, 99),
        action_hz=float(horizon / (frame.mean() / 1e3)),
        language_tokens_per_s=float(tokens / total_s) if total_s > 0 else 0.0,
        mean_batch_size=float(np.mean(steps)) if steps else 0.0,
        stage_ms=stage,
        stage_ms_p50={s: float(np.median([r.stage_ms.get(s, 0.0) for r in measured])) for s in STAGES},
        manager_share=stage["manager"] / float(frame.mean()) if frame.mean() > 0 else 0.0,
        other_ms=float(frame.mean()) - sum(stage.values()) if point.mode != "parallel" else None,
        tokens=int(tokens),
        decode_steps_per_frame=float(np.mean([len(r.batch_sizes) for r in measured])),
        decode_step_ms=_decode_step_ms(measured),
    )
    out.update(point_ideal(point, records, costs))
    ideal = out["ideal_frame_ms"]
    out["efficiency"] = ideal / out["frame_ms_p50"] if ideal else None
    out["efficiency_mean"] = ideal / out["frame_ms_mean"] if ideal else None
    # Memory. `held_memory_bytes` is computed, not measured: the bytes of the weights, packed weights and KV pool
    # tensors the point's engine holds. A peak is only reported where it is measured: on CUDA, the caching
    # allocator's peak above each frame's start. On CPU the points of a group run interleaved in one process, so
    # no per-point high-water mark exists to read; `peak_memory_bytes` is then None rather than a computed figure.
    transient = [r.transient_bytes for r in measured if r.transient_bytes is not None]
    out["held_memory_bytes"] = int(held_bytes)
    out["peak_memory_bytes"] = int(held_bytes + max(transient)) if transient else None
    out["peak_memory_method"] = (
        "measured: held tensors + the CUDA allocator's peak transient per frame" if transient
        else "not measured (CPU); see held_memory_bytes, computed from tensor sizes"
    )
    latencies = np.array([x for r in measured for x in r.request_latency_ms])
    out.update(
        requests_started=int(sum(r.new_requests for r in measured)),
        requests_completed=int(len(latencies)),
        request_latency_ms_p50=_pct(latencies, 50) if len(latencies) else None,
        request_latency_ms_p99=_pct(latencies, 99) if len(latencies) else None,
    )
    energy = [r.energy_j for r in measured if r.energy_j is not None]
    if energy and not any(energy):
        # NVML's counter ticks at its own period: frames that all fall between two ticks read 0 J, which is no reading.
        out["energy_note"] = (f"not measured: the NVML energy counter did not advance during any of the {len(energy)} "
                              f"measured frames ({total_s * 1e3:.1f} ms in all; its update period is longer)")
    elif energy:
        joules = float(sum(energy))
        out["energy_j"] = joules
        out["avg_power_w"] = joules / total_s if total_s > 0 else None
        started = out["requests_started"]
        out["energy_j_per_request"] = joules / started if started else None
    return out


def _decode_step_ms(records: list[FrameRecord]) -> dict[str, float]:
    """Median ms of one decode step per batch size, from frames whose steps all ran at that batch size."""
    by_batch: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.batch_sizes and len(set(r.batch_sizes)) == 1:
            by_batch[r.batch_sizes[0]].append(r.stage_ms["decode"] / len(r.batch_sizes))
    return {str(b): float(np.median(v)) for b, v in sorted(by_batch.items())}


def add_speedups(points: list[dict]) -> None:
    """Against the isolated point of the same N, S, workload and expert count E: `speedup_vs_isolated` (mean frame times, i.e. the
    ratio of action rates), `speedup_vs_isolated_p50`, and `ideal_speedup_vs_isolated` (the ratio the run's stage
    costs allow: ideal isolated / ideal this)."""
    iso = {(p["N"], p["S"], p["workload"], p.get("E", 1)): p for p in points if p["mode"] == "isolated" and "frame_ms_mean" in p}
    for p in points:
        base = iso.get((p["N"], p["S"], p["workload"], p.get("E", 1)))
        for field, source in (("speedup_vs_isolated", "frame_ms_mean"), ("speedup_vs_isolated_p50", "frame_ms_p50"),
                              ("ideal_speedup_vs_isolated", "ideal_frame_ms")):
            num, den = (base or {}).get(source), p.get(source)
            p[field] = num / den if num and den else None


def find(points: list[dict], **match) -> dict | None:
    """The first point whose fields equal `match` (and that has measurements)."""
    for p in points:
        if "frame_ms_mean" in p and all(p.get(k) == v for k, v in match.items()):
            return p
    return None
