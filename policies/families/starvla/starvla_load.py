"""StarVLA's checkpoint hooks for the family registry (policies/model_io.py): resolve the conventions
(starvla_resolve.py), then read the weights strictly into a `StarVLAModel` holding the kept heads."""
from __future__ import annotations

from pathlib import Path

import torch

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer
from oxygen_gym.model.starvla.starvla_checkpoint import is_starvla_run, read_state, split_state
from oxygen_gym.model.starvla.starvla_model import StarVLAModel

from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from .starvla_resolve import StarVLAConventions, resolve_starvla


def build_from_run(conv: StarVLAConventions, device: torch.device, dtype: torch.dtype) -> StarVLAModel:
    """The model of `conv.run`: built on the meta device and assigned the stored tensors (every key was checked by
    the resolver against the file's key list; load_state_dict(strict=True) checks them again), moved and cast."""
    state = read_state(conv.run.weights)
    backbone, heads = split_state(state, conv.run, conv.config.heads)
    with torch.device("meta"):
        model = StarVLAModel(conv.config)
    if "lm_head.weight" not in backbone:  # tied and left out of the file
        backbone["lm_head.weight"] = backbone["model.language_model.embed_tokens.weight"]
    model.vlm.load_state_dict(backbone, strict=True, assign=True)
    model.vlm.tie_weights()
    for name, module in model.heads.items():
        module.load_state_dict(heads[name], strict=True, assign=True)
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()


def load_starvla(
    root: Path, robot: RobotSpec, overrides: ConventionOverrides, device: torch.device, dtype: torch.dtype
) -> tuple[StarVLAModel, QwenTokenizer, dict, StarVLAConventions]:
    """(model, tokenizer, MultiTaskPolicy keyword arguments, conventions) of a StarVLA run folder."""
    conv = resolve_starvla(root, robot, overrides)
    model = build_from_run(conv, device, dtype)
    first = model.action_heads[conv.config.heads[0]]
    kwargs = dict(action_horizon=conv.n_actions, chunk=first.horizon, camera_slots=conv.camera_slots,
                  state_normalizer=conv.state_norm, action_normalizer=conv.action_norm, image_resize=conv.image_resize)
    return model, conv.tokenizer, kwargs, conv


def inspect_starvla(root: Path, robot: RobotSpec, overrides: ConventionOverrides, prompt: str) -> str:
    from .starvla_report import starvla_report

    return starvla_report(resolve_starvla(root, robot, overrides), prompt)


def detects_starvla(root: Path) -> bool:
    return is_starvla_run(Path(root))
