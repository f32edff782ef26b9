"""Frame statistics in bounded memory: running totals over every frame plus a window of the most recent records.

Why: a policy or server at 10 Hz makes ~860,000 frames a day; one dict per frame kept forever is hundreds of MB.
Means, totals and rates come from running sums (exact over the whole run); percentiles come from the window (the last
`window` frames), which is what a live latency readout wants anyway.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from .timing import STAGES

DEFAULT_WINDOW = 1024


class FrameLog:
    """Append-only log of per-frame record dicts that keeps totals forever and only the last `window` records.

    Indexing uses absolute frame positions (as a list of every record would): `log[i]` and `log[a:b]` return the
    records still in the window; `len(log)` counts every frame ever appended.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        self.window = window
        self._recent: deque[dict] = deque(maxlen=window)
        self.frames = 0
        self.frame_ms_sum = 0.0
        self.stage_ms_sum = dict.fromkeys(STAGES, 0.0)
        self.tokens = 0
        self.decode_steps = 0
        self.batch_rows = 0  # sum of decode batch sizes over every step
        self.obs_to_actions_ms_sum = 0.0
        self.obs_to_actions_frames = 0

    def append(self, rec: dict) -> None:
        """`rec` needs `frame_ms`, `stage_ms`, `tokens`, `batch_sizes`; anything else is kept as is in the window."""
        self._recent.append(rec)
        self.frames += 1
        self.frame_ms_sum += float(rec["frame_ms"])
        for s, ms in rec["stage_ms"].items():
            self.stage_ms_sum[s] = self.stage_ms_sum.get(s, 0.0) + float(ms)
        self.tokens += int(rec["tokens"])
        self.decode_steps += len(rec["batch_sizes"])
        self.batch_rows += int(sum(rec["batch_sizes"]))
        if rec.get("obs_to_actions_ms") is not None:
            self.obs_to_actions_ms_sum += float(rec["obs_to_actions_ms"])
            self.obs_to_actions_frames += 1

    def __len__(self) -> int:
        return self.frames

    @property
    def first_retained(self) -> int:
        return self.frames - len(self._recent)

    def __getitem__(self, index: int | slice) -> dict | list[dict]:
        first = self.first_retained
        if isinstance(index, slice):
            start, stop, step = index.indices(self.frames)
            if step < 1:
                raise ValueError("FrameLog slices must step forwards")
            if start < first:
                start += -(-(first - start) // step) * step
            return [self._recent[i - first] for i in range(start, stop, step)]
        i = index + self.frames if index < 0 else index
        if not first <= i < self.frames:
            raise IndexError(f"frame record {index} is not in the window (frames {first}..{self.frames - 1} are kept)")
        return self._recent[i - first]

    def __iter__(self) -> Iterable[dict]:
        return iter(list(self._recent))

    @property
    def last(self) -> dict | None:
        return self._recent[-1] if self._recent else None

    def summary(self, horizon: int) -> dict:
        """Whole-run means and rates; `frame_ms` p50/p99 over the window."""
        n = self.frames
        mean_ms = self.frame_ms_sum / n if n else 0.0
        recent = np.array([r["frame_ms"] for r in self._recent]) if self._recent else np.zeros(0)
        stage = {s: (self.stage_ms_sum.get(s, 0.0) / n if n else 0.0) for s in STAGES}
        to_actions = np.array([r["obs_to_actions_ms"] for r in self._recent if r.get("obs_to_actions_ms") is not None])
        m = self.obs_to_actions_frames
        total_s = self.frame_ms_sum / 1e3
        return {
            "frames": n,
            "action_hz": float(horizon / (mean_ms / 1e3)) if mean_ms else 0.0,
            "language_tokens_per_s": float(self.tokens / total_s) if total_s else 0.0,
            "mean_batch_size": float(self.batch_rows / self.decode_steps) if self.decode_steps else 0.0,
            "frame_ms": {
                "mean": float(mean_ms),
                "p50": float(np.percentile(recent, 50)) if len(recent) else 0.0,
                "p99": float(np.percentile(recent, 99)) if len(recent) else 0.0,
                "window": len(recent),
            },
            # observation in -> actions out (before the frame's language work): what a robot waits for
            "obs_to_actions_ms": {
                "mean": float(self.obs_to_actions_ms_sum / m) if m else 0.0,
                "p50": float(np.percentile(to_actions, 50)) if len(to_actions) else 0.0,
                "p99": float(np.percentile(to_actions, 99)) if len(to_actions) else 0.0,
                "window": len(to_actions),
            },
            "stage_ms": stage,
            **stage,
            "tokens": int(self.tokens),
        }
