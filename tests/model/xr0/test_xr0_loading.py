"""MultiTaskPolicy.from_pretrained on a Xiaomi-Robotics-0 folder in the published layout: the family is detected from
the folder, the weights load strictly, and the robot_type's statistics unnormalise the actions with XR0's formula."""
import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer, builtin_qwen_tokenizer
from oxygen_gym.model.xr0.xr0_checkpoint import INDEX
from oxygen_gym.policies import MultiTaskPolicy
from oxygen_gym.policies.checkpoints import CheckpointGuessWarning
from xr0_layout import libero_obs, tiny_stats, write_preprocessor, write_xr0

VIEWS = {"base": "base", "wrist": "wrist_left"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_xr0(tmp_path_factory.mktemp("xr0") / "ckpt")


@pytest.fixture
def folder(written, tmp_path):
    return shutil.copytree(written[1], tmp_path / "ckpt")


def _quiet(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointGuessWarning)
        return MultiTaskPolicy.from_pretrained(**kwargs)


def _by_hand(model, robot_type: str, obs, horizon: int = 10) -> np.ndarray:
    """The in-memory model with the mask set by hand, its model-space actions unnormalised as XR0 does."""
    entry = tiny_stats()["action_config"][robot_type]
    mean, std = np.asarray(entry["mean"]), np.asarray(entry["std"])
    mask = (std.reshape(-1, 16) > 1e-5).any(0)
    model.dim_mask = torch.from_numpy(mask)
    try:
        ref = MultiTaskPolicy(model, QwenTokenizer(builtin_qwen_tokenizer()), robot="libero", camera_slots=VIEWS,
                              action_horizon=horizon, chunk=30, seed=0, num_slots=1)
        raw, _ = ref.act(obs)  # identity normalisers: model space, cut to (horizon, 7)
    finally:
        model.dim_mask = None
    if mean.ndim == 2:
        mean, std = mean[:horizon], std[:horizon]
    return (raw.astype(np.float64) * (std[..., :7] + 1e-6) + mean[..., :7]).astype(np.float32)


@pytest.mark.parametrize("robot_type", ["libero", "franka"])  # per-step [30, 16] and per-dim [16] statistics
def test_actions_match_the_in_memory_model_unnormalised_by_hand(written, robot_type):
    model, root = written
    obs = libero_obs(1)
    policy = _quiet(name_or_path=root, robot="libero", asset_id=robot_type, seed=0, num_slots=1)
    got, _ = policy.act(obs)
    want = _by_hand(model, robot_type, obs)
    assert got.shape == (10, 7)
    # relative: dim 3 has std 2e-5 and mean 0, so a missing +1e-6 is a 5% error there
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
    assert np.abs(got[:, 3]).max() < 1e-3 < np.abs(got[:, :3]).max()  # the tiny-std dim really is in robot units


def test_conventions_and_model(written):
    root = written[1]
    with pytest.warns(CheckpointGuessWarning, match="action_horizon="):
        policy = MultiTaskPolicy.from_pretrained(root, robot="libero", asset_id="libero", num_slots=1)
    conv = policy.conventions
    assert (conv.family, conv.robot_type, conv.asset_id, conv.robot_types) == ("xr0", "libero", "libero",
                                                                               ["libero", "franka"])
    assert conv.camera_slots == VIEWS and policy.io.views == VIEWS
    assert (policy.horizon, policy.chunk, conv.n_actions) == (10, 30, 10)
    assert policy.model.dim_mask.tolist() == [True] * 7 + [False] * 9
    assert conv.tokenizer_source.endswith("(its own)") and conv.stats_source.endswith("preprocessor_config.json")
    assert policy.model.dtype == torch.float32
    # strict and exact: every stored tensor landed where it belongs
    ref = written[0]
    for k, v in ref.state_dict().items():
        assert torch.equal(policy.model.state_dict()[k], v), k
    assert policy.model.vlm.lm_head.weight is policy.model.vlm.model.language_model.embed_tokens.weight
    quiet = _quiet(name_or_path=root, robot="libero", asset_id="libero", action_horizon=4, num_slots=1,
                   camera_map={"base": "base"})
    assert quiet.horizon == 4 and quiet.conventions.warnings == [] and quiet.io.views == {"base": "base"}


def test_one_robot_type_is_used_with_a_warning(folder):
    stats = tiny_stats()
    del stats["action_config"]["libero"]
    write_preprocessor(folder, stats)
    with pytest.warns(CheckpointGuessWarning, match=r"using 'franka', the only one.*asset_id="):
        policy = MultiTaskPolicy.from_pretrained(folder, robot="libero", action_horizon=10, num_slots=1)
    assert policy.conventions.robot_type == "franka"


def test_several_robot_types_need_asset_id(written):
    with pytest.raises(ValueError, match=r"several robot types \['libero', 'franka'\]; pass asset_id="):
        MultiTaskPolicy.from_pretrained(written[1], robot="libero", action_horizon=10)
    with pytest.raises(ValueError, match=r"asset_id='droid': no such robot_type .*\['libero', 'franka'\]"):
        MultiTaskPolicy.from_pretrained(written[1], robot="libero", asset_id="droid")


def test_statistics_of_another_robot_are_refused(folder):
    stats = tiny_stats()
    wide = stats["action_config"]["franka"]
    wide["std"] = [0.5] * 14 + [0.0, 0.0]  # a bimanual robot: 14 active dims
    write_preprocessor(folder, stats)
    with pytest.raises(ValueError, match=r"'franka' moves 14 action dims; robot 'libero' has 7"):
        MultiTaskPolicy.from_pretrained(folder, robot="libero", asset_id="franka")


def test_identity_and_missing_statistics(folder):
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(ValueError, match=r"no preprocessor_config.json.*norm_stats='identity'"):
        MultiTaskPolicy.from_pretrained(folder, robot="libero")
    policy = _quiet(name_or_path=folder, robot="libero", norm_stats="identity", num_slots=1)
    assert policy.model.dim_mask is None and policy.conventions.robot_type is None
    write_preprocessor(folder / "..", tiny_stats())
    policy = _quiet(name_or_path=folder, robot="libero", norm_stats=folder / "..", asset_id="franka", num_slots=1)
    assert policy.conventions.robot_type == "franka"


def test_missing_tokenizer(folder):
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "added_tokens.json",
                 "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink()
    with pytest.raises(ValueError, match=r"^tokenizer: checkpoint .* ships no tokenizer files.*pass tokenizer="):
        MultiTaskPolicy.from_pretrained(folder, robot="libero", asset_id="libero")
    policy = _quiet(name_or_path=folder, robot="libero", asset_id="libero", num_slots=1,
                    tokenizer=QwenTokenizer(builtin_qwen_tokenizer()))
    assert policy.conventions.tokenizer_source == "tokenizer= object"


def test_a_wrong_tokenizer_is_refused(folder):
    other = folder / "other"  # a readable Qwen tokenizer, but the config's image pad id points elsewhere in it
    builtin_qwen_tokenizer().save_pretrained(str(other))
    cfg = json.loads((folder / "config.json").read_text())
    cfg["vlm_config"]["image_token_id"] = 100  # a byte, not <|image_pad|>
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"id 100 \(config.json image_token_id\) is .*not '<\|image_pad\|>'"):
        MultiTaskPolicy.from_pretrained(folder, robot="libero", asset_id="libero", tokenizer=other)


def _drop(folder, key, keep_in_index=False):
    from safetensors.torch import load_file, save_file

    index = json.loads((folder / INDEX).read_text())
    shard = index["weight_map"][key]
    tensors = load_file(str(folder / shard))
    del tensors[key]
    save_file(tensors, str(folder / shard), metadata={"format": "pt"})
    if not keep_in_index:
        del index["weight_map"][key]
        (folder / INDEX).write_text(json.dumps(index))
    return shard


@pytest.mark.parametrize("key", ["dit.layers.1.mlp.up_proj.weight", "vlm.model.language_model.layers.2.mlp.up_proj.weight"])
def test_a_missing_weight_key_names_key_and_shard(folder, key):
    from oxygen_gym.model.xr0.xr0_checkpoint import CheckpointKeyError

    shard = _drop(folder, key, keep_in_index=True)
    with pytest.raises(CheckpointKeyError, match=rf"missing key '{key}': .*places it in .*{shard}, which does not"):
        MultiTaskPolicy.from_pretrained(folder, robot="libero", asset_id="libero")
    index = json.loads((folder / INDEX).read_text())
    del index["weight_map"][key]
    (folder / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointKeyError, match=rf"missing key\(s\) \['{key}'\]: in none of its shards \[.*{shard}"):
        MultiTaskPolicy.from_pretrained(folder, robot="libero", asset_id="libero")


def test_family_xr0_on_another_folder(lerobot_fixture_dir, tmp_path):
    from oxygen_gym.policies.checkpoints import UnsupportedCheckpointError
    from oxygen_gym.policies.model_io import checkpoint_family

    root = lerobot_fixture_dir / "checkpoint"
    assert checkpoint_family(root).name == "pi05"
    with pytest.raises(UnsupportedCheckpointError, match=r"family='xr0': .* is not an XR0 checkpoint .*lacks"):
        MultiTaskPolicy.from_pretrained(root, family="xr0")
    with pytest.raises(UnsupportedCheckpointError, match=r"family='xr0': .* \(no config.json; "):
        MultiTaskPolicy.from_pretrained(tmp_path, family="xr0")
    with pytest.raises(ValueError, match=r"family must be one of \(.*'openpi-training', 'xr0', 'starvla'\), got 'jax'"):
        MultiTaskPolicy.from_pretrained(root, family="jax")


def test_family_hooks_detect_from_the_folder(written, lerobot_fixture_dir):
    from oxygen_gym.policies.model_io import checkpoint_family, checkpoint_family_names

    assert checkpoint_family(written[1]).name == "xr0"
    assert checkpoint_family(lerobot_fixture_dir / "checkpoint", "xr0").name == "xr0"
    assert "xr0" in checkpoint_family_names() and "ours" in checkpoint_family_names()


def test_convention_argument_errors(written):
    root = written[1]
    with pytest.raises(ValueError, match=r"action_horizon=31: the checkpoint denoises 30 actions"):
        MultiTaskPolicy.from_pretrained(root, robot="libero", asset_id="libero", action_horizon=31)
    with pytest.raises(ValueError, match=r"camera_map: 'side' is not a camera of robot 'libero'"):
        MultiTaskPolicy.from_pretrained(root, robot="libero", asset_id="libero", camera_map={"side": "base"})
    with pytest.raises(ValueError, match=r"camera_map: two cameras map to the view 'base'"):
        MultiTaskPolicy.from_pretrained(root, robot="libero", asset_id="libero",
                                        camera_map={"base": "base", "wrist": "base"})
    with pytest.raises(ValueError, match=r"discrete_state: XR0 feeds the state to its action expert"):
        MultiTaskPolicy.from_pretrained(root, robot="libero", asset_id="libero", discrete_state=True)
    with pytest.raises(ValueError, match=r"robot_type 'libero' moves 7 action dims; robot 'aloha' has 14: wrong "
                                         r"robot_type \(asset_id=\) or wrong robot"):
        MultiTaskPolicy.from_pretrained(root, robot="aloha", asset_id="libero")
