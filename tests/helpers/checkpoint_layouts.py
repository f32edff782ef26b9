"""Tiny pi0.5 checkpoints written in each family's published file layout (names, keys, config fields, dtypes).

- lerobot 0.4.4: `lerobot/pi05_libero_finetuned_v044`'s layout: config.json as PI05Config dumps it (LIBERO features
  `observation.images.image` / `image2`, `empty_cameras: 1` and its `empty_camera_0` feature added by
  validate_features, state [8], action [7], MEAN_STD, chunk 50, n_action_steps 10), `model.`-prefixed keys, bf16
  weights with fp32 norms and vision embeddings, processor JSONs whose normaliser files hold every stat lerobot
  computes (mean, std, min, max, q01, q10, q50, q90, q99, count) for state, action and images.
- lerobot 0.5.1: the same plus `use_relative_actions` & co. in config.json and the delta/absolute action steps in the
  processor JSONs (so the normaliser is step 3).
- openpi converter (`examples/convert_jax_model_to_pytorch.py`): config.json {action_dim, action_horizon, variants,
  precision}, keys without `model.`, assets/<asset_id>/norm_stats.json (mean, std, q01, q99).
- openpi training (`scripts/train_pytorch.py`): model.safetensors, metadata.pt, assets/<asset_id>/norm_stats.json, no
  config.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from oxygen_gym.model import build_model
from oxygen_gym.model.pi05.weights import FP32_PATTERNS, to_checkpoint

STATS = ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99")


def tiny_model(seed: int = 5):
    """The tiny model with its bf16-stored weights already rounded, so a float32 load of the file equals it."""
    model = build_model("tiny", seed=seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not any(s in name for s in FP32_PATTERNS):
                p.copy_(p.to(torch.bfloat16).float())
    model.clear_caches()
    return model


def _tensors(model, prefix: bool) -> dict[str, torch.Tensor]:
    out = {}
    for key, t in to_checkpoint(model).items():
        fp32 = any(s in key for s in ("patch_embedding", "position_embedding", "layernorm", "language_model.norm",
                                      "gemma_expert.model.norm"))
        t = t.float() if fp32 else t.to(torch.bfloat16)
        out[key if prefix else key[len("model."):]] = t.contiguous()
    return out


def feature_stats(dim: int, seed: int) -> dict[str, np.ndarray]:
    """Distinct, well-separated statistics per dim (a swapped stat or dim shows)."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(0, 1, dim)
    std = rng.uniform(0.2, 2.0, dim)
    q01, q10 = mean - 2.5 * std, mean - 1.3 * std
    q90, q99 = mean + 1.1 * std, mean + 2.2 * std
    return {"mean": mean, "std": std, "min": mean - 3 * std, "max": mean + 3.5 * std, "q01": q01, "q10": q10,
            "q50": mean, "q90": q90, "q99": q99}


def lerobot_config(version: str, *, cameras=("image", "image2"), empty_cameras=1, state_dim=8, action_dim=7,
                   norm_map=None, chunk=50, n_action_steps=10, **extra) -> dict:
    features = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, 256, 256]} for c in cameras}
    features["observation.state"] = {"type": "STATE", "shape": [state_dim]}
    for i in range(empty_cameras):
        features[f"observation.images.empty_camera_{i}"] = {"type": "VISUAL", "shape": [3, 224, 224]}
    cfg = {
        "type": "pi05", "n_obs_steps": 1, "input_features": features,
        "output_features": {"action": {"type": "ACTION", "shape": [action_dim]}},
        "device": "cuda", "use_amp": False, "use_peft": False, "push_to_hub": True, "repo_id": None,
        "private": None, "tags": None, "license": None, "pretrained_path": "lerobot/pi05_libero_base",
        "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m", "dtype": "bfloat16",
        "chunk_size": chunk, "n_action_steps": n_action_steps, "max_state_dim": 32, "max_action_dim": 32,
        "num_inference_steps": 10, "time_sampling_beta_alpha": 1.5, "time_sampling_beta_beta": 1.0,
        "time_sampling_scale": 0.999, "time_sampling_offset": 0.001, "min_period": 0.004, "max_period": 4.0,
        "rtc_config": None, "image_resolution": [224, 224], "empty_cameras": empty_cameras,
        "tokenizer_max_length": 200,
        "normalization_mapping": norm_map or {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "gradient_checkpointing": True, "compile_model": False, "compile_mode": "max-autotune",
        "freeze_vision_encoder": False, "train_expert_only": False, "optimizer_lr": 2.5e-05,
    }
    if version != "0.4.4":
        cfg.update(use_relative_actions=False, relative_exclude_joints=["gripper"], action_feature_names=None)
    cfg.update(extra)
    return cfg


def write_lerobot(root: Path, model, version: str = "0.4.4", *, stats=None, eps: float = 1e-8, **config_kw) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = lerobot_config(version, **config_kw)
    (root / "config.json").write_text(json.dumps(cfg, indent=4))
    save_file(_tensors(model, prefix=True), str(root / "model.safetensors"), metadata={"format": "pt"})
    if stats is None:
        return root
    norm_map = cfg["normalization_mapping"]
    features = {**cfg["input_features"], **cfg["output_features"]}
    flat = {f"{feat}.{name}": torch.tensor(np.asarray(v), dtype=torch.float32)
            for feat, st in stats.items() for name, v in st.items()}
    for feat in list(stats):
        flat[f"{feat}.count"] = torch.tensor([273465])
    relative = version != "0.4.4"
    pre_index = 3 if relative else 2
    pre_file = f"policy_preprocessor_step_{pre_index}_normalizer_processor.safetensors"
    post_file = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    save_file(flat, str(root / pre_file))
    save_file({k: v for k, v in flat.items() if k.startswith("action.")}, str(root / post_file))
    normalizer = {"eps": eps, "features": features, "norm_map": norm_map}
    steps = [{"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
             {"registry_name": "to_batch_processor", "config": {}}]
    if relative:
        steps.append({"registry_name": "delta_actions_processor", "config": {"enabled": False, "exclude_joints": ["gripper"]}})
    steps += [
        {"registry_name": "normalizer_processor", "config": normalizer, "state_file": pre_file},
        {"registry_name": "pi05_prepare_state_tokenizer_processor_step", "config": {"max_state_dim": 32, "task_key": "task"}},
        {"registry_name": "tokenizer_processor", "config": {"max_length": 200, "task_key": "task", "padding_side": "right",
                                                            "padding": "max_length", "truncation": True,
                                                            "tokenizer_name": "google/paligemma-3b-pt-224"}},
        {"registry_name": "device_processor", "config": {"device": "cuda", "float_dtype": None}},
    ]
    post = [{"registry_name": "unnormalizer_processor",
             "config": {"eps": eps, "features": cfg["output_features"], "norm_map": norm_map}, "state_file": post_file}]
    if relative:
        post.append({"registry_name": "absolute_actions_processor", "config": {"enabled": False}})
    post.append({"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}})
    (root / "policy_preprocessor.json").write_text(json.dumps({"name": "policy_preprocessor", "steps": steps}, indent=2))
    (root / "policy_postprocessor.json").write_text(json.dumps({"name": "policy_postprocessor", "steps": post}, indent=2))
    return root


def openpi_norm_stats(stats: dict) -> dict:
    """openpi's norm_stats.json body (mean, std, q01, q99 per key)."""
    return {"norm_stats": {k: {n: np.asarray(v[n], dtype=float).tolist() for n in ("mean", "std", "q01", "q99")}
                           for k, v in stats.items()}}


def write_openpi(root: Path, model, *, asset_ids=("physical-intelligence/libero",), stats=None, horizon: int = 10,
                 training: bool = False) -> Path:
    """openpi's converter output (training=False) or its PyTorch training checkpoint (training=True)."""
    root.mkdir(parents=True, exist_ok=True)
    save_file(_tensors(model, prefix=False), str(root / "model.safetensors"), metadata={"format": "pt"})
    if training:
        torch.save({"global_step": 30000, "config": {"name": "pi05_x"}, "timestamp": 0.0}, root / "metadata.pt")
    else:
        (root / "config.json").write_text(json.dumps({
            "action_dim": 32, "action_horizon": horizon, "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m", "precision": "bfloat16"}, indent=2))
    for asset in asset_ids:
        (root / "assets" / asset).mkdir(parents=True, exist_ok=True)
        (root / "assets" / asset / "norm_stats.json").write_text(json.dumps(openpi_norm_stats(stats), indent=2))
    return root
