"""StarVLA run folders (model/starvla/starvla_checkpoint.py) written in the exact layout by the tests: a folder loads
into the model it was written from (every tensor equal, act() equal to the in-memory model's with the same
normaliser), one head alone or a subset (`heads=`), StarVLA's own one-head layout (.pt); the backbone found through
`vlm_config=` or the Hugging Face cache (offline), else an error listing where it looked; actions unnormalised as
StarVLA does; and refusals that name what is wrong (a missing prefix, an unknown head, statistics of another dim)."""
import json

import numpy as np
import pytest
import torch

from oxygen_gym import MultiTaskPolicy
from oxygen_gym.model.starvla.starvla_checkpoint import CHECKPOINTS, STATS, read_state
from oxygen_gym.model.xr0.xr0_checkpoint import CheckpointKeyError
from oxygen_gym.policies.families.starvla.starvla_norm import StarVLAActionNormalizer
from oxygen_gym.policies.model_io import checkpoint_family
from policy_obs import make_obs
from starvla_layout import HUB_ID, statistics, write_run, hf_cache


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("starvla") / "all")


def _acts(policy, frames=2, seed=4):
    rng = np.random.default_rng(seed)
    return [policy.act(make_obs("libero", rng))[0] for _ in range(frames)]


def test_run_folder_loads_the_model_it_was_written_from(full):
    model, run, vlm = full
    assert checkpoint_family(run).name == "starvla"
    with MultiTaskPolicy.from_pretrained(run, robot="libero", vlm_config=vlm) as policy:
        loaded = policy.model
        assert list(loaded.heads) == ["pi", "groot", "oft"] and policy.action_heads == ["pi", "groot", "oft"]
        want = {**{f"vlm.{k}": v for k, v in model.vlm.state_dict().items()},
                **{f"heads.{k}": v for k, v in model.heads.state_dict().items()}}
        got = {**{f"vlm.{k}": v for k, v in loaded.vlm.state_dict().items()},
               **{f"heads.{k}": v for k, v in loaded.heads.state_dict().items()}}
        assert set(got) == set(want)
        for k in want:
            assert torch.equal(got[k], want[k]), k
        acts = _acts(policy)
        ref = MultiTaskPolicy(model, policy.tokenizer, robot="libero", action_horizon=policy.horizon, chunk=policy.chunk,
                              action_normalizer=policy.action_norm, camera_slots=policy.camera_slots)
        with ref:
            for a, b in zip(acts, _acts(ref)):
                for h in ("pi", "groot", "oft"):
                    # the same weights bit for bit (above); the actions agree to fp32 rounding: bit-equal on an AVX2
                    # CPU, within 6e-8 on an AVX-512 one (measured; which kernel differs was not traced)
                    np.testing.assert_allclose(a[h], b[h], rtol=0, atol=1e-6, err_msg=h)
    assert acts[0]["pi"].shape == (6, 7) and acts[0]["oft"].shape == (4, 7)


def test_actions_come_back_in_robot_units_as_starvla_unnormalises(full):
    _, run, vlm = full
    stats = statistics()["franka"]["action"]
    with MultiTaskPolicy.from_pretrained(run, robot="libero", vlm_config=vlm) as policy:
        norm = policy.action_norm
        assert isinstance(norm, StarVLAActionNormalizer) and norm.unnorm_key == "franka" and norm.mode == "min_max"
        a = _acts(policy, frames=1)[0]["pi"]
    lo, hi = np.array(stats["min"]), np.array(stats["max"])
    assert np.all(a[:, :6] >= lo[:6] - 1e-5) and np.all(a[:, :6] <= hi[:6] + 1e-5)  # clipped to [-1, 1] first
    assert set(np.unique(a[:, 6])) <= {0.0, 1.0}  # mask False: the gripper is binary
    # StarVLA tools.py unnormalize_actions on hand values: clip, threshold the binary dim, rescale the others
    x = np.array([[-3.0, -1.0, 0.0, 0.5, 1.0, 2.0, 0.49], [0.2] * 6 + [0.5]])
    got = norm.unnormalize(x)
    clipped = np.clip(x, -1, 1)
    want = 0.5 * (clipped + 1) * (hi - lo) + lo
    want[:, 6] = [0.0, 1.0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(norm.unnormalize(norm.normalize(got)), got, rtol=1e-5, atol=1e-5)
    q99 = StarVLAActionNormalizer.from_stats(stats, "franka", "q99")
    np.testing.assert_allclose(q99.unnormalize(x)[:, :6], (0.5 * (clipped + 1) * (hi - lo - 0.2) + lo + 0.1)[:, :6],
                               rtol=1e-6, atol=1e-6)


def test_heads_keeps_a_subset_equal_to_the_same_heads_of_the_full_run(full):
    _, run, vlm = full
    with MultiTaskPolicy.from_pretrained(run, robot="libero", vlm_config=vlm) as policy:
        ref = _acts(policy)
    with MultiTaskPolicy.from_pretrained(run, robot="libero", vlm_config=vlm, heads=["groot", "oft"]) as policy:
        assert list(policy.model.heads) == ["groot", "oft"] and "pi" not in policy.model.heads
        acts = _acts(policy)
    for a, b in zip(acts, ref):
        np.testing.assert_array_equal(a["oft"], b["oft"])
        np.testing.assert_array_equal(a["groot"], b["groot"][: a["groot"].shape[0]])


def test_starvla_one_head_layout_from_a_pt_file(tmp_path):
    model, run, vlm = write_run(tmp_path, heads=("oft",), name="steps_20000_pytorch_model.pt")
    keys = read_state(next((run / CHECKPOINTS).glob("*.pt")))
    assert any(k.startswith("action_model.model.fc1") for k in keys)  # QwenOFT's own names
    assert any(k.startswith("qwen_vl_interface.model.model.language_model.") for k in keys)
    with MultiTaskPolicy.from_pretrained(run / CHECKPOINTS / "steps_20000_pytorch_model.pt", robot="libero",
                                         vlm_config=vlm) as policy:
        assert policy.action_heads == ["oft"] and policy.horizon == 4
        for k, v in model.heads["oft"].state_dict().items():
            assert torch.equal(policy.model.heads["oft"].state_dict()[k], v)


def test_backbone_found_in_the_hugging_face_cache_offline(full, tmp_path, monkeypatch):
    _, run, vlm = full
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        MultiTaskPolicy.from_pretrained(run, robot="libero")
    msg = str(err.value)
    assert "Qwen3-VL-Tiny-Test" in msg and "looked in:" in msg and str(tmp_path / "empty") in msg
    assert f"for {HUB_ID}" in msg and "Pass vlm_config=" in msg
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache(tmp_path / "hub", vlm)))
    with MultiTaskPolicy.from_pretrained(run, robot="libero", heads=["pi"]) as policy:
        assert "Hugging Face cache: Qwen/Qwen3-VL-Tiny-Test" in policy.conventions.vlm_source


def test_refuses_a_missing_prefix_naming_the_head_and_keys(full, tmp_path):
    from safetensors.torch import load_file, save_file
    import shutil

    _, run, vlm = full
    copy = shutil.copytree(run, tmp_path / "run")
    file = next((copy / CHECKPOINTS).glob("*.safetensors"))
    state = load_file(str(file))
    save_file({k: v for k, v in state.items() if not k.startswith("project_layers.")}, str(file))
    with pytest.raises(CheckpointKeyError, match=r"pi: missing key\(s\) \['project_layers\.0\.0\.bias'"):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)
    save_file({k: v for k, v in state.items() if not k.startswith("action_model.groot.")}, str(file))
    with pytest.raises(CheckpointKeyError, match=r"groot: missing key\(s\) \['action_model\.groot\."):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)
    save_file({**state, "action_model.fast.w": torch.zeros(2)}, str(file))
    with pytest.raises(CheckpointKeyError, match=r"unexpected key\(s\) \['action_model\.fast\.w'\]"):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)


def test_refuses_an_unknown_head(full, tmp_path):
    import shutil

    import yaml

    _, run, vlm = full
    with pytest.raises(ValueError, match=r"heads: .* holds the head\(s\) \['pi', 'groot', 'oft'\], not \['fast'\]"):
        MultiTaskPolicy.from_pretrained(run, robot="libero", vlm_config=vlm, heads=["fast"])
    copy = shutil.copytree(run, tmp_path / "run")
    cfg = yaml.safe_load((copy / "config.yaml").read_text())
    cfg["framework"]["action_heads"]["fast"] = {"action_dim": 7}
    (copy / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"unknown head\(s\) \['fast'\]"):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)


def test_refuses_statistics_that_do_not_match_the_action_dim(full, tmp_path):
    import shutil

    _, run, vlm = full
    copy = shutil.copytree(run, tmp_path / "run")
    (copy / STATS).write_text(json.dumps(statistics(dims=6)))
    with pytest.raises(ValueError, match=r"'franka' action statistics cover 6 dims, the heads' action_dim is 7"):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)
    (copy / STATS).write_text(json.dumps(statistics(keys=("franka", "bridge"))))
    with pytest.raises(ValueError, match=r"several datasets \['franka', 'bridge'\]; pass asset_id="):
        MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm)
    with MultiTaskPolicy.from_pretrained(copy, robot="libero", vlm_config=vlm, asset_id="bridge",
                                         heads=["oft"]) as policy:
        assert policy.action_norm.unnorm_key == "bridge"
