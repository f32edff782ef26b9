"""XR0 checkpoints in the published layout: sharded safetensors with an index, `vlm.`-prefixed backbone without
the tied head, the expert at top level; strict loading and errors that name the key and the file."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from oxygen_gym.model.xr0.action_expert import XR0ActionExpert
from oxygen_gym.model.xr0.xr0_checkpoint import (
    INDEX,
    CheckpointKeyError,
    config_from_json,
    config_to_json,
    load_xr0_checkpoint,
    save_xr0_checkpoint,
)
from oxygen_gym.model.xr0.xr0_config import XR0Config
from xr0_reference import tiny_backbone


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    config = XR0Config.named("xr0-tiny").with_tied_head()  # the published form ties the LM head
    backbone = tiny_backbone(config)
    torch.manual_seed(5)
    expert = XR0ActionExpert(config)
    path = tmp_path_factory.mktemp("xr0") / "ckpt"
    save_xr0_checkpoint(path, config, backbone.state_dict(), expert.state_dict(), shard_bytes=200_000)
    return config, backbone, expert, path


def _index(path):
    return json.loads((path / INDEX).read_text())["weight_map"]


def test_published_layout(written):
    config, _, expert, path = written
    keys = _index(path)
    assert len(set(keys.values())) > 1  # really sharded
    assert "vlm.lm_head.weight" not in keys  # tied, omitted
    assert "vlm.model.language_model.embed_tokens.weight" in keys
    assert any(k.startswith("vlm.model.visual.") for k in keys)
    assert {k.split(".")[0] for k in keys if not k.startswith("vlm.")} == {
        "dit", "t_embedder", "t_projector", "state_projector", "action_projector", "action_output_layer", "sink"}
    assert {"sink.weight", "t_embedder.mlp.0.weight", "t_projector.layers.0.bias", "action_output_layer.layers.2.weight",
            "dit.layers.0.adaln_table", "dit.layers.1.attn.qkv_proj.bias", "dit.layers.0.attn.q_norm.weight"} <= set(keys)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["dit_config"] == {"hidden_size": 64, "head_dim": 16, "num_key_value_heads": 2, "num_hidden_layers": 2}
    assert (cfg["action_length"], cfg["action_dim"], cfg["state_dim"]) == (30, 16, 16)
    assert cfg["vlm_config"]["text_config"]["num_hidden_layers"] == 4


def test_round_trip_loads_strictly(written):
    from transformers import Qwen3VLForConditionalGeneration

    config, backbone, expert, path = written
    ckpt = load_xr0_checkpoint(path)
    assert ckpt.config == config
    fresh = Qwen3VLForConditionalGeneration(ckpt.config.qwen3vl_config())
    fresh.load_state_dict(ckpt.backbone, strict=True)
    for k, v in backbone.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    assert fresh.lm_head.weight.data_ptr() == fresh.model.language_model.embed_tokens.weight.data_ptr()
    new = XR0ActionExpert(ckpt.config)
    new.load_state_dict(ckpt.expert, strict=True)
    for k, v in expert.state_dict().items():
        assert torch.equal(new.state_dict()[k], v), k


def test_an_untied_head_is_written_and_read_back(tmp_path):
    """Built-ins leave the LM head untied: the writer keeps `vlm.lm_head.weight` and the reader does not overwrite it."""
    config = XR0Config.named("xr0-tiny")
    backbone = tiny_backbone(config)
    save_xr0_checkpoint(tmp_path, config, backbone.state_dict(), XR0ActionExpert(config).state_dict())
    assert "vlm.lm_head.weight" in _index(tmp_path)
    ckpt = load_xr0_checkpoint(tmp_path)
    assert torch.equal(ckpt.backbone["lm_head.weight"], backbone.state_dict()["lm_head.weight"])
    assert not torch.equal(ckpt.backbone["lm_head.weight"], ckpt.backbone["model.language_model.embed_tokens.weight"])


def test_published_config_without_our_block_uses_inference_masks(written):
    config = written[0]
    d = config_to_json(config)
    d.pop("oxygen_gym")
    c = config_from_json(d)
    assert (c.window, c.position_gap, c.read_layers, c.dit) == (None, 0, 2, config.dit)


def _rewrite(path, key, drop=False, add=None):
    """Drop `key` from its shard (or add tensor `add` under `key` to the first shard), keeping the index true."""
    index = json.loads((path / INDEX).read_text())
    shard = index["weight_map"][key] if drop else sorted(set(index["weight_map"].values()))[0]
    tensors = load_file(str(path / shard))
    if drop:
        del tensors[key], index["weight_map"][key]
    else:
        tensors[key] = add
        index["weight_map"][key] = shard
    save_file(tensors, str(path / shard))
    (path / INDEX).write_text(json.dumps(index))
    return shard


@pytest.fixture
def copy(written, tmp_path):
    import shutil

    return shutil.copytree(written[3], tmp_path / "c")


@pytest.mark.parametrize("key", ["dit.layers.1.mlp.up_proj.weight", "vlm.model.language_model.layers.3.mlp.up_proj.weight"])
def test_missing_key_named(copy, key):
    _rewrite(copy, key, drop=True)
    with pytest.raises(CheckpointKeyError, match=f"missing.*{key}"):
        load_xr0_checkpoint(copy)


@pytest.mark.parametrize("key", ["dit.layers.7.adaln_table", "policy_head.weight", "vlm.model.extra.weight"])
def test_unexpected_key_named_with_file(copy, key):
    shard = _rewrite(copy, key, add=torch.zeros(3))
    with pytest.raises(CheckpointKeyError, match=f"unexpected.*{key}.*{shard}"):
        load_xr0_checkpoint(copy)


def test_wrong_shape_named(copy):
    _rewrite(copy, "sink.weight", drop=True)
    _rewrite(copy, "sink.weight", add=torch.zeros(2, 64))
    with pytest.raises(CheckpointKeyError, match=r"sink.weight has shape \(2, 64\)"):
        load_xr0_checkpoint(copy)


def test_index_disagreeing_with_shards(copy):
    index = json.loads((copy / INDEX).read_text())
    index["weight_map"]["dit.ghost"] = sorted(set(index["weight_map"].values()))[0]
    (copy / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointKeyError, match="disagree.*dit.ghost"):
        load_xr0_checkpoint(copy)
