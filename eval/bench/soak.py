"""The paper's D.3 stability run: thousands of `oxygen` frames under a fluctuating load (arrival counts repeat every
17 frames, request lengths every 7, up to the pool's slot count active at once). Memory must stay bounded and latency
must not drift: compared over whole load cycles (17 x 7 = 119 frames) at the start and the end."""
from __future__ import annotations

import numpy as np

from .records import FrameRecord

CYCLE = 17 * 7


def summarize(records: list[FrameRecord], *, k: int, slots: int, total_queued: int) -> dict:
    measured = [r for r in records if not r.warmup]
    if not measured:
        return {}
    ms = np.array([r.frame_ms for r in measured])
    window = CYCLE * max(1, min(2, len(ms) // (4 * CYCLE))) if len(ms) >= 2 * CYCLE else max(1, len(ms) // 4)
    first, last = float(ms[:window].mean()), float(ms[-window:].mean())
    mem = [r.memory_bytes for r in measured]
    rss = [r.rss_bytes for r in measured]
    return {
        "frames": len(measured),
        "k": k,
        "slots": slots,
        "window_frames": window,
        "latency_first_ms": first,
        "latency_last_ms": last,
        "latency_drift": (last - first) / first if first else None,
        "peak_active": max(r.active for r in measured),
        "queued_requests": int(total_queued),
        "frames_with_queue": int(sum(r.queued > 0 for r in measured)),
        "memory_first_bytes": mem[0],
        "memory_last_bytes": mem[-1],
        "memory_peak_bytes": max(mem),
        "rss_first_bytes": rss[0],
        "rss_last_bytes": rss[-1],
        "rss_growth_mb": (rss[-1] - rss[0]) / 2**20,
        "tokens_per_s": float(sum(r.tokens for r in measured) / (ms.sum() / 1e3)),
    }


def series(records: list[FrameRecord]) -> dict:
    measured = [r for r in records if not r.warmup]
    return {
        "frame": [r.frame for r in measured],
        "frame_ms": [round(r.frame_ms, 3) for r in measured],
        "active": [r.active for r in measured],
        "queued": [r.queued for r in measured],
        "memory_bytes": [r.memory_bytes for r in measured],
        "rss_bytes": [r.rss_bytes for r in measured],
    }

