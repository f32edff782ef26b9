"""The decode budget k: fixed, or chosen each frame from an online model of stage costs."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


class FixedBudget:
    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
            raise ValueError(f"decode_budget must be a positive int or 'auto', got {k!r}")
        self.k = k

    def choose(self, batch_size: int, remaining: list[int], ages_s: list[float]) -> int:
        return self.k

    def observe(self, stage_ms: dict[str, float], batch_sizes: list[int], decode_ms: float) -> None:
        pass


@dataclass
class AutoBudget:
    """Deadline-aware k.

    Rule, each frame (T = horizon / target_action_hz is the frame-time budget):
      1. Predict the fixed part F = prefill + denoise + manager (EWMA of past frames) and the cost d(B) of one
         decode step at this frame's batch size B (EWMA per batch size; unseen sizes interpolate linearly between
         measured ones, or scale the nearest by B ratio beyond them).
      2. k_rate = floor((T - F) / d(B)): the most tokens that keep the action rate at the target.
      3. With `language_deadline_s`: k_need = the fewest tokens per frame that finish every in-flight request
         before its deadline at the predicted frame time; k = min(k_rate, k_need). Actions keep priority: when
         the deadline cannot be met, k stays at k_rate and the miss is counted.
      4. Never starve: k >= 1 whenever any request has not advanced for `max_idle_frames` frames, and k is
         never above the largest remaining token count nor `k_max`.
    Before any measurement, k = 1.
    """

    target_action_hz: float
    horizon: int
    language_deadline_s: float | None = None
    k_max: int = 64
    max_idle_frames: int = 4
    alpha: float = 0.3
    fixed_ms: float | None = None
    step_ms: dict[int, float] = field(default_factory=dict)
    idle_frames: int = 0
    deadline_misses: int = 0
    last_k: int = 0

    def __post_init__(self) -> None:
        if self.target_action_hz is None or not self.target_action_hz > 0:
            raise ValueError(f"target_action_hz must be > 0 with decode_budget='auto', got {self.target_action_hz!r}")
        if self.language_deadline_s is not None and not self.language_deadline_s > 0:
            raise ValueError(f"language_deadline_s must be > 0, got {self.language_deadline_s!r}")

    @property
    def frame_budget_ms(self) -> float:
        return 1e3 * self.horizon / self.target_action_hz

    def predict_step_ms(self, batch: int) -> float | None:
        if not self.step_ms:
            return None
        if batch in self.step_ms:
            return self.step_ms[batch]
        sizes = sorted(self.step_ms)
        lo = max((s for s in sizes if s < batch), default=None)
        hi = min((s for s in sizes if s > batch), default=None)
        if lo is not None and hi is not None:
            w = (batch - lo) / (hi - lo)
            return self.step_ms[lo] * (1 - w) + self.step_ms[hi] * w
        nearest = lo if lo is not None else hi
        return self.step_ms[nearest] * max(batch / nearest, 1.0) if lo is not None else self.step_ms[nearest]

    def choose(self, batch_size: int, remaining: list[int], ages_s: list[float]) -> int:
        if batch_size == 0:
            self.last_k = 0
            return 0
        d = self.predict_step_ms(batch_size)
        if self.fixed_ms is None or d is None:
            k = 1
        else:
            k = max(0, math.floor((self.frame_budget_ms - self.fixed_ms) / max(d, 1e-6)))
            if self.language_deadline_s is not None:
                frame_s = (self.fixed_ms + k * d) / 1e3
                need = 0
                for rem, age in zip(remaining, ages_s):
                    frames_left = max((self.language_deadline_s - age) / max(frame_s, 1e-9), 1.0)
                    need = max(need, math.ceil(rem / frames_left))
                if need > k:
                    self.deadline_misses += 1
                k = min(k, need)
        if k == 0 and self.idle_frames + 1 >= self.max_idle_frames:
            k = 1
        k = min(k, self.k_max, max(remaining, default=0))
        self.idle_frames = self.idle_frames + 1 if k == 0 else 0
        self.last_k = k
        return k

    def observe(self, stage_ms: dict[str, float], batch_sizes: list[int], decode_ms: float) -> None:
        fixed = stage_ms.get("prefill", 0.0) + stage_ms.get("denoise", 0.0) + stage_ms.get("manager", 0.0)
        self.fixed_ms = fixed if self.fixed_ms is None else (1 - self.alpha) * self.fixed_ms + self.alpha * fixed
        if batch_sizes:
            per_step = decode_ms / len(batch_sizes)
            b = round(sum(batch_sizes) / len(batch_sizes))
            old = self.step_ms.get(b)
            self.step_ms[b] = per_step if old is None else (1 - self.alpha) * old + self.alpha * per_step


def make_budget(decode_budget, *, target_action_hz=None, horizon: int, language_deadline_s=None):
    if decode_budget == "auto":
        return AutoBudget(target_action_hz=target_action_hz, horizon=horizon, language_deadline_s=language_deadline_s)
    if isinstance(decode_budget, str):
        raise ValueError(f"decode_budget must be a positive int or 'auto', got {decode_budget!r}")
    return FixedBudget(decode_budget)
