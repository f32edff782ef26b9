"""A checkpoint folder's safetensors weights, found as transformers finds them: `model.safetensors.index.json` (whose
`weight_map` names each key's shard) or else one `model.safetensors`. Any other safetensors file in the folder (a
PEFT adapter, saved inputs, norm statistics) is not the model's and is never read as part of it. Every family's
loader and inspect report reads weights through here, so sharding is handled once, below the families."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


class CheckpointKeyError(KeyError):
    """A checkpoint whose keys do not match the model (or whose index does not match its shards): the message names
    the keys and the file."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class TensorHeader:
    shard: str  # file name inside the folder
    shape: tuple[int, ...]
    dtype: str


def weight_files(folder: Path) -> tuple[list[str], dict[str, str]]:
    """(the model's shard file names, key -> shard as the index assigns it; {} for one model.safetensors)."""
    folder = Path(folder)
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointKeyError(f"{index} is not a safetensors index (no 'weight_map'): {err}") from err
        return sorted(set(weight_map.values())), dict(weight_map)
    if (folder / SINGLE).is_file():
        return [SINGLE], {}
    raise FileNotFoundError(f"no {INDEX} or {SINGLE} in {folder}")


def _open_shards(folder: Path, shards: list[str]) -> Iterator[tuple[str, Any]]:
    """(shard name, open safetensors handle) for each of the model's shards in order; a shard the index names but the
    folder lacks raises naming it."""
    from safetensors import safe_open

    for shard in shards:
        path = folder / shard
        if not path.is_file():
            raise FileNotFoundError(f"{folder / INDEX} names the shard {shard}, which is not in {folder}")
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            yield shard, handle


def read_headers(folder: Path) -> dict[str, TensorHeader]:
    """key -> (shard, shape, dtype) over every shard, no tensor read; a key the index places in a shard that lacks it,
    or finds elsewhere, raises naming both."""
    folder = Path(folder)
    shards, weight_map = weight_files(folder)
    out: dict[str, TensorHeader] = {}
    for shard, f in _open_shards(folder, shards):
        for key in f.keys():
            s = f.get_slice(key)
            out[key] = TensorHeader(shard, tuple(s.get_shape()), s.get_dtype())
    for key, shard in weight_map.items():
        if key not in out:
            raise CheckpointKeyError(f"missing key {key!r}: {INDEX} places it in {folder / shard}, which does not hold it")
        if out[key].shard != shard:
            raise CheckpointKeyError(f"{key!r} is in {folder / out[key].shard}, but {INDEX} places it in {shard}")
    unlisted = sorted(k for k in out if weight_map and k not in weight_map)
    if unlisted:
        raise CheckpointKeyError(f"{INDEX} does not list {unlisted[:5]} (in {folder / out[unlisted[0]].shard})")
    return out


def key_files(folder: Path) -> dict[str, Path]:
    """key -> the file holding it (from the index when there is one, else the single file's header)."""
    folder = Path(folder)
    shards, weight_map = weight_files(folder)
    if weight_map:
        return {k: folder / f for k, f in weight_map.items()}
    return {k: folder / h.shard for k, h in read_headers(folder).items()}


def load_tensors(folder: Path, prefix: str = "") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor whose key starts with `prefix` (keys kept whole), and key -> file; an index and shards that
    disagree raise naming the keys."""
    folder = Path(folder)
    shards, weight_map = weight_files(folder)
    state: dict[str, torch.Tensor] = {}
    where: dict[str, str] = {}
    for shard, f in _open_shards(folder, shards):
        for key in f.keys():
            if weight_map and key not in weight_map:
                raise CheckpointKeyError(f"{folder / INDEX}: index and shards disagree on {[key]}")
            if key.startswith(prefix):
                state[key] = f.get_tensor(key)
                where[key] = str(folder / shard)
    if weight_map:
        missing = sorted(k for k in weight_map if k.startswith(prefix) and k not in state)
        if missing:
            raise CheckpointKeyError(f"{folder / INDEX}: index and shards disagree on {missing[:5]}")
    return state, where
