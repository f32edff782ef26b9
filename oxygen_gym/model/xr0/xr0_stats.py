"""Per-robot action statistics of an XR0 checkpoint (`preprocessor_config.json`).

The checkpoint's processor keeps `action_config: {robot_type: {"mean": ..., "std": ...}}` (physical-ai-studio
`pretrained_utils.py` `extract_xr0_dataset_stats`); the values may be per action dim `[A]` or per step and dim
`[H, A]` (rosmontis2005 `orchardbench_dataset.py` `load_stats` validates `[30, 32]`): both broadcast over
`[B, H, A]`, so the shape is kept. The model works in `(a - mean) / (std + 1e-6)` (physical-ai-studio
`preprocessor.py` `normalize_action`). Dims with std <= 1e-5 are padding (`get_action_mask`'s rule), which the
expert zeroes before its projector. The state enters raw in the published recipe (`normalize_state=False`); a
`state_config` block of the same form, if a file has one, is read too (not seen in a published file).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

EPS = 1e-6
ACTIVE_STD = 1e-5


@dataclass(frozen=True)
class XR0Stats:
    robot_type: str
    action_mean: torch.Tensor
    action_std: torch.Tensor
    state_mean: torch.Tensor | None = None
    state_std: torch.Tensor | None = None

    @property
    def action_dim_mask(self) -> torch.Tensor:
        """bool `[A]`: dims a robot really has (any step's std above 1e-5)."""
        std = self.action_std.reshape(-1, self.action_std.shape[-1])
        return (std > ACTIVE_STD).any(0)

    @property
    def active_action_dims(self) -> int:
        """Leading dims up to the last active one (the robot's true action size)."""
        idx = self.action_dim_mask.nonzero()
        return int(idx[-1]) + 1 if len(idx) else self.action_std.shape[-1]

    def normalize_actions(self, a: torch.Tensor) -> torch.Tensor:
        return (a - self.action_mean.to(a)) / (self.action_std.to(a) + EPS)

    def unnormalize_actions(self, a: torch.Tensor) -> torch.Tensor:
        return a * (self.action_std.to(a) + EPS) + self.action_mean.to(a)

    def normalize_state(self, s: torch.Tensor) -> torch.Tensor:
        """Identity without state statistics (the published recipe feeds the raw, zero-padded state)."""
        if self.state_mean is None or self.state_std is None:
            return s
        return (s - self.state_mean.to(s)) / (self.state_std.to(s) + EPS)


def robot_types(preprocessor: dict) -> list[str]:
    return list(preprocessor.get("action_config") or {})


def stats_from_preprocessor(preprocessor: dict, robot_type: str, source: str = "preprocessor_config.json") -> XR0Stats:
    """The statistics of `robot_type`; an unknown one raises naming the available ones."""
    actions = preprocessor.get("action_config") or {}
    if robot_type not in actions:
        raise KeyError(f"robot_type {robot_type!r} not in {source}; available: {sorted(actions)}")
    entry = actions[robot_type]
    mean = torch.tensor(entry["mean"], dtype=torch.float32)
    std = torch.tensor(entry["std"], dtype=torch.float32)
    if mean.shape != std.shape:
        raise ValueError(f"{source}: {robot_type} action mean {tuple(mean.shape)} and std {tuple(std.shape)} differ")
    state = (preprocessor.get("state_config") or {}).get(robot_type)
    s_mean = s_std = None
    if state is not None:
        s_mean = torch.tensor(state["mean"], dtype=torch.float32)
        s_std = torch.tensor(state["std"], dtype=torch.float32)
    return XR0Stats(robot_type, mean, std, s_mean, s_std)


def load_stats(path: str | Path, robot_type: str) -> XR0Stats:
    """From a checkpoint folder (or the json file itself)."""
    path = Path(path)
    file = path / "preprocessor_config.json" if path.is_dir() else path
    return stats_from_preprocessor(json.loads(file.read_text()), robot_type, str(file))
