"""Load a Qwen3-VL backbone from safetensors: a transformers folder (config.json + model.safetensors, or shards
listed by model.safetensors.index.json), or a family checkpoint that nests the backbone under a prefix
(Xiaomi-Robotics-0: `vlm.*`, its head tied and omitted).

Strict: a missing or unexpected backbone key raises ValueError naming the keys and the file, so a renamed
checkpoint never loads half-random. Keys outside the prefix belong to the family and are left alone.
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from transformers import Qwen3VLConfig

from ..safetensors_folder import INDEX as INDEX_FILE
from ..safetensors_folder import key_files, weight_files

HEAD_KEY = "lm_head.weight"


def checkpoint_keys(folder: Path) -> tuple[Path, dict[str, Path]]:
    """(the file that names the keys: the index or the single file, {key: safetensors file holding it}), found as
    transformers finds them (model/safetensors_folder.py): other safetensors files in the folder are not read."""
    shards, weight_map = weight_files(folder)
    return (folder / INDEX_FILE if weight_map else folder / shards[0]), key_files(folder)


def read_prefixed(folder: Path, prefix: str) -> tuple[Path, dict[str, Path], dict[str, torch.Tensor]]:
    """The tensors under `prefix`, keyed without it; also where the keys were listed and which file holds each."""
    named_in, where = checkpoint_keys(folder)
    mine = {k[len(prefix):]: f for k, f in where.items() if k.startswith(prefix)}
    by_file: dict[Path, list[str]] = {}
    for key, f in mine.items():  # the index decides where a key lives
        by_file.setdefault(f, []).append(key)
    tensors: dict[str, torch.Tensor] = {}
    for f, keys in sorted(by_file.items()):
        with safe_open(str(f), framework="pt") as h:
            tensors.update({key: h.get_tensor(prefix + key) for key in keys})
    return named_in, mine, tensors


def _names(keys, prefix: str, limit: int = 8) -> str:
    keys = sorted(keys)
    shown = ", ".join(prefix + k for k in keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def load_backbone(
    backbone: type[nn.Module], folder: Path, device, dtype: torch.dtype | None, prefix: str = "",
    config: Qwen3VLConfig | None = None,
) -> nn.Module:
    """Build `backbone` (the `Qwen3VLBackbone` class, passed in: it imports this module to load itself) on the meta
    device, check the keys, assign the stored tensors, then move (and cast, if `dtype`)."""
    config = config if config is not None else Qwen3VLConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = backbone(config)
    named_in, where, tensors = read_prefixed(folder, prefix)
    expected = set(model.state_dict())
    tied = model.spec.tie_word_embeddings
    if tied:  # transformers ignores a stored head when tied (tie_weights after loading): so do we
        tensors.pop(HEAD_KEY, None)
        expected.discard(HEAD_KEY)
    missing, unexpected = expected - tensors.keys(), tensors.keys() - expected
    if missing:
        raise ValueError(f"missing key(s) {_names(missing, prefix)} in {named_in}")
    if unexpected:
        files = sorted({str(where[k]) for k in unexpected})
        raise ValueError(f"unexpected key(s) {_names(unexpected, prefix)} in {', '.join(files)}")
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    for key, value in tensors.items():
        want = shapes[key]
        if value.shape != want:
            raise ValueError(f"{prefix}{key} in {where[key]} has shape {tuple(value.shape)}, the config needs {tuple(want)}")
    model.load_state_dict(tensors, strict=False, assign=True)
    model.tie_weights()  # assign replaced the shared Parameter
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()
