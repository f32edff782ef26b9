"""pi0.5's checkpoint hooks for the family registry (policies/model_io.py): its resolver decides every convention
before the weights load, and `inspect` prints what it resolved. pi0.5 detects no folder itself: it takes every
folder no other family claims, and its resolver tells its own sub-families apart (family.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from oxygen_gym.policies.checkpoints.resolve import Conventions, resolve_conventions


def load_pi05(
    root: Path, robot: RobotSpec, overrides: ConventionOverrides, device: torch.device, dtype: torch.dtype
) -> tuple[Any, Any, dict, Conventions]:
    """(model, tokenizer, MultiTaskPolicy keyword arguments, conventions) of a pi0.5 folder."""
    from oxygen_gym.model.pi05.loading import load_pretrained

    conv = resolve_conventions(root, robot, overrides)
    model = load_pretrained(conv.root, config=conv.config, device=device, dtype=dtype, asset_id=conv.asset_id)
    kwargs = dict(
        action_horizon=conv.n_actions, chunk=conv.config.action_horizon, camera_slots=conv.camera_slots,
        state_normalizer=conv.state_norm, action_normalizer=conv.action_norm, image_resize=conv.image_resize,
    )
    return model, conv.tokenizer, kwargs, conv


def inspect_pi05(root: Path, robot: RobotSpec, overrides: ConventionOverrides, prompt: str) -> str:
    from oxygen_gym.policies.checkpoints.report import report

    return report(resolve_conventions(root, robot, overrides), prompt)
