"""PEFT LoRA folders written by the `peft` library itself load onto our modules and compute what PEFT computes:
per projection against PEFT's own forward, over our module names and over lerobot's published pi0.5 layout, and a
whole-model adapter (vision tower, action expert, backbone) merges to PEFT's `merge_and_unload()` weights."""
import copy
import json

import peft
import pytest
import torch
from torch import nn

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.model import build_model
from oxygen_gym.model.layers import linear
from oxygen_gym.model.lora_bank import AdapterError, LoraBank, LoraWeights
from oxygen_gym.model.peft_adapter import read_peft, write_peft
from oxygen_gym.model.pi05.weights import checkpoint_keys

LANG = r".*vlm\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"


def _peft_folder(model, folder, target_modules, r=4, alpha=8, rslora=False, seed=0, **extra):
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, target_modules=target_modules,
                          init_lora_weights=False, lora_dropout=0.1, **extra)
    wrapped = peft.get_peft_model(copy.deepcopy(model), cfg)
    wrapped.save_pretrained(folder)
    return wrapped


def _peft_layers(wrapped):
    return {n.removeprefix("base_model.model."): m for n, m in wrapped.named_modules()
            if isinstance(m, peft.tuners.lora.Linear)}


@pytest.mark.parametrize("rslora", [False, True])
def test_our_projections_match_pefts_forward(tmp_path, rslora):
    model = build_model("tiny", seed=1)
    wrapped = _peft_folder(model, tmp_path / "a", LANG, r=4, alpha=6, rslora=rslora,
                           rank_pattern={"down_proj": 2}, alpha_pattern={"q_proj": 3})
    wrapped.eval()  # dropout off, as at inference
    bank = LoraBank(model)
    slot = bank.load("a", read_peft(tmp_path / "a", model).weights)
    layers = dict(model.named_modules())
    peft_layers = _peft_layers(wrapped)
    assert len(peft_layers) == 14
    gen = torch.Generator().manual_seed(0)
    for name, theirs in peft_layers.items():
        x = torch.randn(3, 5, layers[name].in_features, generator=gen)
        with torch.no_grad():
            want = theirs(x)
            base = linear(x, layers[name])
            with bank.routed(torch.tensor([slot, 0, slot])):
                got = linear(x, layers[name])
        assert not torch.allclose(want[0], base[0], atol=1e-3), f"{name}: the adapter does not change the output"
        # measured max abs difference 1.2e-6 on outputs up to 15 (1-2 ulp: PEFT adds the update to the base output
        # in its own order); ~3x
        torch.testing.assert_close(got[[0, 2]], want[[0, 2]], atol=4e-6, rtol=0)
        assert torch.equal(got[1], base[1]), f"{name}: the base row changed"


def _lerobot_skeleton(model) -> nn.Module:
    """Empty Linear modules under lerobot's pi0.5 names (tests/helpers/checkpoint_layouts.py layout), for PEFT to adapt."""
    root = nn.Module()
    for key, shape in checkpoint_keys(model).items():
        if not key.endswith("_proj.weight") or "language_model.layers" not in key:
            continue
        parts = key.removesuffix(".weight").split(".")
        node = root
        for p in parts[:-1]:
            if not hasattr(node, p):
                node.add_module(p, nn.Module())
            node = getattr(node, p)
        node.add_module(parts[-1], nn.Linear(shape[1], shape[0], bias=False))
    return root


def test_lerobot_layout_names_map_onto_our_projections(tmp_path):
    model = build_model("tiny", seed=1)
    skeleton = _lerobot_skeleton(model)
    wrapped = _peft_folder(skeleton, tmp_path / "lr", ["q_proj", "v_proj", "down_proj"], r=2, alpha=4)
    wrapped.eval()
    keys = json.loads((tmp_path / "lr" / "adapter_config.json").read_text())
    assert keys["r"] == 2
    adapter = read_peft(tmp_path / "lr", model)
    assert adapter.outside_language(model) == [] and len(adapter.weights.modules) == 6
    bank = LoraBank(model)
    slot = bank.load("lr", adapter.weights)
    ours = dict(model.named_modules())
    gen = torch.Generator().manual_seed(1)
    for name, theirs in _peft_layers(wrapped).items():
        mine = ours[name.replace("model.paligemma_with_expert.paligemma.model.language_model.", "vlm.")]
        with torch.no_grad():
            theirs.base_layer.weight.copy_(mine.weight)
            x = torch.randn(2, 3, mine.in_features, generator=gen)
            with bank.routed(torch.tensor([slot, slot])):
                torch.testing.assert_close(linear(x, mine), theirs(x), atol=4e-6, rtol=0)  # as above


def test_whole_model_adapter_merges_to_pefts_merge_and_unload(tmp_path):
    model = build_model("tiny", seed=0)
    targets = r".*(vision\.layers\.\d+\.self_attn\.(q|v)_proj|expert\.layers\.\d+\.mlp\.(gate|down)_proj|vlm\.layers\.\d+\.self_attn\.o_proj|action_in_proj)"
    wrapped = _peft_folder(model, tmp_path / "ft", targets, r=4, alpha=16)
    merged = wrapped.merge_and_unload().state_dict()
    policy = MultiTaskPolicy.from_pretrained("tiny", seed=0, merge_adapters=[tmp_path / "ft"])
    assert policy.merged_adapters[0]["parts"] == {"vision": 4, "expert": 4, "vlm": 2, "action_in_proj": 1}
    ours = policy.model.state_dict()
    changed = 0
    for k, v in merged.items():
        assert torch.equal(ours[k], v), k
        changed += not torch.equal(v, model.state_dict()[k])
    assert changed == 11
    with pytest.raises(AdapterError, match="outside the backbone's language projections.*merge_adapters"):
        MultiTaskPolicy.from_pretrained("tiny", seed=0, adapters={"ft": tmp_path / "ft"})


def test_unsupported_adapters_are_refused_naming_the_module(tmp_path):
    model = build_model("tiny", seed=0)
    _peft_folder(model, tmp_path / "emb", ["embed_tokens", "q_proj"])
    with pytest.raises(AdapterError, match="embed_tokens.*not a LoRA A/B weight"):
        read_peft(tmp_path / "emb", model)
    _peft_folder(model, tmp_path / "dora", ["q_proj"], use_dora=True)
    with pytest.raises(AdapterError, match="use_dora"):
        read_peft(tmp_path / "dora", model)
    _peft_folder(build_model("small", seed=0), tmp_path / "small", LANG)  # a deeper model
    with pytest.raises(AdapterError, match=r"module 'vlm\.layers\.10\.mlp\.down_proj': no such module"):
        MultiTaskPolicy.from_pretrained("tiny", adapters={"s": tmp_path / "small"},
                                        tasks=[LanguageTask("n", "hi", 2, adapter="s")])
    q = model.vlm.layers[0].self_attn.q_proj
    wrong = LoraWeights({"vlm.layers.0.self_attn.q_proj": (torch.zeros(2, q.in_features + 1), torch.zeros(q.out_features, 2))},
                        {"vlm.layers.0.self_attn.q_proj": 1.0})
    write_peft(tmp_path / "shape", wrong, rank=2, alpha=2, target_modules=["q_proj"])
    with pytest.raises(AdapterError, match=r"module 'vlm\.layers\.0\.self_attn\.q_proj' is Linear\(128 -> 256\) but the adapter's lora_A is \(2, 129\)"):
        MultiTaskPolicy.from_pretrained("tiny", adapters={"s": tmp_path / "shape"})
    with pytest.raises(AdapterError, match="no adapter_config.json"):
        read_peft(tmp_path, model)


def test_inspect_states_per_task_and_merged_adapters(tmp_path, capsys):
    from oxygen_gym.cli import main

    model = build_model("tiny", seed=0)
    _peft_folder(model, tmp_path / "lang", LANG, r=4, alpha=8)
    _peft_folder(model, tmp_path / "ft", r".*vision\.layers\.\d+\.self_attn\.q_proj", r=2, alpha=2)
    code = main(["inspect", "tiny", "--adapter", f"lang={tmp_path / 'lang'}", "--adapter", f"ft={tmp_path / 'ft'}",
                 "--merge-adapter", str(tmp_path / "ft")])
    out = capsys.readouterr().out
    assert code == 0
    assert "lang (" in out and "r=4 alpha=8 scale 2.0; 14 modules (backbone language 14); per task" in out
    assert "ft (" in out and "REFUSED as a per-task adapter" in out and "(vision 2)" in out
    assert "merged into the weights at load" in out
