"""StarVLA's action unnormalisation from a run's `dataset_statistics.json`, the statistics of one `unnorm_key`'s
`"action"` block (StarVLA `starVLA/model/tools.py` `FrameworkTools.get_action_stats` / `unnormalize_actions`):

    a = clip(a, -1, 1)
    a[binary dims] = 0 if a < 0.5 else 1                     (dims whose `mask` is False)
    a[other dims]  = 0.5 * (a + 1) * (high - low) + low      (mask True)

`mask` is False exactly for the dims the training transform normalised in `binary` mode (`dataloader/gr00t_lerobot/
datasets.py` `generate_action_mask_for_used_keys`). `(low, high)` are `min` / `max` for the `min_max` mode StarVLA's
LIBERO and Franka data configs train with (`examples/simBenchmarks/LIBERO/train_files/data_registry/data_config.py`
`Libero4in1DataConfig`; read back this way by `examples/simBenchmarks/LIBERO-plus/eval_files/parallel_eval/
eval_libero_model.py` and `examples/realRobots/Franka/eval_files/inference_single_example.py`), `q01` / `q99` for the
`q99` mode (`FrameworkTools.unnormalize_actions`, the OpenPI LIBERO data config). The mode is the data config's, which
the run folder does not record."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = {"min_max": ("min", "max"), "q99": ("q01", "q99")}
BINARY_THRESHOLD = 0.5


@dataclass(frozen=True)
class StarVLAActionNormalizer:
    """`normalize` robot units -> model space, `unnormalize` back, over the last axis (`(h, dims)` or `(dims,)`)."""

    low: np.ndarray  # [A]
    high: np.ndarray
    mask: np.ndarray  # bool [A]: False = a binary dim
    unnorm_key: str
    mode: str = "min_max"
    feature: str = "actions"

    @staticmethod
    def from_stats(action: dict, unnorm_key: str, mode: str = "min_max") -> "StarVLAActionNormalizer":
        """`action`: dataset_statistics.json[unnorm_key]["action"]."""
        if mode not in MODES:
            raise ValueError(f"action normalisation mode {mode!r}; expected one of {sorted(MODES)}")
        lo, hi = MODES[mode]
        missing = [k for k in (lo, hi) if k not in action]
        if missing:
            raise ValueError(f"dataset_statistics.json[{unnorm_key!r}]['action'] has no {missing} (the {mode} "
                             f"statistics); it has {sorted(action)}")
        low, high = np.asarray(action[lo], np.float64), np.asarray(action[hi], np.float64)
        mask = np.asarray(action.get("mask", np.ones_like(low, bool)), bool)
        if not (low.shape == high.shape == mask.shape) or low.ndim != 1:
            raise ValueError(f"dataset_statistics.json[{unnorm_key!r}]['action']: {lo} {low.shape}, {hi} {high.shape} "
                             f"and mask {mask.shape} must be one flat list each of the same length")
        return StarVLAActionNormalizer(low, high, mask, unnorm_key, mode)

    @property
    def dims(self) -> int:
        return int(self.low.shape[0])

    def _cut(self, n: int):
        if n > self.dims:
            raise ValueError(f"actions: value has {n} dims but the {self.unnorm_key!r} statistics have {self.dims}")
        return self.low[:n], self.high[:n], self.mask[:n]

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        x = np.clip(np.asarray(x, np.float64), -1.0, 1.0)
        low, high, mask = self._cut(x.shape[-1])
        binary = np.where(x < BINARY_THRESHOLD, 0.0, 1.0)
        return np.where(mask, 0.5 * (x + 1.0) * (high - low) + low, binary).astype(np.float32)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """The training transform's direction (a binary dim thresholded, as its `binary` mode does)."""
        x = np.asarray(x, np.float64)
        low, high, mask = self._cut(x.shape[-1])
        span = np.where(high > low, high - low, 1.0)
        scaled = np.where(high > low, 2.0 * (x - low) / span - 1.0, 0.0)
        return np.where(mask, scaled, (x > BINARY_THRESHOLD).astype(np.float64)).astype(np.float32)

    def describe(self) -> str:
        lo, hi = MODES[self.mode]
        binary = [i for i, m in enumerate(self.mask) if not m]
        return (f"{self.mode} of unnorm_key {self.unnorm_key!r} ({self.dims} dims): clip to [-1, 1], then "
                f"0.5 * (a + 1) * ({hi} - {lo}) + {lo}; binary dims (mask False) {binary} -> 0 below 0.5, else 1 "
                f"(StarVLA tools.py unnormalize_actions)")
