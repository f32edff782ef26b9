"""Normaliser statistics of a checkpoint, read from either layout into one structure.

- lerobot: `policy_preprocessor.json` names a `normalizer_processor` step whose `state_file`
  (e.g. `policy_preprocessor_step_2_normalizer_processor.safetensors`) holds flat tensors `<feature>.<stat>`;
  `policy_postprocessor.json` does the same for the `unnormalizer_processor` (the action stats).
- openpi: `assets/<asset_id>/norm_stats.json` = `{"norm_stats": {key: {mean, std, q01, q99}}}`.

Keys are made canonical: lerobot's `observation.state` -> `state`, `action` -> `actions` (openpi's names); other
keys (e.g. camera stats) are kept as they are.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

STAT_NAMES = ("mean", "std", "q01", "q99", "min", "max", "q10", "q90")
_CANONICAL = {"observation.state": "state", "action": "actions"}
_LEROBOT_NAMES = {v: k for k, v in _CANONICAL.items()}
PREPROCESSOR = "policy_preprocessor"
POSTPROCESSOR = "policy_postprocessor"


@dataclass(frozen=True)
class NormStats:
    """Per-dimension statistics of one feature (any may be None); `source` says which layout they were read from
    (openpi or lerobot). Normalising with them is policies/normalize.py's job, in the checkpoint's declared mode."""

    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None
    min: np.ndarray | None = None  # lerobot's MIN_MAX mode
    max: np.ndarray | None = None
    q10: np.ndarray | None = None  # lerobot's QUANTILE10 mode
    q90: np.ndarray | None = None
    source: str = field(default="openpi", compare=False)

    def __getitem__(self, name: str) -> np.ndarray | None:
        """Dict-style access (`stats["state"]["q01"]`), as the files themselves are laid out."""
        if name not in STAT_NAMES:
            raise KeyError(f"{name!r} is not one of {STAT_NAMES}")
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in STAT_NAMES and getattr(self, str(name)) is not None


def load_norm_stats(checkpoint_dir: str | Path, asset_id: str | None = None) -> dict[str, NormStats] | None:
    """Statistics from a checkpoint folder (lerobot files first, then openpi assets); None when it has none."""
    root = Path(checkpoint_dir)
    stats = read_lerobot_stats(root)
    if stats is None:
        stats = read_openpi_stats(root, asset_id)
    return stats


def read_lerobot_stats(root: Path) -> dict[str, NormStats] | None:
    files = _lerobot_state_files(root)
    if not files:
        return None
    flat: dict[str, dict[str, np.ndarray]] = {}
    for file in files:
        for key, tensor in load_file(str(file)).items():
            feature, _, stat = key.rpartition(".")
            if not feature:
                raise ValueError(f"{file.name}: key {key!r} is not '<feature>.<stat>'")
            flat.setdefault(_CANONICAL.get(feature, feature), {})[stat] = tensor.float().numpy()
    return {k: _stats(v, "lerobot") for k, v in flat.items()}


def _lerobot_state_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for name, step in ((PREPROCESSOR, "normalizer_processor"), (POSTPROCESSOR, "unnormalizer_processor")):
        config = root / f"{name}.json"
        if config.is_file():
            for entry in json.loads(config.read_text()).get("steps", []):
                if entry.get("registry_name") == step and entry.get("state_file"):
                    file = root / entry["state_file"]
                    if not file.is_file():
                        raise FileNotFoundError(f"{config.name} names {entry['state_file']}, which is missing in {root}")
                    files.append(file)
        else:
            files.extend(sorted(root.glob(f"{name}_step_*_{step}.safetensors")))
    return files


def read_openpi_stats(root: Path, asset_id: str | None = None) -> dict[str, NormStats] | None:
    """`assets/<asset_id>/norm_stats.json` (asset ids may be nested, e.g. `physical-intelligence/libero`)."""
    assets = root / "assets"
    if asset_id is not None:
        candidates = [assets / asset_id / "norm_stats.json"]
        if not candidates[0].is_file():
            raise FileNotFoundError(f"no norm_stats.json for asset_id {asset_id!r} under {assets}")
    else:
        candidates = sorted(assets.rglob("norm_stats.json")) if assets.is_dir() else []
        candidates += [root / "norm_stats.json"] if (root / "norm_stats.json").is_file() else []
    if not candidates:
        return None
    if len(candidates) > 1:
        ids = [str(c.parent.relative_to(assets)) if c.parent != root else "." for c in candidates]
        raise ValueError(f"{root} holds norm stats for several asset ids {ids}; pass asset_id to choose one")
    data = json.loads(candidates[0].read_text())
    if "norm_stats" not in data:
        raise ValueError(f"{candidates[0]} has no 'norm_stats' object")
    return {key: _stats(value, "openpi") for key, value in data["norm_stats"].items()}


def _stats(values: dict, source: str) -> NormStats:
    arrays = {k: np.asarray(values[k], dtype=np.float32).reshape(-1) for k in STAT_NAMES if values.get(k) is not None}
    return NormStats(**arrays, source=source)


def write_lerobot_stats(
    root: Path, stats: dict[str, NormStats], features: dict, norm_map: dict, max_token_len: int = 200
) -> list[Path]:
    """Write lerobot 0.4's processor files with these stats (our reader, and lerobot's, find them by name).

    The steps mirror `make_pi05_pre_post_processors`: the normaliser is step 2 of the preprocessor and the
    unnormaliser step 0 of the postprocessor.
    """
    flat = {}
    for key, st in stats.items():
        for name in STAT_NAMES:
            value = getattr(st, name)
            if value is not None:
                flat[f"{_LEROBOT_NAMES.get(key, key)}.{name}"] = torch.from_numpy(np.asarray(value, dtype=np.float32))
    pre_file = f"{PREPROCESSOR}_step_2_normalizer_processor.safetensors"
    post_file = f"{POSTPROCESSOR}_step_0_unnormalizer_processor.safetensors"
    action_flat = {k: v for k, v in flat.items() if k.startswith("action.")}
    save_file(flat, str(root / pre_file))
    save_file(action_flat, str(root / post_file))
    out_features = {k: v for k, v in features.items() if k == "action"}
    normalizer = {"eps": 1e-8, "features": features, "norm_map": norm_map}
    pre = {
        "name": PREPROCESSOR,
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor"},
            {"registry_name": "normalizer_processor", "config": normalizer, "state_file": pre_file},
            {"registry_name": "pi05_prepare_state_tokenizer_processor_step"},
            {
                "registry_name": "tokenizer_processor",
                "config": {
                    "max_length": max_token_len,
                    "task_key": "task",
                    "padding_side": "right",
                    "padding": "max_length",
                    "truncation": True,
                    "tokenizer_name": "google/paligemma-3b-pt-224",
                },
            },
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    post = {
        "name": POSTPROCESSOR,
        "steps": [
            {
                "registry_name": "unnormalizer_processor",
                "config": {"eps": 1e-8, "features": out_features, "norm_map": norm_map},
                "state_file": post_file,
            },
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    paths = [root / f"{PREPROCESSOR}.json", root / f"{POSTPROCESSOR}.json"]
    paths[0].write_text(json.dumps(pre, indent=2))
    paths[1].write_text(json.dumps(post, indent=2))
    return [*paths, root / pre_file, root / post_file]
