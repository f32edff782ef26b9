"""XR0's checkpoint hooks for the family registry (policies/model_io.py): resolve the conventions (xr0_resolve.py),
then read the weights strictly into an `XR0Model` and set its `dim_mask` from the chosen statistics."""
from __future__ import annotations

from pathlib import Path

import torch

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer
from oxygen_gym.model.xr0.xr0_checkpoint import load_xr0_checkpoint
from oxygen_gym.model.xr0.xr0_model import XR0Model

from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from .xr0_resolve import XR0Conventions, resolve_xr0


def build_from_checkpoint(conv: XR0Conventions, device: torch.device, dtype: torch.dtype) -> XR0Model:
    """The model of `conv.root`: every key checked, built on the meta device and assigned the stored tensors (no
    random init of a 4B model), then moved and cast."""
    ckpt = load_xr0_checkpoint(conv.root)
    with torch.device("meta"):
        model = XR0Model(ckpt.config)
    model.vlm.load_state_dict(ckpt.backbone, strict=True, assign=True)
    model.vlm.tie_weights()  # assign replaced the shared Parameter of a tied head
    model.expert.load_state_dict(ckpt.expert, strict=True, assign=True)
    model.requires_grad_(False)
    model = model.to(device=device, dtype=dtype).eval()
    if conv.dim_mask is not None:
        model.dim_mask = torch.as_tensor(conv.dim_mask, dtype=torch.bool, device=device)
    return model


def load_xr0(
    root: Path, robot: RobotSpec, overrides: ConventionOverrides, device: torch.device, dtype: torch.dtype
) -> tuple[XR0Model, QwenTokenizer, dict, XR0Conventions]:
    """(model, tokenizer, MultiTaskPolicy keyword arguments, conventions) of an XR0 folder."""
    conv = resolve_xr0(root, robot, overrides)
    model = build_from_checkpoint(conv, device, dtype)
    kwargs = dict(
        action_horizon=conv.n_actions, chunk=conv.config.horizon, camera_slots=conv.camera_slots,
        state_normalizer=conv.state_norm, action_normalizer=conv.action_norm, image_resize=conv.image_resize,
    )
    return model, conv.tokenizer, kwargs, conv


def inspect_xr0(root: Path, robot: RobotSpec, overrides: ConventionOverrides, prompt: str) -> str:
    from .xr0_report import xr0_report

    return xr0_report(resolve_xr0(root, robot, overrides), prompt)
