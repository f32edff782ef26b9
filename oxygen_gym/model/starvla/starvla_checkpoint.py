"""StarVLA's run-folder layout (StarVLA `starVLA/model/framework/base_framework.py` `from_pretrained`,
`share_tools.py` `read_mode_config`, commit 0ed0aad): read it into a `StarVLAConfig` and per-module state dicts, and
write it (tests, conversions).

    RUN/config.yaml               the training config: `framework.name`, `framework.qwenvl.base_vlm` (the backbone, by
                                  hub id or path: its config.json is not in the run), `framework.action_model`
    RUN/dataset_statistics.json   {unnorm_key: {"action": {min, max, q01, q99, mean, std, mask}, "state": ...}}
    RUN/checkpoints/NAME.pt | NAME.safetensors   one state dict of the whole framework

The state dict is the framework module's: `qwen_vl_interface.model.` + transformers' Qwen3VLForConditionalGeneration
names, `action_model.` + the head's names, and QwenPI_v3's per-layer projectors `project_layers.*`.

One head (StarVLA's own): `framework.name` is QwenPI_v3 (`pi`), QwenGR00T (`groot`) or QwenOFT (`oft`), its config
block `framework.action_model`, its keys `action_model.*`. Several heads on one backbone (oxygen-gym's extension, the
paper's E = 3, 4): `framework.action_heads: {pi: BLOCK, groot: BLOCK, oft: BLOCK}` (each block as that framework's
`action_model`) and each head's keys under its name, `action_model.pi.*`, `action_model.groot.*`,
`action_model.oft.*` (`project_layers.*` stays pi's).

The `groot` head here is GR00T N1.5's as lerobot 0.4.4 ships it (embodiment-specific encoders, vlln + self-attention;
groot_head.py); StarVLA's own QwenGR00T head (`GR00T_ActionHeader.py`: plain MLP encoders, no vlln) has other
modules, and such a checkpoint is refused by name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..safetensors_folder import CheckpointKeyError
from .starvla_config import HEAD_NAMES, GR00TDims, OFTDims, PIDims, StarVLAConfig

CONFIG = "config.yaml"
STATS = "dataset_statistics.json"
CHECKPOINTS = "checkpoints"
BACKBONE_PREFIX = "qwen_vl_interface.model."
PROJECTORS = "project_layers."
FRAMEWORKS = {"QwenPI_v3": "pi", "QwenGR00T": "groot", "QwenOFT": "oft"}
TIED_HEAD = "lm_head.weight"
# keys a file may hold that no head here reads: QwenPI_v3 drops the raw state before its action model
# (QwenPI_v3.py `predict_action`: `state = None`), so its LayerwiseFM `state_encoder` is never run
UNUSED = {"pi": ("state_encoder.",)}
STARVLA_GROOT_ONLY = ("action_encoder.layer1.weight", "action_decoder.layer1.weight")  # plain nn.Linear encoders
DIT_SIZES = {"DiT-B": (768, 64), "DiT-L": (1536, 48)}  # GR00T_ActionHeader.py DiTConfig: width, head_dim


def head_prefixes(heads: tuple[str, ...], single: bool) -> dict[str, str]:
    """Each head's key prefix in the file (module docstring)."""
    return {h: "action_model." if single else f"action_model.{h}." for h in heads}


@dataclass
class StarVLARun:
    """What a run folder says, before any weight is read."""

    root: Path
    yaml: dict[str, Any]
    heads: tuple[str, ...]  # in the file's order
    blocks: dict[str, dict[str, Any]]  # head -> its action_model block
    single: bool  # StarVLA's own one-head layout
    weights: Path
    base_vlm: str
    framework: str


def weights_file(root: Path) -> Path:
    folder = root / CHECKPOINTS
    files = sorted([*folder.glob("*.pt"), *folder.glob("*.safetensors")]) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"StarVLA run {root}: no {CHECKPOINTS}/*.pt or *.safetensors (the framework's state "
                                f"dict, base_framework.py from_pretrained)")
    if len(files) > 1:
        raise ValueError(f"StarVLA run {root}: several weight files {[f.name for f in files]}; pass the file itself "
                         f"(RUN/{CHECKPOINTS}/NAME.pt) to choose one")
    return files[0]


def is_starvla_run(root: Path) -> bool:
    """A folder (or a file inside RUN/checkpoints/) with config.yaml naming a framework and its weights."""
    root = run_root(root)
    return (root / CONFIG).is_file() and (root / CHECKPOINTS).is_dir()


def run_root(path: Path) -> Path:
    """RUN for RUN itself or RUN/checkpoints/NAME.pt (StarVLA's from_pretrained takes the file)."""
    path = Path(path)
    if path.is_file() and path.parent.name == CHECKPOINTS:
        return path.parents[1]
    return path


def read_run(path: Path) -> StarVLARun:
    """config.yaml's framework section, the heads it holds and the weight file; raises naming what is wrong."""
    import yaml  # StarVLA writes config.yaml with OmegaConf: plain YAML, interpolations resolved

    path = Path(path)
    root = run_root(path)
    file = root / CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"StarVLA run {root}: no {CONFIG} (share_tools.py read_mode_config reads it)")
    cfg = yaml.safe_load(file.read_text()) or {}
    if not isinstance(cfg, dict):
        raise ValueError(f"{file}: expected a mapping, got {type(cfg).__name__}")
    fw = cfg.get("framework") or {}
    name = str(fw.get("name", ""))
    if "action_heads" in fw:
        blocks = dict(fw["action_heads"])
        single = False
    elif name in FRAMEWORKS:
        blocks = {FRAMEWORKS[name]: dict(fw.get("action_model") or {})}
        single = True
    else:
        raise ValueError(f"{file}: framework.name {name!r} is not one of {sorted(FRAMEWORKS)}, and there is no "
                         f"framework.action_heads {{pi | groot | oft: action_model block}}")
    unknown = [h for h in blocks if h not in HEAD_NAMES]
    if unknown or not blocks:
        raise ValueError(f"{file}: framework.action_heads names unknown head(s) {unknown}; expected some of "
                         f"{list(HEAD_NAMES)}")
    base = (fw.get("qwenvl") or {}).get("base_vlm")
    if not base:
        raise ValueError(f"{file}: no framework.qwenvl.base_vlm (the backbone's hub id or folder)")
    weights = path if path.is_file() else weights_file(root)
    return StarVLARun(root, cfg, tuple(blocks), blocks, single, weights, str(base), name or "action_heads")


# ---------------------------------------------------------------- config
def _get(block: dict, key: str, default):
    value = block.get(key)
    return default if value is None else value


def _horizon(block: dict, default: int) -> int:
    """`action_horizon`, or a legacy `future_action_window_size` + 1 (share_tools.py apply_config_compat)."""
    if block.get("action_horizon") is not None:
        return int(block["action_horizon"])
    if block.get("future_action_window_size") is not None:
        return int(block["future_action_window_size"]) + 1
    return default


def pi_dims(block: dict, width: int) -> PIDims:
    """QwenPI_v3DefaultConfig's action_model defaults under the block's values (QwenPI_v3.py)."""
    dit = block.get("diffusion_model_cfg") or {}
    d = PIDims()
    return PIDims(width=int(_get(dit, "action_dit_hidden_dim", width)), head_dim=int(_get(dit, "attention_head_dim", 64)),
                  horizon=_horizon(block, 16), num_steps=int(_get(block, "num_inference_timesteps", 4)),
                  future_tokens=int(_get(block, "num_target_vision_tokens", 32)),
                  max_seq_len=int(_get(block, "max_seq_len", 1024)), output_dim=int(_get(dit, "output_dim", d.output_dim)),
                  interleave_self_attention=bool(_get(dit, "interleave_self_attention", False)),
                  timestep_buckets=int(_get(block, "num_timestep_buckets", 1000)))


def groot_dims(block: dict) -> GR00TDims:
    """GR00T N1.5's head (lerobot names) from a QwenGR00T-style block: DiT-B/L sizes, `hidden_size`, `state_dim`,
    `max_num_embodiments`, `embodiment_id`, `use_vlln` + `vl_self_attention_cfg`."""
    dit = block.get("diffusion_model_cfg") or {}
    kind = _get(block, "action_model_type", "DiT-B")
    if kind not in DIT_SIZES:
        raise ValueError(f"groot: action_model_type {kind!r}; expected one of {sorted(DIT_SIZES)}")
    width, head_dim = DIT_SIZES[kind]
    vl = block.get("vl_self_attention_cfg") or {}
    vlln = bool(_get(block, "use_vlln", True))
    return GR00TDims(width=int(_get(dit, "input_embedding_dim", width)), head_dim=int(_get(dit, "attention_head_dim", head_dim)),
                     depth=int(_get(dit, "num_layers", 16)), hidden=int(_get(block, "hidden_size", 1024)),
                     horizon=_horizon(block, 8), num_steps=int(_get(block, "num_inference_timesteps", 4)),
                     future_tokens=int(_get(block, "num_target_vision_tokens", 32)),
                     max_seq_len=int(_get(block, "max_seq_len", 1024)), max_state_dim=int(_get(block, "state_dim", 64)),
                     num_embodiments=int(_get(block, "max_num_embodiments", 32)),
                     embodiment_id=int(_get(block, "embodiment_id", 0)),
                     vl_layers=int(_get(vl, "num_layers", 4)) if vlln else 0,
                     vl_head_dim=int(_get(vl, "attention_head_dim", 64)))


def backbone_from_folder(folder: Path) -> dict[str, Any]:
    """The Qwen3-VL config dict of a backbone folder's config.json (transformers' Qwen3VLConfig fields)."""
    file = Path(folder) / "config.json"
    d = json.loads(file.read_text())
    if "text_config" not in d or "vision_config" not in d:
        raise ValueError(f"{file} is not a Qwen3-VL config (no text_config / vision_config)")
    keep = ("text_config", "vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
            "vision_end_token_id", "tie_word_embeddings")
    return {k: d[k] for k in keep if k in d}


def config_from_run(run: StarVLARun, backbone: dict[str, Any], *, query_token: int, state_dim: int,
                    heads: tuple[str, ...] | None = None) -> StarVLAConfig:
    """The model of `run` with `backbone` (its base_vlm's config), keeping `heads` (None: all the file holds)."""
    keep = run.heads if heads is None else tuple(heads)
    unknown = [h for h in keep if h not in run.heads]
    if unknown:
        raise ValueError(f"heads: {run.root} holds the head(s) {list(run.heads)}, not {unknown}")
    width = int(backbone["text_config"]["hidden_size"])
    dims: dict[str, Any] = {}
    action_dims = {h: int(run.blocks[h]["action_dim"]) for h in run.heads if run.blocks[h].get("action_dim") is not None}
    if len(set(action_dims.values())) > 1:
        raise ValueError(f"{run.root / CONFIG}: the heads' action_dim differ {action_dims}; one model has one")
    if "pi" in run.blocks:
        dims["pi"] = pi_dims(run.blocks["pi"], width)
    if "groot" in run.blocks:
        dims["groot"] = groot_dims(run.blocks["groot"])
    if "oft" in run.blocks:
        dims["oft"] = OFTDims(horizon=_horizon(run.blocks["oft"], 8), query_token=query_token)
    data = (run.yaml.get("datasets") or {}).get("vla_data") or {}
    # the keys StarVLA's server reports as the training image size (deployment/model_server/policy_wrapper.py)
    size = data.get("obs_image_size") or data.get("image_size") or (data.get("default_image_resolution") or [])[-2:]
    size = size or [224, 224]
    image = int(size[0] if isinstance(size, (list, tuple)) else size)
    return StarVLAConfig(backbone, heads=keep, action_dim=next(iter(action_dims.values()), 7), state_dim=state_dim,
                         image_size=image, **dims)


# ---------------------------------------------------------------- weights
def read_state(file: Path) -> dict[str, torch.Tensor]:
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(file))
    state = torch.load(str(file), map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointKeyError(f"{file} holds a {type(state).__name__}, not a state dict")
    return state


def expected_shapes(config: StarVLAConfig, single: bool) -> dict[str, tuple[int, ...]]:
    """Every key of the layout for `config` (file names), built on the meta device."""
    from .starvla_model import StarVLAModel

    with torch.device("meta"):
        model = StarVLAModel(config)
    out = {BACKBONE_PREFIX + k: tuple(v.shape) for k, v in model.vlm.state_dict().items()}
    for head, prefix in head_prefixes(config.heads, single).items():
        for k, v in model.heads[head].state_dict().items():
            out[(k if k.startswith(PROJECTORS) else prefix + k)] = tuple(v.shape)
    return out


def _optional(key: str, config: StarVLAConfig) -> bool:
    return key == BACKBONE_PREFIX + TIED_HEAD and config.backbone.get("tie_word_embeddings", True)


def _droppable(key: str, run: StarVLARun) -> bool:
    """Keys a file may hold that no module here reads (UNUSED; recomputed rotary buffers)."""
    for head, prefix in head_prefixes(run.heads, run.single).items():
        if key.startswith(prefix) and key[len(prefix):].startswith(UNUSED.get(head, ())):
            return True
    return key.endswith("rotary_emb.inv_freq")


def check_keys(run: StarVLARun, config_all: StarVLAConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """`shapes`: the file's key -> shape. Raise naming the first missing / unexpected / mis-shaped keys and the head
    (or backbone) they belong to; `config_all` holds every head of the file."""
    want = expected_shapes(config_all, run.single)
    missing = sorted(k for k in set(want) - set(shapes) if not _optional(k, config_all))
    if missing:
        who = _owner(missing[0], run)
        hint = ""
        if who == "groot" and any(k.endswith(STARVLA_GROOT_ONLY) for k in shapes):
            hint = (" (this is StarVLA's own QwenGR00T head, GR00T_ActionHeader.py, with plain MLP encoders; the "
                    "groot head here is GR00T N1.5's as lerobot 0.4.4 ships it)")
        raise CheckpointKeyError(f"StarVLA run {run.root}: {who}: missing key(s) {missing[:5]}"
                                 f"{f' ({len(missing)} in all)' if len(missing) > 5 else ''} in {run.weights.name}{hint}")
    unexpected = sorted(k for k in set(shapes) - set(want) if not _droppable(k, run))
    if unexpected:
        raise CheckpointKeyError(f"StarVLA run {run.root}: unexpected key(s) {unexpected[:5]} in {run.weights.name}: "
                                 f"no module of {run.framework} with heads {list(run.heads)} has them")
    for k, shape in want.items():
        if k in shapes and tuple(shapes[k]) != shape:
            raise CheckpointKeyError(f"StarVLA run {run.root}: {_owner(k, run)}: {k} has shape {tuple(shapes[k])}, "
                                     f"{CONFIG} and the backbone's config need {shape}")


def _owner(key: str, run: StarVLARun) -> str:
    if key.startswith(BACKBONE_PREFIX):
        return "backbone"
    if key.startswith(PROJECTORS):
        return "pi"
    for head, prefix in head_prefixes(run.heads, run.single).items():
        if key.startswith(prefix):
            return head
    return "framework"


def split_state(state: dict[str, torch.Tensor], run: StarVLARun, heads: tuple[str, ...]
                ) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """(backbone state in transformers' names, head -> its module's state) for the kept `heads`."""
    backbone = {k[len(BACKBONE_PREFIX):]: v for k, v in state.items() if k.startswith(BACKBONE_PREFIX)}
    backbone = {k: v for k, v in backbone.items() if not k.endswith("rotary_emb.inv_freq")}
    per_head: dict[str, dict[str, torch.Tensor]] = {}
    for head, prefix in head_prefixes(run.heads, run.single).items():
        if head not in heads:
            continue
        sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        sub = {k: v for k, v in sub.items() if not k.startswith(UNUSED.get(head, ()))}
        if head == "pi":
            sub.update({k: v for k, v in state.items() if k.startswith(PROJECTORS)})
        per_head[head] = sub
    return backbone, per_head


# ---------------------------------------------------------------- writing
def state_of(model, single: bool) -> dict[str, torch.Tensor]:
    """A StarVLAModel's weights under the layout's names (the tied LM head left out, as safetensors needs)."""
    tied = model.config.backbone.get("tie_word_embeddings", True)
    out = {BACKBONE_PREFIX + k: v for k, v in model.vlm.state_dict().items() if not (tied and k == TIED_HEAD)}
    for head, prefix in head_prefixes(tuple(model.heads), single).items():
        for k, v in model.heads[head].state_dict().items():
            out[k if k.startswith(PROJECTORS) else prefix + k] = v
    return out


def save_run(root: Path, model, yaml_config: dict, statistics: dict, *, name: str = "steps_1000_pytorch_model.pt",
             single: bool | None = None) -> Path:
    """Write `model` as a run folder: `yaml_config` as config.yaml, `statistics` as dataset_statistics.json, the
    weights as checkpoints/NAME (.pt via torch.save, .safetensors via safetensors)."""
    import yaml

    root = Path(root)
    (root / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    single = len(model.heads) == 1 if single is None else single
    (root / CONFIG).write_text(yaml.safe_dump(yaml_config, sort_keys=False))
    (root / STATS).write_text(json.dumps(statistics, indent=1))
    state = {k: v.contiguous() for k, v in state_of(model, single).items()}
    path = root / CHECKPOINTS / name
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, str(path))
    return root
