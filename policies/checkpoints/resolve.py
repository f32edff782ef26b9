"""How a checkpoint wants its inputs, resolved from its files before any weight is read.

Per family (family.py), what the authors' own eval does:

| | ours | lerobot <= 0.4.4 | lerobot >= 0.5 | openpi (converter / training) |
| --- | --- | --- | --- | --- |
| image slots | `oxygen_gym.image_slots` | VISUAL `input_features` + `empty_camera_N` | same | base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb |
| chunk denoised | `oxygen_gym.action_horizon` | `chunk_size` | same | `action_horizon` (training: guessed) |
| actions returned | `n_action_steps` | `n_action_steps` (select_action's queue) | same | the whole chunk (client runs `replan_steps`) |
| state bins | `discrete_state`, `state_pad_to` | on, padded to `max_state_dim` | on, unpadded | `discrete_state_input` (not recorded: guessed) |
| normalisation | `normalization_mapping`, openpi formula | processor `norm_map`, lerobot formula + `eps` | same | QUANTILES, openpi formula |
| image resize | PIL bilinear | torch bilinear, no antialias | same | PIL bilinear (openpi client) |

References: lerobot `policies/pi05/{configuration,processor,modeling}_pi05.py`, `processor/normalize_processor.py`;
openpi `training/config.py` (pi05_libero: action_horizon 10, discrete_state_input False; pi05_droid: 15),
`transforms.py`, `models/tokenizer.py`, `examples/libero/main.py`.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_gym.model.pi05.config import PI05Config
from oxygen_gym.model.pi05.loading import (
    OUR_KEY,
    WEIGHTS_FILE,
    CheckpointNotFoundError,
    config_from_checkpoint,
    read_config_json,
    resolve_checkpoint,
    tensor_shapes,
)
from oxygen_gym.model.norm_stats import STAT_NAMES, NormStats, load_norm_stats, read_lerobot_stats
from oxygen_gym.model.tokenizer import Tokenizer, find_tokenizer
from oxygen_gym.model.trained import TRAINED_MODELS, trained_model_dir

from .. import normalize
from ..robots import RobotSpec, get_robot
from .cameras import EMPTY_CAMERA, IMAGE_PREFIX, OPENPI_SLOTS, map_cameras
from .family import FAMILIES, LEROBOT, LEROBOT_04, LEROBOT_05, OPENPI, OPENPI_TRAINING, OURS, detect_family
from .family import refuse_flags, refuse_layouts
from .names import checkpoint_name_problem
from .overrides import ConventionOverrides

# openpi's published pi0.5 train configs by the asset id their norm stats live under (training/config.py)
OPENPI_CONFIGS: dict[str, tuple[str, int, bool]] = {
    "physical-intelligence/libero": ("pi05_libero", 10, False),
    "droid": ("pi05_droid", 15, True),
    "trossen": ("pi05_aloha", 50, True),
}
OPENPI_DEFAULT_HORIZON = 50  # openpi Pi0Config.action_horizon
PI05_MAX_TOKEN_LEN = 200  # openpi Pi0Config.__post_init__ for pi05


@dataclass
class Conventions:
    """Everything the policy feeds a checkpoint and reads back, with each guess as a warning."""

    root: Path
    family: str
    config: PI05Config  # dims + slots, chunk (action_horizon), discrete_state, state_pad_to, max_token_len
    robot: RobotSpec
    camera_slots: dict[str, str]  # robot camera -> model image slot
    state_norm: normalize.Normalizer
    action_norm: normalize.Normalizer
    n_actions: int  # actions act() returns
    tokenizer: Tokenizer
    tokenizer_source: str
    image_resize: str
    stats_source: str
    asset_id: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def masked_slots(self) -> list[str]:
        used = set(self.camera_slots.values())
        return [s for s in self.config.image_slots if s not in used]


def checkpoint_root(name_or_path, revision: str | None = None) -> Path:
    """A shipped trained model's name (model/trained.py), a local folder, or a hub id -> the folder. Any other name
    is refused at once with the built-in names and the closest of them (names.py)."""
    if isinstance(name_or_path, str) and name_or_path in TRAINED_MODELS:
        folder = trained_model_dir(name_or_path)
        if folder is None:
            raise CheckpointNotFoundError(
                f"trained model {name_or_path!r} is not installed: {TRAINED_MODELS[name_or_path]} has no "
                f"{WEIGHTS_FILE} (install the package with its trained assets, or pass a checkpoint folder)"
            )
        return folder
    problem = checkpoint_name_problem(name_or_path)  # a typo: the built-in names and the closest, not a hub lookup
    if problem is not None:
        raise CheckpointNotFoundError(problem)
    from oxygen_gym.model.starvla.starvla_checkpoint import is_starvla_run

    path = Path(name_or_path).expanduser()
    if path.is_file() and is_starvla_run(path):  # StarVLA names RUN/checkpoints/NAME.pt itself (base_framework.py)
        return path
    return resolve_checkpoint(name_or_path, revision)


def resolve_conventions(
    name_or_path, robot: str | RobotSpec = "libero", overrides: ConventionOverrides | None = None, **kwargs: Any
) -> Conventions:
    """Resolve a checkpoint's input conventions (module docstring) without reading its weights. The caller's
    `overrides` win over what the files say; its fields may also be given as keyword arguments (tokenizer=, ...)."""
    robot = robot if isinstance(robot, RobotSpec) else get_robot(robot)
    o = overrides or ConventionOverrides()
    if kwargs:
        o = o.replace(**kwargs)
    action_horizon, discrete_state, norm_stats = o.action_horizon, o.discrete_state, o.norm_stats
    root = checkpoint_root(name_or_path, o.revision)
    refuse_layouts(root)
    cfg = read_config_json(root)
    warnings: list[str] = []
    family = o.family
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family {family!r} is not a pi0.5 family ({FAMILIES}): resolve_conventions resolves pi0.5 "
                         f"checkpoints; MultiTaskPolicy.from_pretrained or `oxygen-gym inspect` load the others")
    if family is None:
        family, guessed = detect_family(root, cfg)
        if guessed and family == LEROBOT_04:
            warnings.append("lerobot version guessed <= 0.4.4 (state zero-padded to max_state_dim before binning): "
                            "lerobot 0.5.0 writes the same files; pass family='lerobot>=0.5' if it trained this one")
        elif guessed:
            warnings.append(f"no config.json, metadata.pt or assets/: treated as an openpi training checkpoint; "
                            f"pass family= one of {FAMILIES} otherwise")
    refuse_flags(family, cfg)
    shapes = tensor_shapes(root / WEIGHTS_FILE)
    base = PI05Config.from_json(cfg[OUR_KEY]) if family == OURS else config_from_checkpoint(cfg, shapes)

    stats, stats_source, found_asset = _stats(root, family, norm_stats, o.asset_id)
    known = OPENPI_CONFIGS.get(found_asset or "") if family in (OPENPI, OPENPI_TRAINING) else None

    # chunk denoised, actions returned
    if family == OURS:
        chunk = base.action_horizon
        n_actions = int(cfg.get("n_action_steps", chunk))
    elif family in LEROBOT:
        chunk = int(cfg.get("chunk_size", 50))
        n_actions = int(cfg.get("n_action_steps", 50))
    elif family == OPENPI and "action_horizon" in cfg:
        chunk = n_actions = int(cfg["action_horizon"])
    else:
        chunk = n_actions = known[1] if known else OPENPI_DEFAULT_HORIZON
        if action_horizon is None:
            why = f"openpi's {known[0]} config (asset id {found_asset!r})" if known else "openpi's Pi0Config default"
            warnings.append(f"chunk length not recorded: guessed {chunk} from {why}; pass action_horizon= to set it")
    if action_horizon is not None:
        chunk = int(action_horizon)
        n_actions = chunk if family in (OPENPI, OPENPI_TRAINING) else min(n_actions, chunk)
    if n_actions > chunk:
        raise ValueError(f"n_action_steps ({n_actions}) is larger than the chunk ({chunk}) in {root / 'config.json'}")

    # prompt: state bins and padding, token budget
    if family == OURS:
        ds, pad, max_len = base.discrete_state, base.state_pad_to, base.max_token_len
    elif family in LEROBOT:
        ds, max_len = True, int(cfg.get("tokenizer_max_length", PI05_MAX_TOKEN_LEN))
        pad = int(cfg.get("max_state_dim", 32)) if family == LEROBOT_04 else None
    else:
        ds, pad, max_len = (known[2] if known else True), None, PI05_MAX_TOKEN_LEN
        if discrete_state is None:
            why = (f"openpi's {known[0]} config (asset id {found_asset!r})" if known
                   else "openpi's pi0.5 default (discrete_state_input=True)")
            warnings.append(f"discrete state not recorded by openpi: {'on' if ds else 'off'} from {why}; pass "
                            f"discrete_state= to override")
    if discrete_state is not None:
        ds = bool(discrete_state)

    slots = _image_slots(family, cfg, base)
    camera_slots, cam_warnings = map_cameras(robot, slots, o.camera_map)
    warnings += cam_warnings
    _check_feature_dims(family, cfg, robot)

    state_mode, action_mode, formula, eps = _modes(root, family, cfg, warnings)
    if isinstance(norm_stats, str) and norm_stats == "identity":
        state_mode = action_mode = "IDENTITY"
    if stats is None and (action_mode != "IDENTITY" or (ds and state_mode != "IDENTITY")):
        raise ValueError(
            f"checkpoint {root} has no normalisation statistics (no lerobot processor stat files, no "
            f"assets/<id>/norm_stats.json) but declares STATE={state_mode}, ACTION={action_mode}. Pass "
            f"norm_stats=PATH or dict (your dataset's statistics), or norm_stats='identity' to run unnormalised "
            f"on purpose."
        )
    if stats is None:
        state_norm, action_norm = normalize.Normalizer(feature="state"), normalize.Normalizer(feature="actions")
    else:
        state_norm = _normalizer(stats, "state", state_mode if ds else "IDENTITY", formula, eps)
        action_norm = _normalizer(stats, "actions", action_mode, formula, eps)
    for norm, dim, what in ((state_norm, robot.state_dim, "state"), (action_norm, robot.action_dim, "action")):
        if norm.dims is not None and norm.dims < dim:
            raise ValueError(f"robot {robot.name!r} has {dim} {what} dims but the checkpoint's {what} statistics "
                             f"({stats_source}) cover {norm.dims}: wrong robot or wrong statistics")

    config = dataclasses.replace(
        base, image_slots=tuple(slots), action_horizon=chunk, discrete_state=ds, state_pad_to=pad, max_token_len=max_len
    )
    tok, tok_source = find_tokenizer(config.vocab_size, root, o.tokenizer)
    resize = o.image_resize or ("torch" if family in LEROBOT else "pil")
    return Conventions(
        root=root, family=family, config=config, robot=robot, camera_slots=camera_slots, state_norm=state_norm,
        action_norm=action_norm, n_actions=n_actions, tokenizer=tok, tokenizer_source=tok_source,
        image_resize=resize, stats_source=stats_source, asset_id=found_asset, warnings=warnings,
    )


# ------------------------------------------------------------------------------------------------ images
def _image_slots(family: str, cfg: dict, base: PI05Config) -> tuple[str, ...]:
    if family == OURS:
        return tuple(base.image_slots)
    if family in LEROBOT:
        feats = cfg.get("input_features") or {}
        slots = [k[len(IMAGE_PREFIX):] for k, v in feats.items()
                 if k.startswith(IMAGE_PREFIX) and str((v or {}).get("type", "VISUAL")) == "VISUAL"]
        for i in range(int(cfg.get("empty_cameras", 0) or 0)):  # lerobot adds these at load (validate_features)
            if f"empty_camera_{i}" not in slots:
                slots.append(f"empty_camera_{i}")
        if not [s for s in slots if not EMPTY_CAMERA.match(s)]:
            raise ValueError("config.json 'input_features' declares no image feature; lerobot refuses such a policy "
                             "too (at least one camera is expected)")
        return tuple(slots)
    return OPENPI_SLOTS


def _check_feature_dims(family: str, cfg: dict, robot: RobotSpec) -> None:
    """lerobot records the dataset's state/action sizes; a robot with other sizes is the wrong robot."""
    if family not in LEROBOT:
        return
    checks = (
        ("input_features", "observation.state", robot.state_dim, int(cfg.get("max_state_dim", 32)), "state"),
        ("output_features", "action", robot.action_dim, int(cfg.get("max_action_dim", 32)), "action"),
    )
    for group, key, dim, placeholder, what in checks:
        shape = ((cfg.get(group) or {}).get(key) or {}).get("shape")
        if shape and int(shape[0]) not in (dim, placeholder):
            raise ValueError(f"robot {robot.name!r} has {dim} {what} dims but config.json {group}[{key!r}] has "
                             f"shape {shape}: wrong robot for this checkpoint (pass robot= a RobotSpec that fits)")


# ------------------------------------------------------------------------------------------------ normalisation
def _lerobot_normalizer_config(root: Path) -> dict | None:
    path = root / "policy_preprocessor.json"
    if not path.is_file():
        return None
    for step in json.loads(path.read_text()).get("steps", []):
        if isinstance(step, dict) and step.get("registry_name") == "normalizer_processor":
            return step.get("config") or {}
    return None


def _modes(root: Path, family: str, cfg: dict, warnings: list[str]) -> tuple[str, str, str, float]:
    """(state mode, action mode, formula, lerobot eps)."""
    if family in (OPENPI, OPENPI_TRAINING):
        return "QUANTILES", "QUANTILES", "openpi", normalize.LEROBOT_EPS  # pi0.5: use_quantile_norm
    mapping = {str(k): str(v) for k, v in (cfg.get("normalization_mapping") or {}).items()}
    eps = normalize.LEROBOT_EPS
    if family in LEROBOT:
        proc = _lerobot_normalizer_config(root)
        if proc is not None:
            eps = float(proc.get("eps", eps))
            norm_map = {str(k): str(v) for k, v in (proc.get("norm_map") or {}).items()}
            for kind in ("STATE", "ACTION"):
                if kind in norm_map and kind in mapping and norm_map[kind] != mapping[kind]:
                    warnings.append(f"{kind}: policy_preprocessor.json says {norm_map[kind]}, config.json says "
                                    f"{mapping[kind]}; using the processor's (what lerobot-eval loads)")
            mapping.update(norm_map)
    state, action = mapping.get("STATE", "QUANTILES"), mapping.get("ACTION", "QUANTILES")
    for kind, mode in (("STATE", state), ("ACTION", action)):
        if mode not in normalize.MODES:
            raise ValueError(f"normalization mode {kind}={mode!r} is not one of {normalize.MODES}")
    return state, action, ("lerobot" if family in LEROBOT else "openpi"), eps


def _normalizer(stats: dict, key: str, mode: str, formula: str, eps: float) -> normalize.Normalizer:
    if mode == "IDENTITY":
        return normalize.Normalizer("IDENTITY", feature=key)
    if key not in stats:
        raise ValueError(f"normalisation statistics have no {key!r} entry (found {sorted(stats)}); {mode} needs it")
    s = stats[key]
    return normalize.Normalizer(mode, {n: s[n] for n in STAT_NAMES if n in s}, formula=formula, eps=eps, feature=key)


def _stats(root: Path, family: str, norm_stats, asset_id: str | None) -> tuple[dict | None, str, str | None]:
    """(stats by canonical key or None, where from, openpi asset id)."""
    if isinstance(norm_stats, str) and norm_stats == "identity":
        return None, "none (norm_stats='identity')", asset_id
    if isinstance(norm_stats, dict):
        return _stats_from_dict(norm_stats), "norm_stats= dict", asset_id
    if norm_stats is not None:
        path = Path(norm_stats).expanduser()
        if path.is_file():
            data = json.loads(path.read_text())
            if "norm_stats" not in data:
                raise ValueError(f"norm_stats file {path} has no 'norm_stats' object (openpi's norm_stats.json layout)")
            return _stats_from_dict(data["norm_stats"]), f"norm_stats= {path}", asset_id
        if path.is_dir():
            stats = load_norm_stats(path, asset_id)
            if stats is None:
                raise ValueError(f"norm_stats folder {path} holds no lerobot stat files and no norm_stats.json")
            return stats, f"norm_stats= {path}", asset_id
        raise ValueError(f"norm_stats: {norm_stats!r} is not 'identity', a dict, or an existing file/folder")
    if family in (OPENPI, OPENPI_TRAINING):
        found = _openpi_asset(root, asset_id)
        if found is None:
            return None, "none found", None
        stats = load_norm_stats(root, found)
        return stats, f"assets/{found}/norm_stats.json", found
    stats = read_lerobot_stats(root)
    source = "lerobot processor stat files" if stats is not None else "none found"
    return stats, source, asset_id


def _openpi_asset(root: Path, asset_id: str | None) -> str | None:
    assets = root / "assets"
    if asset_id is not None:
        if not (assets / asset_id / "norm_stats.json").is_file():
            ids = sorted(str(p.parent.relative_to(assets)) for p in assets.rglob("norm_stats.json")) if assets.is_dir() else []
            raise ValueError(f"asset_id {asset_id!r}: no {assets / asset_id / 'norm_stats.json'}; asset ids here: {ids}")
        return asset_id
    ids = sorted(str(p.parent.relative_to(assets)) for p in assets.rglob("norm_stats.json")) if assets.is_dir() else []
    if len(ids) > 1:
        raise ValueError(f"{root} holds norm stats for several asset ids {ids}; pass asset_id= to choose one")
    return ids[0] if ids else None


def _stats_from_dict(d: dict) -> dict[str, NormStats]:
    from oxygen_gym.model.norm_stats import _CANONICAL

    out = {}
    for key, value in d.items():
        if isinstance(value, NormStats):
            out[_CANONICAL.get(key, key)] = value
            continue
        if not isinstance(value, dict):
            raise ValueError(f"norm_stats[{key!r}] must be a NormStats or a dict of stat arrays, got {type(value).__name__}")
        unknown = sorted(set(value) - set(STAT_NAMES))
        if unknown:
            raise ValueError(f"norm_stats[{key!r}] has unknown statistics {unknown}; expected some of {STAT_NAMES}")
        arrays = {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in value.items() if v is not None}
        out[_CANONICAL.get(key, key)] = NormStats(**arrays)
    return out
