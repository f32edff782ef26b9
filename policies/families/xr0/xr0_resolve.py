"""How an XR0 (Xiaomi-Robotics-0) checkpoint folder wants its inputs, resolved from its JSON files and safetensors
headers before any weight is read.

| convention | from | override |
| --- | --- | --- |
| dims, horizon (`action_length`), masks | config.json (MiBoTConfig; our `oxygen_gym` block if present) | - |
| action statistics | `preprocessor_config.json` `action_config[robot_type]` | `asset_id=` (the robot_type), `norm_stats=` |
| active action dims (`model.dim_mask`) | those statistics' std > 1e-5 | - |
| state | raw, zero-padded to `state_dim` (or `state_config[robot_type]` if present) | - |
| actions returned | the robot's horizon (not recorded) | `action_horizon=` |
| cameras -> views | qwen_vl_processor.VIEWS (deploy/server.py's names) | `camera_map=` (robot camera -> XR0 view) |
| tokenizer | the folder's tokenizer files | `tokenizer=` |

`asset_id=` selects the robot_type: physical-ai-studio (`policies/xr0/pretrained_utils.py`
`extract_xr0_dataset_stats`) takes a `robot_type` and falls back to the first entry; here one entry is used with a
`CheckpointGuessWarning`, and several need a choice (the first is not a safe default: each robot_type has its own
action scale).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer
from oxygen_gym.model.xr0.xr0_checkpoint import config_from_json
from oxygen_gym.model.xr0.xr0_config import XR0Config
from oxygen_gym.model.xr0.xr0_stats import XR0Stats, robot_types, stats_from_preprocessor

from oxygen_gym.policies import normalize
from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.checkpoints.family import UnsupportedCheckpointError
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from .xr0_norm import XR0ActionNormalizer
from oxygen_gym.policies.checkpoints.qwen_tokenizer_files import find_qwen_tokenizer
from .xr0_weights import TensorHeader, check_published_keys, read_headers

FAMILY = "xr0"
PREPROCESSOR = "preprocessor_config.json"
XR0_CONFIG_KEYS = ("vlm_config", "dit_config", "action_length", "action_dim", "state_dim")  # MiBoTConfig's


@dataclass
class XR0Conventions:
    """Everything the policy feeds an XR0 checkpoint and reads back, with each guess as a warning."""

    root: Path
    config: XR0Config
    robot: RobotSpec
    robot_type: str | None  # None: norm_stats='identity'
    robot_types: list[str]  # every robot_type the statistics hold
    camera_slots: dict[str, str]  # robot camera -> XR0 view, in prompt order
    state_norm: normalize.Normalizer
    action_norm: XR0ActionNormalizer | normalize.Normalizer
    dim_mask: np.ndarray | None  # bool [action_dim]: what the expert keeps of its noisy actions (None: all)
    n_actions: int  # actions act() returns
    tokenizer: QwenTokenizer
    tokenizer_source: str
    stats_source: str
    headers: dict[str, TensorHeader]
    family: str = FAMILY
    image_resize: str = "pil"
    warnings: list[str] = field(default_factory=list)

    @property
    def asset_id(self) -> str | None:
        """The robot_type (what `asset_id=` chose), under the name pi0.5's conventions use."""
        return self.robot_type

    @property
    def masked_slots(self) -> list[str]:
        """XR0 has no fixed image slots: a camera it is not given is left out of the prompt."""
        return []


def read_xr0_config_json(root: Path) -> dict | None:
    """config.json as a dict when it is XR0's (MiBoTConfig fields), else None."""
    file = root / "config.json"
    if not file.is_file():
        return None
    try:
        cfg = json.loads(file.read_text())
    except json.JSONDecodeError:
        return None
    return cfg if isinstance(cfg, dict) and all(k in cfg for k in XR0_CONFIG_KEYS) else None


def is_xr0_folder(root: Path) -> bool:
    """The family hook: config.json carries MiBoTConfig's fields (`vlm_config`, `dit_config`, `action_length`, ...)."""
    return read_xr0_config_json(Path(root)) is not None


def _xr0_config(root: Path) -> XR0Config:
    cfg = read_xr0_config_json(root)
    if cfg is None:
        file = root / "config.json"
        found = "no config.json" if not file.is_file() else f"{file} lacks {[k for k in XR0_CONFIG_KEYS if k not in _keys(file)]}"
        raise UnsupportedCheckpointError(
            f"family='xr0': {root} is not an XR0 checkpoint ({found}; an XR0 folder's config.json has MiBoTConfig's "
            f"{list(XR0_CONFIG_KEYS)}). Leave family= unset to detect the family, or pass another one"
        )
    try:
        return config_from_json(cfg)
    except (KeyError, TypeError, ValueError) as err:
        raise UnsupportedCheckpointError(f"{root / 'config.json'}: not an XR0 config this package can build: {err}") from err


def _keys(file: Path) -> list[str]:
    try:
        d = json.loads(file.read_text())
    except json.JSONDecodeError:
        return []
    return list(d) if isinstance(d, dict) else []


def resolve_xr0(root: Path, robot: RobotSpec, overrides: ConventionOverrides | None = None) -> XR0Conventions:
    """Resolve an XR0 folder's conventions (module docstring); raises naming the file and the override that fixes it."""
    from oxygen_gym.policies.qwen_vl_processor import VIEWS, default_views

    root, o, warnings = Path(root), overrides or ConventionOverrides(), []
    config = _xr0_config(root)
    if o.discrete_state is not None:
        raise ValueError("discrete_state: XR0 feeds the state to its action expert, never to the prompt; leave it unset")
    if o.image_resize not in (None, "pil"):
        raise ValueError(f"image_resize: XR0 images are padded to squares with PIL and patched by Qwen's processor; "
                         f"{o.image_resize!r} is not supported")
    headers = read_headers(root)
    check_published_keys(root, config, headers)
    if robot.state_dim > config.state_dim:
        raise ValueError(f"robot {robot.name!r} has {robot.state_dim} state dims; the checkpoint's state_dim is "
                         f"{config.state_dim}: wrong robot for this checkpoint")

    pre, stats_source = _preprocessor(root, o.norm_stats)
    types = robot_types(pre) if pre is not None else []
    if pre is None:
        stats, robot_type = None, None
    else:
        robot_type = _robot_type(types, o.asset_id, stats_source, warnings)
        try:
            stats = stats_from_preprocessor(pre, robot_type, stats_source)
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{stats_source}: robot_type {robot_type!r}: {err}") from err
    action_norm, state_norm, dim_mask = _normalisers(stats, config, robot, warnings)

    chunk = config.horizon
    if o.action_horizon is not None:
        if o.action_horizon > chunk:
            raise ValueError(f"action_horizon={o.action_horizon}: the checkpoint denoises {chunk} actions "
                             f"(config.json action_length); pass at most {chunk}")
        n_actions = o.action_horizon
    else:
        n_actions = min(robot.horizon, chunk)
        cut = f", cut to the chunk from {robot.horizon}" if robot.horizon > chunk else ""
        warnings.append(f"actions executed per call not recorded by XR0: act() returns {n_actions} of the "
                        f"{chunk}-action chunk (the horizon of robot {robot.name!r}{cut}); pass action_horizon= to "
                        f"set it")

    if o.camera_map is not None:
        views = _camera_map(robot, o.camera_map, config)
    else:
        views = default_views(robot)
        if robot.name not in VIEWS:
            warnings.append(f"robot {robot.name!r} has no XR0 view names: its cameras are titled by their own names "
                            f"{list(views)}; pass camera_map={{CAMERA: 'base' | 'wrist_left' | 'wrist_right'}}")
        if len(views) > config.max_images:
            raise ValueError(f"robot {robot.name!r} has {len(views)} cameras, the checkpoint takes at most "
                             f"{config.max_images}; pass camera_map= to choose")
    tok, tok_source = find_qwen_tokenizer(root, o.tokenizer, config)
    return XR0Conventions(
        root=root, config=config, robot=robot, robot_type=robot_type, robot_types=types, camera_slots=views,
        state_norm=state_norm, action_norm=action_norm, dim_mask=dim_mask, n_actions=n_actions, tokenizer=tok,
        tokenizer_source=tok_source, stats_source=stats_source, headers=headers, warnings=warnings,
    )


# ------------------------------------------------------------------------------------------------ statistics
def _preprocessor(root: Path, norm_stats) -> tuple[dict | None, str]:
    """(preprocessor_config dict or None for identity, where from)."""
    if isinstance(norm_stats, str) and norm_stats == "identity":
        return None, "none (norm_stats='identity')"
    if isinstance(norm_stats, Mapping):
        if "action_config" not in norm_stats:
            raise ValueError("norm_stats: an XR0 checkpoint takes a dict in preprocessor_config.json's layout "
                             "({'action_config': {robot_type: {'mean': ..., 'std': ...}}})")
        return dict(norm_stats), "norm_stats= dict"
    if isinstance(norm_stats, (str, os.PathLike)):
        path = Path(norm_stats).expanduser()
        file = path / PREPROCESSOR if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"norm_stats: {norm_stats!s} is not 'identity', a {PREPROCESSOR} or a folder holding one")
        return _read_json(file), f"norm_stats= {file}"
    file = root / PREPROCESSOR
    if not file.is_file():
        raise ValueError(
            f"XR0 checkpoint {root} has no {PREPROCESSOR} (its per-robot_type action statistics). Pass norm_stats= a "
            f"{PREPROCESSOR} (file or folder), or norm_stats='identity' to run unnormalised on purpose"
        )
    return _read_json(file), str(file)


def _read_json(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or not data.get("action_config"):
        raise ValueError(f"{file} has no 'action_config' statistics ({{robot_type: {{'mean', 'std'}}}}); pass "
                         f"norm_stats= a file that has them, or norm_stats='identity'")
    return data


def _robot_type(types: list[str], asset_id: str | None, source: str, warnings: list[str]) -> str:
    if asset_id is not None:
        if asset_id not in types:
            raise ValueError(f"asset_id={asset_id!r}: no such robot_type in {source}; robot types there: {types}")
        return asset_id
    if len(types) == 1:
        warnings.append(f"robot_type not chosen: using {types[0]!r}, the only one in {Path(source).name}; pass "
                        f"asset_id= (the robot_type) to choose it explicitly")
        return types[0]
    raise ValueError(f"{source} holds action statistics for several robot types {types}; pass asset_id= one of them "
                     f"(asset_id selects the XR0 robot_type)")


def _normalisers(stats: XR0Stats | None, config: XR0Config, robot: RobotSpec, warnings: list[str]):
    """(action normaliser, state normaliser, dim mask) for `stats` (None: identity, every dim active)."""
    if stats is None:
        return normalize.Normalizer(feature="actions"), normalize.Normalizer(feature="state"), None
    action = XR0ActionNormalizer.from_stats(stats)
    who = f"robot_type {stats.robot_type!r}"
    if action.dims != config.action_dim:
        raise ValueError(f"{who}: statistics cover {action.dims} action dims, the checkpoint's action_dim is "
                         f"{config.action_dim}")
    if action.steps is not None and action.steps < config.horizon:
        raise ValueError(f"{who}: per-step statistics have {action.steps} steps, the chunk has {config.horizon}")
    # the robot_type's true action size is up to its last active dim (physical-ai-studio `pretrained_utils.py`
    # `extract_xr0_dataset_stats` cuts the postprocessor's output there, e.g. 7 for LIBERO)
    active = stats.active_action_dims
    if active != robot.action_dim:
        raise ValueError(f"{who} moves {active} action dims; robot {robot.name!r} has {robot.action_dim}: wrong "
                         f"robot_type (asset_id=) or wrong robot")
    mask = action.active
    idle = [i for i in range(robot.action_dim) if not mask[i]]
    if idle:  # inside the robot's dims: constant in the data, so XR0 treats them as padding
        warnings.append(f"{who}: action dims {idle} of robot {robot.name!r} have std <= 1e-5 (padding to XR0): the "
                        f"expert ignores them and they come back as their mean; pass asset_id= another robot_type "
                        f"if that is wrong")
    if stats.state_mean is not None and stats.state_std is not None:
        if stats.state_mean.numel() < robot.state_dim:
            raise ValueError(f"{who}: state statistics cover {stats.state_mean.numel()} dims, robot "
                             f"{robot.name!r} has {robot.state_dim}")
        state = normalize.Normalizer("MEAN_STD", {"mean": stats.state_mean.numpy(), "std": stats.state_std.numpy()},
                                     formula="openpi", feature="state")  # (s - mean) / (std + 1e-6): xr0_stats'
    else:
        state = normalize.Normalizer(feature="state")  # the published recipe feeds the raw state
    return action, state, mask


def _camera_map(robot: RobotSpec, camera_map: dict, config: XR0Config) -> dict[str, str]:
    cameras = list(robot.cameras) + [c for c in robot.optional_cameras if c not in robot.cameras]
    out: dict[str, str] = {}
    for cam, view in camera_map.items():
        if cam not in cameras:
            raise ValueError(f"camera_map: {cam!r} is not a camera of robot {robot.name!r}; expected one of {cameras}")
        if not isinstance(view, str) or not view.strip():
            raise ValueError(f"camera_map: {cam!r} -> {view!r}: an XR0 view is a name such as 'base', 'wrist_left'")
        if view in out.values():
            raise ValueError(f"camera_map: two cameras map to the view {view!r}")
        out[cam] = view
    if not out:
        raise ValueError("camera_map: empty; XR0 needs at least one camera view")
    if len(out) > config.max_images:
        raise ValueError(f"camera_map: {len(out)} views, the checkpoint takes at most {config.max_images}")
    return out
