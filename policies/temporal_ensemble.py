"""Temporal ensembling of overlapping action chunks (ACT, Zhao et al. 2023, "Learning Fine-Grained Bimanual
Manipulation with Low-Cost Hardware", Algorithm 2).

A chunk policy asked every `replan` steps predicts each control step several times, once per chunk that still covers
it. Executing one chunk's actions alone lets a single chunk's outlier through: for the shipped LIBERO model, a
gripper "open" mid-carry that drops the bowl. Ensembling executes, for each step, the weighted mean of every
prediction made for it, with weight exp(-decay * i) and i = 0 the oldest prediction (lerobot's
`ACTTemporalEnsembler`, src/lerobot/policies/act/modeling_act.py; ACT's imitate_episodes.py uses decay 0.01). With
robosuite's gripper, which moves by the sign of its command, the mean's sign is a weighted vote of the chunks.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

DEFAULT_DECAY = 0.01  # ACT's k


def check_decay(decay: Any, name: str = "ensemble") -> float:
    """A finite decay: 0 the plain mean of the predictions, > 0 more weight on older ones (ACT), < 0 on newer ones
    (as lerobot's ACTTemporalEnsembler docstring allows)."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not np.isfinite(decay):
        raise ValueError(f"{name} must be a finite number (the temporal-ensemble decay, e.g. ACT's "
                         f"{DEFAULT_DECAY}), got {decay!r}")
    return float(decay)


def check_replan_interval(replan: Any) -> int:
    """Actions the caller executes of each returned chunk, for the wrappers that track what ran: an int >= 1."""
    if isinstance(replan, bool) or not isinstance(replan, int) or replan < 1:
        raise ValueError(f"replan must be an int >= 1 (actions executed per call), got {replan!r}")
    return replan


class TemporalEnsemble:
    """Wraps a policy whose `act(obs)` returns (horizon, action_dim) actions and of which the caller executes the
    first `replan` per call: `act` returns the chunk whose step j is the ensemble of every prediction made so far
    for that step. Its first `replan` steps are final (no later call covers them); the rest are the ensemble so far.
    Everything else (horizon, last_frame, close, ...) is the wrapped policy's.
    """

    def __init__(self, policy: Any, *, replan: int, decay: float = DEFAULT_DECAY) -> None:
        self.policy, self.replan, self.decay = policy, check_replan_interval(replan), check_decay(decay)
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (first step it predicts, chunk), oldest first
        self._step = 0  # the control step the next call's chunk starts at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["policy"], name)

    def reset(self, *args, **kwargs) -> Any:
        """A new episode: forget the earlier chunks, then reset the wrapped policy."""
        self._chunks.clear()
        self._step = 0
        return self.policy.reset(*args, **kwargs)

    def act(self, obs: dict, *args, **kwargs):
        actions, updates = self.policy.act(obs, *args, **kwargs)
        chunk = np.asarray(actions, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[0] < self.replan:
            raise ValueError(f"temporal ensembling needs (horizon >= replan={self.replan}, action_dim) actions; "
                             f"the policy returned shape {chunk.shape}")
        start = self._step
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= start:
            self._chunks.popleft()  # covers no step from here on
        self._chunks.append((start, chunk))
        self._step += self.replan
        return self._ensemble(start, len(chunk)).astype(np.asarray(actions).dtype, copy=False), updates

    def _ensemble(self, start: int, horizon: int) -> np.ndarray:
        out = np.empty((horizon, self._chunks[-1][1].shape[1]))
        for j in range(horizon):
            t = start + j
            preds = [c[t - s] for s, c in self._chunks if s <= t < s + len(c)]  # oldest first
            w = np.exp(-self.decay * np.arange(len(preds)))
            out[j] = (w[:, None] * np.stack(preds)).sum(0) / w.sum()
        return out
