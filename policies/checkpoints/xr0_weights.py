"""An XR0 folder's weights as its safetensors headers list them (no tensor is read), checked against the keys the
config needs in the published layout (model/xr0/xr0_checkpoint.py): so a missing, unexpected or mis-shaped key is
named with the shard it is (or should be) in, before a long load, and `inspect` can count them."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from oxygen_gym.model.xr0.xr0_checkpoint import (
    BACKBONE_PREFIX,
    INDEX,
    SINGLE,
    TIED_HEAD,
    CheckpointKeyError,
    expected_backbone_shapes,
    expected_expert_shapes,
)
from oxygen_gym.model.xr0.xr0_config import XR0Config


@dataclass(frozen=True)
class TensorHeader:
    shard: str  # file name inside the folder
    shape: tuple[int, ...]
    dtype: str


def weight_files(root: Path) -> tuple[list[str], dict[str, str]]:
    """(shard file names, key -> shard the index assigns it; {} for one model.safetensors)."""
    index = root / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as err:
            raise CheckpointKeyError(f"{index} is not a safetensors index (no 'weight_map'): {err}") from err
        return sorted(set(weight_map.values())), dict(weight_map)
    if (root / SINGLE).is_file():
        return [SINGLE], {}
    raise FileNotFoundError(f"no {INDEX} or {SINGLE} in {root}: an XR0 folder holds its weights in safetensors")


def read_headers(root: Path) -> dict[str, TensorHeader]:
    """key -> (shard, shape, dtype) over every shard; a key the index places in a shard that lacks it raises."""
    from safetensors import safe_open

    shards, weight_map = weight_files(root)
    out: dict[str, TensorHeader] = {}
    for shard in shards:
        path = root / shard
        if not path.is_file():
            raise FileNotFoundError(f"{root / INDEX} names the shard {shard}, which is not in {root}")
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for key in f.keys():
                s = f.get_slice(key)
                out[key] = TensorHeader(shard, tuple(s.get_shape()), s.get_dtype())
    for key, shard in weight_map.items():
        if key not in out:
            raise CheckpointKeyError(f"missing key {key!r}: {INDEX} places it in {root / shard}, which does not hold it")
        if out[key].shard != shard:
            raise CheckpointKeyError(f"{key!r} is in {root / out[key].shard}, but {INDEX} places it in {shard}")
    unlisted = sorted(k for k in out if weight_map and k not in weight_map)
    if unlisted:
        raise CheckpointKeyError(f"{INDEX} does not list {unlisted[:5]} (in {root / out[unlisted[0]].shard})")
    return out


def published_shapes(config: XR0Config) -> dict[str, tuple[int, ...]]:
    """Every key the published layout holds for `config`: `vlm.` + transformers' backbone names, the expert's at the
    top level. A tied LM head is not required (the published file omits it)."""
    tied = config.backbone.get("tie_word_embeddings", True)
    out = {BACKBONE_PREFIX + k: tuple(v) for k, v in expected_backbone_shapes(config).items()
           if not (tied and k == TIED_HEAD)}
    out.update({k: tuple(v) for k, v in expected_expert_shapes(config).items()})
    return out


def _recomputed(key: str) -> bool:
    """Buffers a file may carry that the loader recomputes and drops (xr0_checkpoint.split_state)."""
    return key.startswith("rotary_emb.") or "rotary_emb." in key or key == BACKBONE_PREFIX + TIED_HEAD


def check_published_keys(root: Path, config: XR0Config, headers: dict[str, TensorHeader]) -> None:
    """Raise naming the first missing / unexpected / mis-shaped keys and the shard files concerned."""
    want = published_shapes(config)
    missing = sorted(set(want) - set(headers))
    if missing:
        shards = sorted({h.shard for h in headers.values()})
        raise CheckpointKeyError(f"XR0 checkpoint {root}: missing key(s) {missing[:5]}"
                                 f"{f' ({len(missing)} in all)' if len(missing) > 5 else ''}: in none of its shards "
                                 f"{shards}")
    unexpected = sorted(k for k in set(headers) - set(want) if not _recomputed(k))
    if unexpected:
        raise CheckpointKeyError(f"XR0 checkpoint {root}: unexpected key(s) {unexpected[:5]} in "
                                 f"{sorted({headers[k].shard for k in unexpected})}: not an XR0 module of this "
                                 f"config.json")
    for key, shape in want.items():
        if headers[key].shape != shape:
            raise CheckpointKeyError(f"XR0 checkpoint {root}: {key} in {headers[key].shard} has shape "
                                     f"{headers[key].shape}, config.json needs {shape}")
