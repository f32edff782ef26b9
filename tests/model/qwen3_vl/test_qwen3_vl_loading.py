"""Loading a Qwen3-VL backbone from transformers' own save_pretrained folders (single file, sharded, tied head
omitted) and from a family checkpoint that nests it under a prefix; strict keys, errors that name key and file."""
from __future__ import annotations

import json

import pytest
import torch
from qwen3_vl_tiny import grid_tensor, make_pair, pixels, prompt
from safetensors.torch import load_file, save_file

from oxygen_gym.model.qwen3_vl import Qwen3VLBackbone


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name,shard", [("gqa4_untied_ds2", None), ("gqa2_tied_ds1", "40KB")])
def test_from_pretrained_of_save_pretrained(tmp_path, name, shard):
    ref, ours = make_pair(name)
    kwargs = {"max_shard_size": shard} if shard else {}
    ref.save_pretrained(tmp_path, safe_serialization=True, **kwargs)
    assert (tmp_path / "model.safetensors.index.json").exists() == bool(shard)
    loaded = Qwen3VLBackbone.from_pretrained(tmp_path)
    assert same_weights(loaded, ours)
    if ref.config.text_config.tie_word_embeddings:
        assert loaded.lm_head.weight is loaded.model.language_model.embed_tokens.weight
    gen = torch.Generator().manual_seed(0)
    row, pv, thw = prompt(gen, [(1, 4, 6)], [2, 3]), pixels(gen, [(1, 4, 6)]), grid_tensor([(1, 4, 6)])
    assert loaded.generate(row, pv, thw, max_new_tokens=5) == ours.generate(row, pv, thw, max_new_tokens=5)


@pytest.mark.parametrize("shard", [None, "40KB"])
def test_other_safetensors_files_in_the_folder_are_not_the_model(tmp_path, shard):
    """The model's weights are model.safetensors or what its index names, as transformers reads them: an adapter or
    saved inputs beside them are neither read into the model nor a reason to refuse the folder."""
    ref, ours = make_pair("gqa2_tied_ds1")
    ref.save_pretrained(tmp_path, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    save_file({"base_model.model.lm_head.lora_A.weight": torch.zeros(2, 8)}, str(tmp_path / "adapter_model.safetensors"))
    save_file({"model.language_model.norm.weight": torch.full((64,), 7.0)}, str(tmp_path / "inputs.safetensors"))
    assert same_weights(Qwen3VLBackbone.from_pretrained(tmp_path), ours)


def test_dtype_and_tied_head_after_cast(tmp_path):
    ref, _ = make_pair("gqa2_tied_ds1")
    ref.save_pretrained(tmp_path)
    loaded = Qwen3VLBackbone.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert loaded.dtype == torch.bfloat16 and loaded.new_cache(1, 4).k.dtype == torch.bfloat16
    assert loaded.lm_head.weight is loaded.model.language_model.embed_tokens.weight
    assert loaded.kv_layout.layers == 4 and loaded.kv_layout.kv_heads == 2 and loaded.kv_layout.head_dim == 16


def test_prefixed_family_checkpoint(tmp_path):
    """Xiaomi-Robotics-0's layout: the backbone under `vlm.`, the head tied and omitted, the family's own keys."""
    ref, ours = make_pair("gqa2_tied_ds1")
    sd = {f"vlm.{k}": v.clone() for k, v in ref.state_dict().items() if k != "lm_head.weight"}
    sd["dit.blocks.0.weight"] = torch.zeros(3)
    save_file(sd, str(tmp_path / "model.safetensors"))
    ref.config.save_pretrained(tmp_path)
    loaded = Qwen3VLBackbone.from_pretrained(tmp_path, prefix="vlm.", config=ref.config)
    assert same_weights(loaded, ours)


def test_missing_and_unexpected_keys_name_key_and_file(tmp_path):
    ref, _ = make_pair("mha_untied_nods")
    ref.save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    sd = load_file(str(path))
    head = sd.pop("lm_head.weight")  # untied: the head is required
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=r"missing key\(s\) lm_head\.weight in .*model\.safetensors"):
        Qwen3VLBackbone.from_pretrained(tmp_path)
    sd["lm_head.weight"] = head
    sd["model.visual.extra.weight"] = torch.zeros(2)
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=r"unexpected key\(s\) model\.visual\.extra\.weight in .*model\.safetensors"):
        Qwen3VLBackbone.from_pretrained(tmp_path)
    sd.pop("model.visual.extra.weight")
    sd["model.language_model.norm.weight"] = torch.ones(3)
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=r"model\.language_model\.norm\.weight in .* has shape \(3,\)"):
        Qwen3VLBackbone.from_pretrained(tmp_path)


def test_sharded_missing_key_names_the_index(tmp_path):
    ref, _ = make_pair("gqa4_untied_ds2")
    ref.save_pretrained(tmp_path, max_shard_size="40KB")
    index = tmp_path / "model.safetensors.index.json"
    meta = json.loads(index.read_text())
    del meta["weight_map"]["model.visual.pos_embed.weight"]
    index.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"missing key\(s\) model\.visual\.pos_embed\.weight in .*index\.json"):
        Qwen3VLBackbone.from_pretrained(tmp_path)


def test_strict_load_state_dict_of_transformers_model():
    ref, ours = make_pair("gqa2_tied_ds1")  # tied: both state dicts list lm_head.weight, sharing the embedding
    assert set(ours.state_dict()) == set(ref.state_dict())
    ours.load_state_dict(ref.state_dict(), strict=True)
