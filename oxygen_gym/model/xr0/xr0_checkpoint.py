"""The published XR0 checkpoint layout: read it, split it into (backbone, expert) state dicts, and write it.

A folder holds `config.json` (MiBoTConfig: `vlm_config` = a Qwen3VLConfig dict, `dit_config`, `action_length`,
`action_dim`, `state_dim`), `preprocessor_config.json` (xr0_stats.py) and safetensors shards with
`model.safetensors.index.json`. The state dict is the top-level module's (modeling_mibot.py
`MiBoTForActionGeneration`, XR0.py `XR0`): `vlm.` + transformers' Qwen3VLForConditionalGeneration names
(`vlm.model.visual.*`, `vlm.model.language_model.*`), with the tied `vlm.lm_head.weight` omitted
(rosmontis2005 `xr0/mibot/utils/orchard_checkpoint.py` restores it from `embed_tokens`); the expert's modules at the
top level (`dit.*`, `t_embedder.*`, `t_projector.*`, `state_projector.*`, `action_projector.*`,
`action_output_layer.*`, `sink.weight`). `rotary_emb.*` buffers, if a file has them, are recomputed and dropped
(physical-ai-studio `pretrained_utils.py` `_DROP_PREFIXES`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..safetensors_folder import INDEX, SINGLE, CheckpointKeyError, load_tensors  # noqa: F401 - re-exported
from .xr0_config import DiTDims, XR0Config

BACKBONE_PREFIX = "vlm."
EXPERT_MODULES = ("dit", "t_embedder", "t_projector", "state_projector", "action_projector", "action_output_layer",
                  "sink")
TIED_HEAD = "lm_head.weight"
EMBED = "model.language_model.embed_tokens.weight"




@dataclass
class XR0Checkpoint:
    config: XR0Config
    backbone: dict[str, torch.Tensor]  # transformers' names: model.visual.*, model.language_model.*, lm_head.weight
    expert: dict[str, torch.Tensor]  # XR0ActionExpert's names
    path: Path


# ---------------------------------------------------------------- config.json
def config_to_json(config: XR0Config) -> dict:
    """MiBoTConfig's fields (what modeling_mibot.py reads), plus our mask conventions under `oxygen_gym`."""
    d = config.dit
    return {
        "architectures": ["MiBoTForActionGeneration"],
        "model_type": "mibot",
        "vlm_config": config.backbone,
        "dit_config": {"hidden_size": d.width, "head_dim": d.head_dim, "num_key_value_heads": d.kv_heads,
                       "num_hidden_layers": d.depth},
        "action_length": config.horizon,
        "action_dim": config.action_dim,
        "state_dim": config.state_dim,
        "oxygen_gym": {"window": config.window, "position_gap": config.position_gap, "num_steps": config.num_steps,
                       "state_len": config.state_len, "image_size": config.image_size, "max_images": config.max_images,
                       "max_prompt_tokens": config.max_prompt_tokens},
    }


def config_from_json(d: dict, **overrides) -> XR0Config:
    """An XR0Config from a published config.json. Without our `oxygen_gym` block, the masks default to the
    checkpoint's own inference code (plain causal, no gap: modeling_mibot.py `forward`)."""
    dit = d["dit_config"]
    width, head_dim = dit["hidden_size"], dit["head_dim"]
    dims = DiTDims(depth=dit["num_hidden_layers"], width=width, heads=width // head_dim,
                   kv_heads=dit["num_key_value_heads"], head_dim=head_dim, mlp_dim=4 * width)
    ours = {"window": None, "position_gap": 0, **d.get("oxygen_gym", {})}
    fields = dict(backbone=d["vlm_config"], dit=dims, read_layers=dims.depth, horizon=d["action_length"],
                  action_dim=d["action_dim"], state_dim=d["state_dim"], **ours)
    fields.update(overrides)
    return XR0Config(**fields)


# ---------------------------------------------------------------- reading
def read_state(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of a checkpoint folder (sharded with an index, or one model.safetensors), and key -> file."""
    return load_tensors(Path(path))


def split_state(
    state: dict[str, torch.Tensor], where: dict[str, str] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(backbone, expert) from the published top-level state dict; a key belonging to neither raises, naming it
    and its file. The omitted tied LM head is restored from the token embeddings."""
    where = where or {}
    backbone, expert = {}, {}
    for key, value in state.items():
        head = key.split(".", 1)[0]
        if key.startswith(BACKBONE_PREFIX):
            backbone[key[len(BACKBONE_PREFIX):]] = value
        elif head in EXPERT_MODULES:
            expert[key] = value
        elif head == "rotary_emb" or key.endswith("rotary_emb.inv_freq"):
            continue
        else:
            raise CheckpointKeyError(f"unexpected key {key!r} in {where.get(key, 'the checkpoint')}")
    backbone = {k: v for k, v in backbone.items() if "rotary_emb." not in k}
    if TIED_HEAD not in backbone and EMBED in backbone:
        backbone[TIED_HEAD] = backbone[EMBED]
    return backbone, expert


def check_keys(got: dict[str, torch.Tensor], expected: dict[str, torch.Size], what: str, source: str,
               where: dict[str, str] | None = None, prefix: str = "") -> None:
    """Raise naming the first missing / unexpected / mis-shaped keys (with the checkpoint's spelling)."""
    where = where or {}
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    if missing:
        raise CheckpointKeyError(f"{what}: missing key(s) {[prefix + k for k in missing[:5]]} in {source}")
    if unexpected:
        k = unexpected[0]
        raise CheckpointKeyError(f"{what}: unexpected key(s) {[prefix + k for k in unexpected[:5]]} in "
                                 f"{where.get(prefix + k, source)}")
    for k, shape in expected.items():
        if tuple(got[k].shape) != tuple(shape):
            raise CheckpointKeyError(f"{what}: {prefix + k} has shape {tuple(got[k].shape)}, the model "
                                     f"{tuple(shape)} (in {where.get(prefix + k, source)})")


def expected_backbone_shapes(config: XR0Config) -> dict[str, torch.Size]:
    """transformers' Qwen3VLForConditionalGeneration keys and shapes for `config` (built on the meta device)."""
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config.qwen3vl_config())
    return {k: v.shape for k, v in model.state_dict().items()}


def expected_expert_shapes(config: XR0Config) -> dict[str, torch.Size]:
    from .action_expert import XR0ActionExpert

    with torch.device("meta"):
        expert = XR0ActionExpert(config)
    return {k: v.shape for k, v in expert.state_dict().items()}


def load_xr0_checkpoint(path: str | Path, *, check_backbone: bool = True, **config_overrides) -> XR0Checkpoint:
    """Read a published XR0 folder into (config, backbone state, expert state), every key checked."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"no config.json in {path}")
    config = config_from_json(json.loads(cfg_file.read_text()), **config_overrides)
    state, where = read_state(path)
    backbone, expert = split_state(state, where)
    check_keys(expert, expected_expert_shapes(config), "action expert", str(path), where)
    if check_backbone:
        check_keys(backbone, expected_backbone_shapes(config), "backbone", str(path), where, BACKBONE_PREFIX)
    return XR0Checkpoint(config, backbone, expert, path)


# ---------------------------------------------------------------- writing
def save_xr0_checkpoint(
    path: str | Path,
    config: XR0Config,
    backbone: dict[str, torch.Tensor],
    expert: dict[str, torch.Tensor],
    *,
    shard_bytes: int = 5 * 2**30,
    preprocessor: dict | None = None,
) -> Path:
    """Write the published layout: `vlm.`-prefixed backbone without the tied head, top-level expert keys,
    safetensors shards of at most `shard_bytes` (one tensor may exceed it) with an index, and config.json."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tied = config.backbone.get("tie_word_embeddings", True)  # the published model ties; untied built-ins keep theirs
    state = {BACKBONE_PREFIX + k: v for k, v in backbone.items() if k != TIED_HEAD or not tied}
    state.update(expert)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in state:
        n = state[key].numel() * state[key].element_size()
        if shards[-1] and size + n > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = state[key].contiguous()
        size += n
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(v.numel() * v.element_size() for v in state.values())
    (path / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (path / "config.json").write_text(json.dumps(config_to_json(config), indent=2))
    if preprocessor is not None:
        (path / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
    return path
