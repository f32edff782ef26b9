"""Test helper: a tiny Xiaomi-Robotics-0 checkpoint folder in the published layout (model/xr0/xr0_checkpoint.py):
config.json, sharded safetensors + index with the tied head omitted, a byte-level Qwen tokenizer's files, and a
preprocessor_config.json with two robot types (per-step `[30, 16]` statistics for one, per-dim `[16]` for the other,
seven active dims each, the rest padding with std 0)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import builtin_qwen_tokenizer
from oxygen_gym.model.xr0.xr0_checkpoint import save_xr0_checkpoint
from oxygen_gym.model.xr0.xr0_config import XR0Config
from oxygen_gym.model.xr0.xr0_model import build_xr0

SEED = 3
ACTIVE = 7  # LIBERO's action dims
TINY_STD = 2e-5  # active (> 1e-5) yet small enough that a missing +1e-6 changes the output by 5%


def tiny_config() -> XR0Config:
    return XR0Config.named("xr0-tiny").with_tied_head()  # the published form ties the LM head


def tiny_stats() -> dict:
    g = np.random.default_rng(11)
    dims, steps = 16, 30

    def entry(per_step: bool, scale: float) -> dict:
        shape = (steps, dims) if per_step else (dims,)
        mean = np.zeros(shape)
        std = np.zeros(shape)
        mean[..., :ACTIVE] = g.normal(0, scale, shape[:-1] + (ACTIVE,))
        std[..., :ACTIVE] = g.uniform(0.1, 1.0, shape[:-1] + (ACTIVE,)) * scale
        mean[..., 3] = 0.0
        std[..., 3] = TINY_STD
        return {"mean": mean.tolist(), "std": std.tolist()}

    return {"action_config": {"libero": entry(True, 1.0), "franka": entry(False, 3.0)}}


def write_xr0(root: Path, *, shard_bytes: int = 150_000, tokenizer: bool = True, stats: dict | None = None):
    """Write the folder; returns (in-memory model, folder)."""
    config = tiny_config()
    model = build_xr0(config, seed=SEED)
    save_xr0_checkpoint(root, config, model.vlm.state_dict(), model.expert.state_dict(), shard_bytes=shard_bytes,
                        preprocessor=tiny_stats() if stats is None else stats)
    if tokenizer:
        builtin_qwen_tokenizer().save_pretrained(str(root))
    return model, Path(root)


def write_preprocessor(root: Path, stats: dict) -> None:
    (root / "preprocessor_config.json").write_text(json.dumps(stats))


def libero_obs(seed: int = 0) -> dict:
    g = np.random.default_rng(seed)
    return {
        "images": {cam: g.integers(0, 256, (64, 64, 3), dtype=np.uint8) for cam in ("base", "wrist")},
        "state": g.normal(size=8).astype(np.float32),
        "prompt": "put the bowl on the plate",
    }
