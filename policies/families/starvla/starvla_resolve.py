"""How a StarVLA run folder wants its inputs (model/starvla/starvla_checkpoint.py has the layout), resolved from its
config.yaml, its statistics and its weights' key list before any tensor is read.

| convention | from | override |
| --- | --- | --- |
| backbone config + tokenizer | `framework.qwenvl.base_vlm` (a hub id or folder): that folder, else the Hugging Face cache, offline | `vlm_config=` (a folder), `tokenizer=` |
| heads | config.yaml (`framework.name`, or `framework.action_heads`) | `heads=` (a subset) |
| action statistics | `dataset_statistics.json[unnorm_key]["action"]`, the only key or the chosen one (tools.py `check_unnorm_key`) | `asset_id=` (the unnorm_key), `norm_stats=` |
| state | raw (StarVLA's server unnormalises actions only: `deployment/model_server/policy_wrapper.py`) | - |
| actions returned | the first head's `action_horizon` (the client runs the whole chunk: LIBERO `model2libero_interface.py`) | `action_horizon=` |
| cameras | the robot's, in its order (the client picks count and order: `policy_wrapper.py` eval_image_contract) | `camera_map=` |
"""
from __future__ import annotations

import os
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer
from oxygen_gym.model.starvla.starvla_checkpoint import (
    STATS,
    StarVLARun,
    backbone_from_folder,
    check_keys,
    config_from_run,
    read_run,
)
from oxygen_gym.model.starvla.starvla_config import StarVLAConfig

from oxygen_gym.policies import normalize
from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
from .starvla_norm import StarVLAActionNormalizer
from oxygen_gym.policies.checkpoints.qwen_tokenizer_files import TOKENIZER_FILES, find_qwen_tokenizer, has_tokenizer_files

FAMILY = "starvla"
OFT_QUERY = "🔍"  # QwenOFT.py `action_token`


@dataclass
class StarVLAConventions:
    """Everything the policy feeds a StarVLA run and reads back, with each guess as a warning."""

    root: Path
    run: StarVLARun
    config: StarVLAConfig  # the kept heads
    robot: RobotSpec
    vlm_folder: Path
    vlm_source: str
    unnorm_key: str | None  # None: norm_stats='identity'
    unnorm_keys: list[str]
    camera_slots: dict[str, str]
    state_norm: normalize.Normalizer
    action_norm: StarVLAActionNormalizer | normalize.Normalizer
    n_actions: int
    tokenizer: QwenTokenizer
    tokenizer_source: str
    stats_source: str
    shapes: dict[str, tuple[int, ...]]
    family: str = FAMILY
    image_resize: str = "pil"
    warnings: list[str] = field(default_factory=list)

    @property
    def asset_id(self) -> str | None:
        return self.unnorm_key

    @property
    def masked_slots(self) -> list[str]:
        return []


# ------------------------------------------------------------------------------------------------ the backbone
def hub_candidates(base_vlm: str) -> list[str]:
    """Hub ids `base_vlm` may name: itself when it reads `org/name`, and `Qwen/<its folder name>` (StarVLA's configs
    name a local copy, e.g. ./playground/Pretrained_models/Qwen3-VL-4B-Instruct)."""
    out = []
    parts = base_vlm.strip("/").split("/")
    if len(parts) == 2 and not base_vlm.startswith((".", "/", "~")):
        out.append(base_vlm)
    name = parts[-1]
    if name.lower().startswith("qwen") and f"Qwen/{name}" not in out:
        out.append(f"Qwen/{name}")
    return out


def find_vlm_folder(base_vlm: str, vlm_config, run_root: Path) -> tuple[Path, str]:
    """(folder holding the backbone's config.json, where it was found); raises listing every place looked."""
    if vlm_config is not None:
        folder = Path(vlm_config).expanduser()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"vlm_config: {folder} holds no config.json (the Qwen3-VL backbone's config, as "
                                    f"{base_vlm!r} ships it)")
        return folder, f"vlm_config= {folder}"
    from huggingface_hub import constants, try_to_load_from_cache

    looked = []
    path = Path(base_vlm).expanduser()
    for folder in ([path] if path.is_absolute() else [Path.cwd() / path, run_root / path]):
        looked.append(str(folder))
        if (folder / "config.json").is_file():
            return folder, f"{folder} (config.yaml base_vlm)"
    cache = constants.HF_HUB_CACHE
    for repo in hub_candidates(base_vlm):
        looked.append(f"the Hugging Face cache {cache} for {repo}")
        found = try_to_load_from_cache(repo, "config.json", cache_dir=cache)
        if isinstance(found, str):
            return Path(found).parent, f"Hugging Face cache: {repo} ({Path(found).parent})"
    raise FileNotFoundError(
        f"the backbone {base_vlm!r} (config.yaml framework.qwenvl.base_vlm) was not found offline; looked in: "
        + "; ".join(looked) + ". Pass vlm_config= a folder holding its config.json and tokenizer files"
    )


def _tokenizer(folder: Path, source: str, override, config: StarVLAConfig) -> tuple[QwenTokenizer, str]:
    if override is None and not has_tokenizer_files(folder):
        raise ValueError(f"tokenizer: the backbone folder {folder} ({source}) holds no tokenizer files "
                         f"({', '.join(TOKENIZER_FILES)}); pass tokenizer= a Qwen tokenizer folder")
    return find_qwen_tokenizer(folder, override, config)


# ------------------------------------------------------------------------------------------------ resolve
def resolve_starvla(root: Path, robot: RobotSpec, overrides: ConventionOverrides | None = None) -> StarVLAConventions:
    """Resolve a StarVLA run's conventions (module docstring); raises naming the file and the override that fixes it."""
    o, warnings = overrides or ConventionOverrides(), []
    if o.discrete_state is not None:
        raise ValueError("discrete_state: StarVLA bins the state into the prompt for every head (QwenPI_v3.py "
                         "add_discretized_state_to_instruction); leave it unset")
    if o.image_resize not in (None, "pil"):
        raise ValueError(f"image_resize: StarVLA images are PIL-resized; {o.image_resize!r} is not supported")
    run = read_run(Path(root))
    folder, vlm_source = find_vlm_folder(run.base_vlm, o.vlm_config, run.root)
    backbone = backbone_from_folder(folder)
    probe = StarVLAConfig(backbone, heads=run.heads[:1])  # the backbone views the tokenizer check reads
    tok, tok_source = _tokenizer(folder, vlm_source, o.tokenizer, probe)
    query = int(tok.hf(OFT_QUERY, add_special_tokens=False)["input_ids"][0])
    keep = tuple(o.heads) if o.heads is not None else run.heads
    config_all = config_from_run(run, backbone, query_token=query, state_dim=robot.state_dim)
    config = config_from_run(run, backbone, query_token=query, state_dim=robot.state_dim, heads=keep)
    shapes = weight_shapes(run.weights)
    check_keys(run, config_all, shapes)
    if robot.action_dim > config.action_dim:
        raise ValueError(f"robot {robot.name!r} has {robot.action_dim} action dims; the run's action_dim is "
                         f"{config.action_dim}: wrong robot for this checkpoint")

    stats, stats_source = _statistics(run, o.norm_stats)
    keys = list(stats) if stats is not None else []
    if stats is None:
        unnorm_key, action_norm = None, normalize.Normalizer(feature="actions")
    else:
        unnorm_key = _unnorm_key(keys, o.asset_id, stats_source)
        block = stats[unnorm_key]
        if not isinstance(block, Mapping) or "action" not in block:
            raise ValueError(f"{stats_source}: {unnorm_key!r} has no 'action' statistics")
        action_norm = StarVLAActionNormalizer.from_stats(block["action"], unnorm_key)
        if action_norm.dims != config.action_dim:
            raise ValueError(f"{stats_source}: {unnorm_key!r} action statistics cover {action_norm.dims} dims, the "
                             f"heads' action_dim is {config.action_dim}: statistics of another run or robot")
        warnings.append(f"action normalisation mode not recorded in the run (it is the training data config's): "
                        f"unnormalising with the min/max of unnorm_key {unnorm_key!r} (min_max, the mode of "
                        f"StarVLA's LIBERO and Franka data configs); for a run trained in q99 mode pass norm_stats= "
                        f"statistics whose min/max are its q01/q99")
    first = config.heads[0]
    horizon = {"pi": config.pi.horizon, "groot": config.groot.horizon, "oft": config.oft.horizon}[first]
    if o.action_horizon is not None and o.action_horizon > horizon:
        raise ValueError(f"action_horizon={o.action_horizon}: head {first!r} predicts {horizon} actions "
                         f"(config.yaml action_horizon); pass at most {horizon}")
    n_actions = o.action_horizon or horizon
    cams = list(robot.cameras)
    slots = dict(o.camera_map) if o.camera_map is not None else {c: c for c in cams}
    bad = [c for c in slots if c not in list(robot.cameras) + list(robot.optional_cameras)]
    if bad:
        raise ValueError(f"camera_map: {bad} are not cameras of robot {robot.name!r}; expected some of {cams}")
    if len(slots) > config.max_images:
        raise ValueError(f"camera_map: {len(slots)} cameras, the model takes at most {config.max_images}")
    return StarVLAConventions(
        root=run.root, run=run, config=config, robot=robot, vlm_folder=folder, vlm_source=vlm_source,
        unnorm_key=unnorm_key, unnorm_keys=keys, camera_slots=slots, state_norm=normalize.Normalizer(feature="state"),
        action_norm=action_norm, n_actions=n_actions, tokenizer=tok, tokenizer_source=tok_source,
        stats_source=stats_source, shapes=shapes, warnings=warnings,
    )


def weight_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """key -> shape of the weight file without reading its tensors (safetensors headers; a .pt memory-mapped)."""
    if file.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(file), framework="pt", device="cpu") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    import torch

    state = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
    return {k: tuple(v.shape) for k, v in state.items()}


def _statistics(run: StarVLARun, norm_stats) -> tuple[dict | None, str]:
    if isinstance(norm_stats, str) and norm_stats == "identity":
        return None, "none (norm_stats='identity')"
    if isinstance(norm_stats, Mapping):
        return dict(norm_stats), "norm_stats= dict"
    if isinstance(norm_stats, (str, os.PathLike)):
        path = Path(norm_stats).expanduser()
        file = path / STATS if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"norm_stats: {norm_stats!s} is not 'identity', a {STATS} or a folder holding one")
        return _read(file), f"norm_stats= {file}"
    file = run.root / STATS
    if not file.is_file():
        raise ValueError(f"StarVLA run {run.root} has no {STATS} (its action statistics). Pass norm_stats= one, or "
                         f"norm_stats='identity' to run unnormalised on purpose")
    return _read(file), str(file)


def _read(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{file}: expected {{unnorm_key: {{'action': {{...}}}}}}, got {type(data).__name__}")
    return data


def _unnorm_key(keys: list[str], asset_id: str | None, source: str) -> str:
    if asset_id is not None:
        if asset_id not in keys:
            raise ValueError(f"asset_id={asset_id!r}: no such unnorm_key in {source}; keys there: {keys}")
        return asset_id
    if len(keys) == 1:
        return keys[0]  # StarVLA's own choice (tools.py check_unnorm_key)
    raise ValueError(f"{source} holds statistics of several datasets {keys}; pass asset_id= one of them (the "
                     f"unnorm_key)")
