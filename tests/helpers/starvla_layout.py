"""Test helper: tiny StarVLA run folders in the exact layout (model/starvla/starvla_checkpoint.py): config.yaml whose
`framework.qwenvl.base_vlm` names a hub id, dataset_statistics.json, checkpoints/NAME.(pt|safetensors) with
`qwen_vl_interface.model.*`, `action_model.*` and `project_layers.*`; and the backbone folder the hub id stands for
(config.json + the built-in byte-level Qwen tokenizer), written apart, as a Hugging Face download would be."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import builtin_qwen_tokenizer
from oxygen_gym.model.starvla.starvla_checkpoint import save_run
from oxygen_gym.model.starvla.starvla_model import build_starvla

SEED = 5
BASE_VLM = "./playground/Pretrained_models/Qwen3-VL-Tiny-Test"  # as StarVLA's configs name it; hub id Qwen/Qwen3-VL-Tiny-Test
HUB_ID = "Qwen/Qwen3-VL-Tiny-Test"

# starvla-tiny's head dims (starvla_config.py `_tiny`) as StarVLA's config blocks spell them
BLOCKS = {
    "pi": {"action_dim": 7, "action_horizon": 6, "num_inference_timesteps": 3, "num_target_vision_tokens": 4,
           "max_seq_len": 64, "diffusion_model_cfg": {"action_dit_hidden_dim": 32, "attention_head_dim": 16}},
    "groot": {"action_dim": 7, "action_horizon": 5, "num_inference_timesteps": 3, "num_target_vision_tokens": 4,
              "max_seq_len": 64, "hidden_size": 48, "state_dim": 16, "max_num_embodiments": 3, "embodiment_id": 1,
              "diffusion_model_cfg": {"input_embedding_dim": 32, "attention_head_dim": 16, "num_layers": 4},
              "vl_self_attention_cfg": {"num_layers": 1, "attention_head_dim": 16}},
    "oft": {"action_dim": 7, "action_horizon": 4},
}
FRAMEWORK = {"pi": "QwenPI_v3", "groot": "QwenGR00T", "oft": "QwenOFT"}


def statistics(keys=("franka",), dims: int = 7) -> dict:
    """dataset_statistics.json: per key an `action` block (min/max/q01/q99/mean/std, mask False on the gripper)."""
    g = np.random.default_rng(2)
    out = {}
    for key in keys:
        lo = g.uniform(-2.0, -0.5, dims)
        hi = lo + g.uniform(0.5, 3.0, dims)
        out[key] = {"action": {"min": lo.tolist(), "max": hi.tolist(), "q01": (lo + 0.1).tolist(),
                               "q99": (hi - 0.1).tolist(), "mean": ((lo + hi) / 2).tolist(),
                               "std": ((hi - lo) / 4).tolist(), "mask": [True] * (dims - 1) + [False]},
                    "num_transitions": 1000}
    return out


def yaml_config(heads: tuple[str, ...]) -> dict:
    fw = {"qwenvl": {"base_vlm": BASE_VLM, "attn_implementation": "sdpa"}}
    if len(heads) == 1:
        fw.update(name=FRAMEWORK[heads[0]], action_model=BLOCKS[heads[0]])
    else:
        fw.update(action_heads={h: BLOCKS[h] for h in heads})
    return {"run_id": "tiny", "framework": fw, "datasets": {"vla_data": {"data_mix": "libero_all", "image_size": [64, 64]}}}


def write_backbone(folder: Path, model) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config.qwen3vl_config().to_dict()))
    builtin_qwen_tokenizer().save_pretrained(str(folder))
    return folder


def write_run(root: Path, heads=("pi", "groot", "oft"), *, name: str = "steps_1000_pytorch_model.safetensors",
              stats: dict | None = None):
    """(in-memory model, run folder, backbone folder): the run and its backbone side by side under `root`."""
    model = build_starvla("starvla-tiny", seed=SEED, heads=list(heads))
    run = save_run(Path(root) / "run", model, yaml_config(tuple(heads)), statistics() if stats is None else stats,
                   name=name)
    backbone = write_backbone(Path(root) / "vlm", model)
    return model, run, backbone


def hf_cache(cache: Path, backbone: Path) -> Path:
    """`backbone` placed in a Hugging Face hub cache under HUB_ID (refs/main -> one snapshot)."""
    import shutil

    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    snap = repo / "snapshots" / ("0" * 40)
    shutil.copytree(backbone, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    return cache
