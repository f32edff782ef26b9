"""Load and save pi0.5 checkpoints in lerobot's layout (config.json + model.safetensors + processor stat files),
and openpi's converter layout (same tensors without the leading `model.`, stats in assets/<asset_id>/).

Dims come from, in order: the `config` argument; our exact dims under config.json's `oxygen_gym` key (written by
`save_pretrained`); lerobot's/openpi's variant names (`paligemma_variant: gemma_2b`, `action_expert_variant:
gemma_300m`) when the tensor shapes agree with them; otherwise the tensor shapes themselves (reduced-dims
checkpoints such as the lerobot test fixture carry the real variant names but smaller tensors).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .config import BUILTIN, GemmaDims, PI05Config, VisionDims
from .init import default_dtype, empty_model
from ..language_task_rule import check_language_tasks
from ..noise_rule import check_noise_scale
from ..norm_stats import NormStats, load_norm_stats, write_lerobot_stats
from .modeling import PI05Model
from .weights import P, CheckpointError, checkpoint_keys, load_state, to_checkpoint

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OUR_KEY = "oxygen_gym"

# openpi `gemma.get_config` / lerobot `get_gemma_config`.
VARIANTS: dict[str, GemmaDims] = {
    "gemma_2b": GemmaDims(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_300m": GemmaDims(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "dummy": GemmaDims(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
}
SO400M = VisionDims(width=1152, depth=27, mlp_dim=4304, num_heads=16)
PALIGEMMA_VOCAB = 257152
SO400M_HEAD_DIM = 72
IMAGE_PREFIX = "observation.images."
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "assets/**"]


class CheckpointNotFoundError(ValueError, FileNotFoundError):
    """No checkpoint where one was asked for (missing folder or file, or an unreachable hub id)."""


# ------------------------------------------------------------------------------------------------ load
def load_pretrained(
    path_or_hub_id: str | Path,
    config: PI05Config | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = torch.float32,
    *,
    revision: str | None = None,
    asset_id: str | None = None,
) -> PI05Model:
    """A pi0.5 model from a local checkpoint folder or a Hugging Face Hub id.

    `config=None` reads the dims from the checkpoint (see the module docstring). `dtype=torch.bfloat16` keeps the
    norms and vision embeddings in fp32, as the reference checkpoints do; `dtype=None` is float32 on CPU and
    bfloat16 on CUDA. The normaliser statistics found beside the weights are attached as `model.norm_stats`
    (dict key -> NormStats, keys `state` / `actions`; None when absent) and the folder as `model.checkpoint_dir`.
    """
    root = resolve_checkpoint(path_or_hub_id, revision)
    weights = root / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointNotFoundError(f"{WEIGHTS_FILE} not found in checkpoint folder {root}")
    if config is None:
        config = config_from_checkpoint(read_config_json(root), tensor_shapes(weights))
    elif not isinstance(config, PI05Config):
        raise ValueError(f"config must be a PI05Config or None, got {type(config).__name__}")
    model = empty_model(config, device, dtype or default_dtype(device))
    with safe_open(str(weights), framework="pt", device="cpu") as handle:
        load_state(model, _LazyTensors(handle))
    model.norm_stats = load_norm_stats(root, asset_id)
    model.checkpoint_dir = root
    return model


def resolve_checkpoint(path_or_hub_id: str | Path, revision: str | None = None) -> Path:
    """A local folder as is; otherwise an `owner/name` hub id fetched with `huggingface_hub.snapshot_download`."""
    path = Path(path_or_hub_id).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        raise CheckpointNotFoundError(f"checkpoint must be a folder holding {WEIGHTS_FILE}, got the file {path}")
    text = str(path_or_hub_id)
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text):
        raise CheckpointNotFoundError(f"checkpoint folder not found: {text!r} (and it is not an owner/name hub id)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(text, revision=revision, allow_patterns=HUB_PATTERNS))
    except Exception as err:  # offline mode, no network, unknown repo, gated repo: all mean "not available here"
        raise CheckpointNotFoundError(
            f"could not get checkpoint {text!r}: it is not a local folder, and fetching it from the Hugging Face "
            f"Hub failed ({type(err).__name__}: {err}). Without network access, download it on another machine "
            f"and pass the local folder (config.json + {WEIGHTS_FILE})."
        ) from err


def read_config_json(root: Path) -> dict:
    file = root / CONFIG_FILE
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{file} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} must hold a JSON object")
    return data


def tensor_shapes(weights: Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape from the file header, keys with the lerobot `model.` prefix (openpi's layout lacks it)."""
    with safe_open(str(weights), framework="pt", device="cpu") as handle:
        shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
    return {(k if k.startswith("model.") else f"model.{k}"): s for k, s in shapes.items()}


class _LazyTensors(Mapping):
    """Checkpoint tensors read one at a time, so a full-size model never holds two copies of its weights."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._keys = list(handle.keys())

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._handle.get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


# ------------------------------------------------------------------------------------------------ dims
def config_from_checkpoint(cfg: dict, shapes: dict[str, tuple[int, ...]]) -> PI05Config:
    """The model config of a checkpoint from its config.json (`cfg`, may be empty) and its tensor shapes."""
    if OUR_KEY in cfg:
        return PI05Config.from_json(cfg[OUR_KEY])
    common = _common_fields(cfg)
    vlm_name, expert_name = cfg.get("paligemma_variant"), cfg.get("action_expert_variant")
    if vlm_name in VARIANTS and expert_name in VARIANTS:
        candidate = PI05Config(
            vlm=VARIANTS[vlm_name], expert=VARIANTS[expert_name], vision=SO400M, vocab_size=PALIGEMMA_VOCAB,
            action_dim=_action_dim(cfg, shapes), **common,
        )
        if _shapes_agree(candidate, shapes):
            return candidate
    return PI05Config(**_dims_from_shapes(shapes), **common)


# our field <- (config.json keys, lerobot's first, then openpi's), with the type to read it as
_FIELDS = {
    "action_horizon": (("chunk_size", "action_horizon"), int),
    "max_token_len": (("tokenizer_max_length", "max_token_len"), int),
    "num_steps": (("num_inference_steps",), int),
    "min_period": (("min_period",), float),
    "max_period": (("max_period",), float),
    "discrete_state": (("discrete_state_input",), bool),
}


def _common_fields(cfg: dict) -> dict:
    """Config fields that config.json states outright (horizon, prompt length, steps, camera slots)."""
    out: dict = {}
    for ours, (keys, cast) in _FIELDS.items():
        value = next((cfg[k] for k in keys if cfg.get(k) is not None), None)
        if value is not None:
            out[ours] = cast(value)
    slots = [k[len(IMAGE_PREFIX) :] for k in cfg.get("input_features", {}) if k.startswith(IMAGE_PREFIX)]
    if slots:
        out["image_slots"] = tuple(slots)
    return out


def _action_dim(cfg: dict, shapes: dict) -> int:
    dim = _shape(shapes, "model.action_in_proj.weight")[1]
    declared = cfg.get("max_action_dim", cfg.get("action_dim"))
    if declared is not None and int(declared) != dim:
        raise CheckpointError(
            f"config.json declares action dim {declared} but 'model.action_in_proj.weight' takes {dim} inputs"
        )
    return dim


def _shapes_agree(config: PI05Config, shapes: dict) -> bool:
    with torch.device("meta"):
        expected = checkpoint_keys(PI05Model(config))
    tied = f"model.{P}paligemma.model.language_model.embed_tokens.weight"
    lm_head = f"model.{P}paligemma.lm_head.weight"
    return all(expected.get(lm_head if k == tied else k) == s for k, s in shapes.items())


def _shape(shapes: dict, key: str) -> tuple[int, ...]:
    if key not in shapes:
        raise CheckpointError(f"cannot infer the model dims: checkpoint has no {key!r}")
    return shapes[key]


def _depth(shapes: dict, prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    layers = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    if not layers:
        raise CheckpointError(f"cannot infer the model dims: no layers under {prefix!r}")
    if layers != set(range(len(layers))):
        missing = sorted(set(range(max(layers) + 1)) - layers)
        raise CheckpointError(f"layers {missing} missing under {prefix!r}")
    return len(layers)


def _gemma_dims(shapes: dict, prefix: str, width: int) -> GemmaDims:
    """Widths from the tensors; pi0.5 uses one KV head, so head_dim is k_proj's row count."""
    q = _shape(shapes, f"{prefix}0.self_attn.q_proj.weight")[0]
    head_dim = _shape(shapes, f"{prefix}0.self_attn.k_proj.weight")[0]
    if q % head_dim:
        raise CheckpointError(f"{prefix}0.self_attn: q_proj rows {q} are not a multiple of head_dim {head_dim}")
    mlp = _shape(shapes, f"{prefix}0.mlp.gate_proj.weight")[0]
    return GemmaDims(width=width, depth=_depth(shapes, prefix), mlp_dim=mlp, num_heads=q // head_dim, num_kv_heads=1, head_dim=head_dim)


def _dims_from_shapes(shapes: dict) -> dict:
    lm = shapes.get(f"model.{P}paligemma.lm_head.weight") or _shape(
        shapes, f"model.{P}paligemma.model.language_model.embed_tokens.weight"
    )
    vocab, width = lm
    vlm = _gemma_dims(shapes, f"model.{P}paligemma.model.language_model.layers.", width)
    action_in = _shape(shapes, "model.action_in_proj.weight")
    expert = _gemma_dims(shapes, f"model.{P}gemma_expert.model.layers.", action_in[0])
    return {"vlm": vlm, "expert": expert, "vision": _vision_dims(shapes), "vocab_size": vocab, "action_dim": action_in[1]}


def _vision_dims(shapes: dict) -> VisionDims:
    vt = f"model.{P}paligemma.model.vision_tower.vision_model."
    width, _, patch, _ = _shape(shapes, f"{vt}embeddings.patch_embedding.weight")
    positions = _shape(shapes, f"{vt}embeddings.position_embedding.weight")[0]
    side = math.isqrt(positions)
    if side * side != positions:
        raise CheckpointError(f"vision position embedding has {positions} rows, not a square grid of patches")
    depth = _depth(shapes, f"{vt}encoder.layers.")
    mlp = _shape(shapes, f"{vt}encoder.layers.0.mlp.fc1.weight")[0]
    # The head count leaves no trace in the tensor shapes: take it from a known tower with these dims, else
    # assume So400m's head_dim of 72.
    for known in [SO400M, *(c.vision for c in BUILTIN.values())]:
        if (known.width, known.depth, known.mlp_dim, known.patch_size) == (width, depth, mlp, patch):
            heads = known.num_heads
            break
    else:
        if width % SO400M_HEAD_DIM:
            raise CheckpointError(
                f"cannot infer the SigLIP head count for vision width {width} (not a known tower, not a multiple of "
                f"{SO400M_HEAD_DIM}); pass config= to load_pretrained"
            )
        heads = width // SO400M_HEAD_DIM
    return VisionDims(width=width, depth=depth, mlp_dim=mlp, num_heads=heads, patch_size=patch, image_size=side * patch)


# ------------------------------------------------------------------------------------------------ save
def save_pretrained(
    model: PI05Model,
    directory: str | Path,
    norm_stats: dict[str, NormStats] | None = None,
    *,
    n_action_steps: int | None = None,
    normalization: dict[str, str] | None = None,
    replan_steps: int | None = None,
    noise_scale: float | list[float] | tuple[float, ...] | None = None,
    language_tasks: list | tuple | None = None,
) -> Path:
    """Write config.json (lerobot's fields plus our exact config under `oxygen_gym`) and model.safetensors in
    lerobot's key layout; with `norm_stats` (default: `model.norm_stats`), lerobot's processor stat files too.

    What our own family reads back (policies/checkpoints): the whole PI05Config (dims, image slots, chunk =
    `action_horizon`, `discrete_state`, `state_pad_to`, `max_token_len`), `n_action_steps` (actions act() returns;
    default the whole chunk), `normalization_mapping` (`normalization`, e.g. {"STATE": "MEAN_STD"}; default
    QUANTILES for both), applied with openpi's formulas, and `replan_steps` (actions an evaluation executes per
    policy call unless told otherwise; policies/checkpoints/replan_steps.py) and `noise_scale` (the action head's
    starting noise, one number or one per action dim, unless told otherwise; policies/checkpoints/noise_scale.py),
    and `language_tasks` (the prompts its language path answers, maps or `LanguageTask`s with name, prompt,
    max_new_tokens[, adapter]; policies/checkpoints/language_tasks.py)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    save_file(to_checkpoint(model), str(root / WEIGHTS_FILE), metadata={"format": "pt"})
    config = lerobot_config(model)
    chunk = model.config.action_horizon
    if n_action_steps is not None:
        if isinstance(n_action_steps, bool) or not isinstance(n_action_steps, int) or not 1 <= n_action_steps <= chunk:
            raise ValueError(f"n_action_steps must be an int in 1..{chunk} (the chunk), got {n_action_steps!r}")
        config["n_action_steps"] = n_action_steps
    if replan_steps is not None:
        returned = config.get("n_action_steps", chunk)
        check_replan_steps(replan_steps, returned)
        config["replan_steps"] = replan_steps
    if noise_scale is not None:
        config["noise_scale"] = check_declared_noise_scale(noise_scale, model.config.action_dim)
    if language_tasks is not None:
        config["language_tasks"] = check_language_tasks(language_tasks)
    if normalization:
        unknown = sorted(set(normalization) - {"STATE", "ACTION"})
        if unknown:
            raise ValueError(f"normalization: keys must be STATE and/or ACTION, got {unknown}")
        bad = {k: v for k, v in normalization.items() if v not in ("IDENTITY", "MEAN_STD", "QUANTILES")}
        if bad:
            raise ValueError(f"normalization: {bad}; our checkpoints use IDENTITY, MEAN_STD or QUANTILES (openpi's formulas)")
        config["normalization_mapping"] = {**config["normalization_mapping"], **normalization}
    (root / CONFIG_FILE).write_text(json.dumps(config, indent=4))
    stats = norm_stats if norm_stats is not None else getattr(model, "norm_stats", None)
    if stats:
        write_lerobot_stats(
            root, stats, {**config["input_features"], **config["output_features"]}, config["normalization_mapping"],
            max_token_len=model.config.max_token_len,
        )
    return root


def check_replan_steps(value: object, returned: int | None, field: str = "replan_steps") -> None:
    """The rule for a declared execution horizon: an int >= 1, and at most the actions a call returns where that is
    known (a training config is checked before its model exists, then again once it does)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (returned is not None and value > returned):
        bound = ">= 1 (actions executed per policy call)" if returned is None else f"in 1..{returned} (the actions returned)"
        raise ValueError(f"{field} must be an int {bound}, got {value!r}")


def check_declared_noise_scale(value: object, action_dim: int) -> float | list[float]:
    """A noise scale fit for config.json: the sampler's rule (model/noise_rule.py) and at most `action_dim` scales."""
    try:
        scale = check_noise_scale(value)
    except ValueError:
        scale = None
    if scale is None or isinstance(scale, tuple) and len(scale) > action_dim:
        raise ValueError(f"noise_scale must be a number >= 0 or a list of 1..{action_dim} of them (one per action "
                         f"dim), got {value!r}")
    return list(scale) if isinstance(scale, tuple) else scale


def _variant_name(dims: GemmaDims, default: str) -> str:
    return next((name for name, v in VARIANTS.items() if v == dims), default)


def lerobot_config(model: PI05Model) -> dict:
    """lerobot's PI05Config fields for this model. Variant names are lerobot's labels (reduced dims keep the
    nearest real label, as lerobot's own test fixture does); the exact dims are under `oxygen_gym`."""
    c = model.config
    size = c.vision.image_size
    features = {f"{IMAGE_PREFIX}{slot}": {"type": "VISUAL", "shape": [3, size, size]} for slot in c.image_slots}
    features["observation.state"] = {"type": "STATE", "shape": [32]}
    return {
        "type": "pi05",
        "n_obs_steps": 1,
        "input_features": features,
        "output_features": {"action": {"type": "ACTION", "shape": [c.action_dim]}},
        "device": str(model.device.type),
        "paligemma_variant": _variant_name(c.vlm, "gemma_2b"),
        "action_expert_variant": _variant_name(c.expert, "gemma_300m"),
        "dtype": "bfloat16" if model.dtype == torch.bfloat16 else "float32",
        "chunk_size": c.action_horizon,
        "n_action_steps": c.action_horizon,
        "max_state_dim": 32,
        "max_action_dim": c.action_dim,
        "num_inference_steps": c.num_steps,
        "min_period": c.min_period,
        "max_period": c.max_period,
        "image_resolution": [size, size],
        "empty_cameras": 0,
        "tokenizer_max_length": c.max_token_len,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"},
        OUR_KEY: c.to_json(),
    }
