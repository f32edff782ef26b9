"""Checkpoint layout (lerobot's pi0.5 safetensors: the state dict of lerobot `policies/pi05/modeling_pi05.py`, which
openpi's `examples/convert_jax_model_to_pytorch.py` writes too), save/reload, strict loading errors, normaliser
stats, hub ids."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from oxygen_gym.model import (
    CheckpointError,
    CheckpointNotFoundError,
    NormStats,
    PI05Config,
    build_model,
    checkpoint_keys,
    count_parameters,
    load_pretrained,
    save_pretrained,
)
from oxygen_gym.model.pi05.modeling import PI05Model
from oxygen_gym.policies.normalize import Normalizer

P = "model.paligemma_with_expert."


def documented_keys(c: PI05Config) -> dict[str, tuple[int, ...]]:
    """lerobot's pi0.5 key list with its shapes (812 keys at full size), written out independently of weights.py."""
    w, e, v, hd, h, k = c.vlm.width, c.expert.width, c.vision.width, c.vlm.head_dim, c.vlm.num_heads, c.vlm.num_kv_heads
    lm, vt = f"{P}paligemma.model.language_model.", f"{P}paligemma.model.vision_tower.vision_model."
    keys = {
        "model.action_in_proj.weight": (e, c.action_dim), "model.action_in_proj.bias": (e,),
        "model.action_out_proj.weight": (c.action_dim, e), "model.action_out_proj.bias": (c.action_dim,),
        "model.time_mlp_in.weight": (e, e), "model.time_mlp_in.bias": (e,),
        "model.time_mlp_out.weight": (e, e), "model.time_mlp_out.bias": (e,),
        f"{P}paligemma.lm_head.weight": (c.vocab_size, w),
        f"{lm}norm.weight": (w,),
        f"{P}paligemma.model.multi_modal_projector.linear.weight": (w, v),
        f"{P}paligemma.model.multi_modal_projector.linear.bias": (w,),
        f"{vt}embeddings.patch_embedding.weight": (v, 3, c.vision.patch_size, c.vision.patch_size),
        f"{vt}embeddings.patch_embedding.bias": (v,),
        f"{vt}embeddings.position_embedding.weight": (c.vision.num_patches, v),
        f"{vt}post_layernorm.weight": (v,), f"{vt}post_layernorm.bias": (v,),
        f"{P}gemma_expert.model.norm.dense.weight": (3 * e, e), f"{P}gemma_expert.model.norm.dense.bias": (3 * e,),
        f"{P}gemma_expert.lm_head.weight": (c.vocab_size, e),
    }
    for n in range(c.vlm.depth):
        for stack, width, mlp in ((f"{lm}layers.{n}.", w, c.vlm.mlp_dim), (f"{P}gemma_expert.model.layers.{n}.", e, c.expert.mlp_dim)):
            keys |= {
                f"{stack}self_attn.q_proj.weight": (h * hd, width), f"{stack}self_attn.k_proj.weight": (k * hd, width),
                f"{stack}self_attn.v_proj.weight": (k * hd, width), f"{stack}self_attn.o_proj.weight": (width, h * hd),
                f"{stack}mlp.gate_proj.weight": (mlp, width), f"{stack}mlp.up_proj.weight": (mlp, width),
                f"{stack}mlp.down_proj.weight": (width, mlp),
            }
            for norm in ("input_layernorm", "post_attention_layernorm"):
                if "gemma_expert" in stack:
                    keys |= {f"{stack}{norm}.dense.weight": (3 * e, e), f"{stack}{norm}.dense.bias": (3 * e,)}
                else:
                    keys[f"{stack}{norm}.weight"] = (w,)
    for n in range(c.vision.depth):
        layer = f"{vt}encoder.layers.{n}."
        for name, shape in (("layer_norm1", (v,)), ("layer_norm2", (v,))):
            keys |= {f"{layer}{name}.weight": shape, f"{layer}{name}.bias": shape}
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            keys |= {f"{layer}self_attn.{proj}.weight": (v, v), f"{layer}self_attn.{proj}.bias": (v,)}
        keys |= {
            f"{layer}mlp.fc1.weight": (c.vision.mlp_dim, v), f"{layer}mlp.fc1.bias": (c.vision.mlp_dim,),
            f"{layer}mlp.fc2.weight": (v, c.vision.mlp_dim), f"{layer}mlp.fc2.bias": (v,),
        }
    return keys


@pytest.mark.parametrize("name", ["tiny", "small", "pi05"])
def test_key_layout_matches_the_documented_one(name):
    c = PI05Config.named(name)
    with torch.device("meta"):
        ours = checkpoint_keys(PI05Model(c))
    assert ours == documented_keys(c)
    assert len(ours) == 20 + 20 * c.vlm.depth + 16 * c.vision.depth
    if name == "pi05":
        assert len(ours) == 812
        assert 3.3e9 < count_parameters(c) < 3.4e9


def test_fixture_keys_are_the_documented_ones(lerobot_fixture_dir):
    model = load_pretrained(lerobot_fixture_dir / "checkpoint")
    with open(lerobot_fixture_dir / "meta.json") as f:
        fixture = {k: tuple(s) for k, (s, _) in json.load(f)["safetensors_keys"].items()}
    assert fixture == documented_keys(model.config)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = build_model("tiny", seed=3)
    stats = {
        "state": NormStats(mean=np.arange(8.0), std=np.ones(8), q01=-np.ones(8), q99=np.full(8, 3.0)),
        "actions": NormStats(mean=np.zeros(7), std=np.ones(7), q01=np.full(7, -2.0), q99=np.full(7, 2.0)),
    }
    root = save_pretrained(model, tmp_path_factory.mktemp("ckpt") / "tiny", norm_stats=stats)
    return model, root, stats


def test_save_then_reload_is_exact(saved):
    model, root, stats = saved
    tensors = load_file(str(root / "model.safetensors"))
    assert {k: tuple(t.shape) for k, t in tensors.items()} == documented_keys(model.config)
    config = json.loads((root / "config.json").read_text())
    assert config["type"] == "pi05" and config["chunk_size"] == 50 and config["tokenizer_max_length"] == 200
    reloaded = load_pretrained(root)
    assert reloaded.config == model.config
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert set(reloaded.norm_stats) == {"state", "actions"}
    np.testing.assert_array_equal(reloaded.norm_stats["state"].q99, stats["state"].q99)
    np.testing.assert_array_equal(reloaded.norm_stats["state"]["q01"], stats["state"].q01)  # dict-style too
    np.testing.assert_array_equal(reloaded.norm_stats["actions"].q01, stats["actions"].q01)
    assert reloaded.norm_stats["state"].source == "lerobot"
    # lerobot's own file names, found through its processor json
    pre = json.loads((root / "policy_preprocessor.json").read_text())
    files = [s["state_file"] for s in pre["steps"] if "state_file" in s]
    assert files == ["policy_preprocessor_step_2_normalizer_processor.safetensors"]
    assert set(load_file(str(root / files[0]))) >= {"observation.state.q01", "action.q99"}


def _rewrite(root, tmp_path, edit) -> "Path":
    out = tmp_path / "edited"
    out.mkdir()
    tensors = load_file(str(root / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text((root / "config.json").read_text())
    return out


KEY = f"{P}paligemma.model.language_model.layers.1.mlp.up_proj.weight"


def test_wrong_shape_names_the_key(saved, tmp_path):
    _, root, _ = saved
    bad = _rewrite(root, tmp_path, lambda t: t.__setitem__(KEY, torch.zeros(3, 4)))
    with pytest.raises(CheckpointError, match="shape mismatch.*" + KEY.replace(".", r"\.")):
        load_pretrained(bad)


def test_missing_key_names_the_key(saved, tmp_path):
    _, root, _ = saved
    bad = _rewrite(root, tmp_path, lambda t: t.pop(KEY))
    with pytest.raises(CheckpointError, match="missing key.*" + KEY.replace(".", r"\.")):
        load_pretrained(bad)


def test_unknown_key_names_the_key(saved, tmp_path):
    _, root, _ = saved
    bad = _rewrite(root, tmp_path, lambda t: t.__setitem__("model.state_proj.weight", torch.zeros(2, 2)))
    with pytest.raises(CheckpointError, match=r"unexpected key.*model\.state_proj\.weight"):
        load_pretrained(bad)


def test_openpi_converter_layout_and_assets_norm_stats(saved, tmp_path):
    """openpi writes the same tensors without `model.`, a short config.json, and assets/<id>/norm_stats.json."""
    model, root, _ = saved
    out = tmp_path / "openpi"
    (out / "assets" / "physical-intelligence" / "libero").mkdir(parents=True)
    tensors = {k.removeprefix("model."): t for k, t in load_file(str(root / "model.safetensors")).items()}
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps({
        "action_dim": 32, "action_horizon": 50, "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m", "precision": "float32",
    }))
    stats = {"norm_stats": {
        "state": {"mean": [0.0] * 8, "std": [1.0] * 8, "q01": [-1.0] * 8, "q99": [1.0] * 8},
        "actions": {"mean": [0.0] * 7, "std": [1.0] * 7, "q01": [-0.5] * 7, "q99": [0.5] * 7},
    }}
    (out / "assets" / "physical-intelligence" / "libero" / "norm_stats.json").write_text(json.dumps(stats))
    # assets/<asset_id> may be nested (physical-intelligence/libero); found alone, or named explicitly
    loaded = load_pretrained(out)
    assert loaded.norm_stats["state"].q99.shape == (8,)
    loaded = load_pretrained(out, asset_id="physical-intelligence/libero")
    assert loaded.config.vlm == model.config.vlm and loaded.config.vision == model.config.vision
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    acts = loaded.norm_stats["actions"]
    assert acts.source == "openpi"
    acts = Normalizer("QUANTILES", {"q01": acts.q01, "q99": acts.q99}, formula="openpi")  # what the policy applies
    # openpi's Unnormalize: (x + 1) / 2 * (q99 - q01 + 1e-6) + q01. (The 0.5 + 1e-6 / 2 this test used to expect
    # held only within rtol for the float32 copy of the formula on NormStats, deleted as nothing else called it.)
    want = (1 + 1) / 2 * (0.5 - -0.5 + 1e-6) + -0.5
    np.testing.assert_allclose(acts.unnormalize(np.ones(7)), np.full(7, want), rtol=1e-6)
    np.testing.assert_allclose(acts.normalize(acts.unnormalize(np.linspace(-1, 1, 7))), np.linspace(-1, 1, 7), atol=1e-6)


def test_missing_weights_file_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointNotFoundError, match=r"model\.safetensors"):
        load_pretrained(tmp_path)
    with pytest.raises(CheckpointNotFoundError, match="not found"):
        load_pretrained(tmp_path / "no" / "such" / "dir")


def test_unreachable_hub_id_gives_a_clear_error(tmp_path):
    code = (
        "from oxygen_gym.model import load_pretrained, CheckpointNotFoundError\n"
        "try:\n    load_pretrained('oxygen-gym-test/no-such-pi05-checkpoint')\n"
        "except CheckpointNotFoundError as e:\n    print('ERR', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERR could not get checkpoint 'oxygen-gym-test/no-such-pi05-checkpoint'" in proc.stdout
    assert "local folder" in proc.stdout


def test_bf16_build_keeps_norms_fp32_and_is_deterministic():
    a = build_model("tiny", seed=1, dtype=torch.bfloat16)
    b = build_model("tiny", seed=1, dtype=torch.float32)
    assert a.embed_tokens.weight.dtype == torch.bfloat16 and a.vlm.norm.weight.dtype == torch.float32
    assert torch.equal(a.embed_tokens.weight, b.embed_tokens.weight.to(torch.bfloat16))


def test_full_size_dims_come_from_lerobot_variant_names():
    """A real pi0.5 checkpoint's header (shapes only, no weights) with lerobot's config.json fields."""
    from oxygen_gym.model.pi05.loading import config_from_checkpoint

    real = PI05Config.named("pi05")
    with torch.device("meta"):
        shapes = checkpoint_keys(PI05Model(real))
    cfg = {
        "type": "pi05", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m", "chunk_size": 10,
        "max_action_dim": 32, "tokenizer_max_length": 200,
        "input_features": {"observation.images.base_0_rgb": {}, "observation.images.left_wrist_0_rgb": {},
                           "observation.state": {}},
    }
    c = config_from_checkpoint(cfg, shapes)
    assert (c.vlm, c.expert, c.vision, c.vocab_size) == (real.vlm, real.expert, real.vision, real.vocab_size)
    assert c.action_horizon == 10 and c.image_slots == ("base_0_rgb", "left_wrist_0_rgb")
    with pytest.raises(CheckpointError, match="action dim 7"):
        config_from_checkpoint({**cfg, "max_action_dim": 7}, shapes)
    # the same variant names over reduced tensors: dims come from the shapes instead
    tiny = PI05Config.named("tiny")
    with torch.device("meta"):
        small_shapes = checkpoint_keys(PI05Model(tiny))
    assert config_from_checkpoint(cfg, small_shapes).vlm == tiny.vlm
