"""An XR0 folder's weights as its safetensors headers list them (no tensor is read: model/safetensors_folder.py),
checked against the keys the config needs in the published layout (model/xr0/xr0_checkpoint.py): so a missing,
unexpected or mis-shaped key is named with the shard it is (or should be) in, before a long load, and `inspect` can
count them."""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.safetensors_folder import (  # noqa: F401 - read_headers, weight_files: this module's API
    CheckpointKeyError,
    TensorHeader,
    read_headers,
    weight_files,
)
from oxygen_gym.model.xr0.xr0_checkpoint import BACKBONE_PREFIX, TIED_HEAD, expected_backbone_shapes, expected_expert_shapes
from oxygen_gym.model.xr0.xr0_config import XR0Config


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
