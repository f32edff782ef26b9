"""Real checkpoint layouts (tests/helpers/checkpoint_layouts.py) prepared as their authors' evals prepare them: cameras,
normalisation in the declared mode, prompt format, chunk length, and a clear error for every layout or flag we refuse.

Hand computations follow the references directly: lerobot `normalize_processor.py` / `processor_pi05.py`,
openpi `transforms.py` / `models/tokenizer.py` / `training/config.py`.
"""
import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from checkpoint_layouts import feature_stats, openpi_norm_stats, tiny_model, write_lerobot, write_openpi

from oxygen_gym.model import builtin_tokenizer, save_pretrained
from oxygen_gym.model.pi05.prompt import preprocess_image
from oxygen_gym.policies import MultiTaskPolicy
from oxygen_gym.policies.checkpoints import CheckpointGuessWarning, UnsupportedCheckpointError, resolve_conventions
from oxygen_gym.policies.multitask import head_noise_seed

INSTRUCTION = "put the bowl_on the plate"
BINS = np.linspace(-1, 1, 257)[:-1]
# act() goes through the cached engine, the hand computation through the uncached sample_actions: measured max
# difference 3.5e-8..5.1e-8 of the largest action (fp32, 3 observations each, lerobot and openpi layouts); ~20x.
ATOL = 1e-6


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def lerobot_stats():
    return {"observation.state": feature_stats(8, 1), "action": feature_stats(7, 2),
            "observation.images.image": {k: np.full(3, 0.5) for k in ("mean", "std", "min", "max", "q01", "q99")}}


@pytest.fixture(scope="module")
def openpi_stats():
    return {"state": feature_stats(8, 3), "actions": feature_stats(7, 4)}


def libero_obs(seed=0, size=256):
    rng = np.random.default_rng(seed)
    return {"images": {"base": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
                       "wrist": rng.integers(0, 256, (size, size, 3), dtype=np.uint8)},
            "state": rng.normal(0, 1, 8).astype(np.float32), "prompt": INSTRUCTION}


def load(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = MultiTaskPolicy.from_pretrained(path, **kw)
    return policy, [str(w.message) for w in caught if issubclass(w.category, CheckpointGuessWarning)]


def expected_actions(model, policy, obs, chunk, n, unnormalize):
    """The model's raw chunk for act()'s own inputs and noise, cut to n x robot dims, then unnormalised by hand."""
    inputs = policy.model_inputs(obs)
    noise = torch.randn(1, chunk, 32, generator=torch.Generator().manual_seed(head_noise_seed(policy.seed, 0, "actions")))
    raw = model.sample_actions(inputs.images, inputs.image_masks, inputs.tokens, inputs.token_masks, noise=noise,
                               num_steps=10)
    return unnormalize(raw[0, :n, :policy.robot.action_dim].double().numpy())


def prompt_ids(text_state_bins=None, instruction=INSTRUCTION):
    tok = builtin_tokenizer()
    cleaned = instruction.strip().replace("_", " ")
    if text_state_bins is None:  # pi0 form: openpi tokenizes "\n" on its own
        return tok.encode(cleaned, bos=True) + tok.encode("\n")
    return tok.encode(f"Task: {cleaned}, State: {' '.join(map(str, text_state_bins))};\nAction: ", bos=True)


def token_ids(policy, obs):
    inputs = policy.model_inputs(obs)
    return inputs.tokens[0][inputs.token_masks[0]].tolist()


# ------------------------------------------------------------------------------------------------ lerobot 0.4.4
@pytest.fixture(scope="module")
def lerobot04(tmp_path_factory, model, lerobot_stats):
    return write_lerobot(tmp_path_factory.mktemp("lr") / "pi05_libero_finetuned_v044", model, "0.4.4", stats=lerobot_stats)


def test_lerobot_044_libero_layout_is_fed_as_lerobot_feeds_it(lerobot04, model, lerobot_stats):
    policy, warned = load(lerobot04, robot="libero")
    conv = policy.conventions
    assert conv.family == "lerobot<=0.4.4"
    assert len(warned) == 1 and "family='lerobot>=0.5'" in warned[0]  # the only guess, naming its override
    assert conv.camera_slots == {"base": "image", "wrist": "image2"}
    assert conv.masked_slots == ["empty_camera_0"]
    obs = libero_obs()
    inputs = policy.model_inputs(obs)
    assert [bool(m) for m in inputs.image_masks] == [True, True, False]
    torch.testing.assert_close(inputs.images[0][0], preprocess_image(obs["images"]["base"], 224, "torch"))
    torch.testing.assert_close(inputs.images[1][0], preprocess_image(obs["images"]["wrist"], 224, "torch"))
    # MEAN_STD with lerobot's eps, then zero-padded to 32 before binning (lerobot 0.4.4)
    st = lerobot_stats["observation.state"]
    norm = (obs["state"].astype(np.float64) - st["mean"]) / (st["std"] + 1e-8)
    bins = np.digitize(np.pad(norm, (0, 24)), BINS) - 1
    assert token_ids(policy, obs) == prompt_ids(bins)
    # chunk 50 denoised, n_action_steps 10 returned, unnormalised x * std + mean (no eps on the way back)
    act = lerobot_stats["action"]
    want = expected_actions(model, policy, obs, 50, 10, lambda a: a * act["std"] + act["mean"])
    actions, _ = policy.act(obs)
    assert actions.shape == (10, 7)
    np.testing.assert_allclose(actions, want, atol=ATOL * np.abs(want).max(), rtol=0)


# ------------------------------------------------------------------------------------------------ lerobot 0.5
def test_lerobot_05_quantiles_unpadded_bins_and_zero_span_eps(tmp_path, model):
    stats = {"observation.state": feature_stats(8, 5), "action": feature_stats(7, 6)}
    stats["observation.state"]["q99"][3] = stats["observation.state"]["q01"][3]  # a constant dim: eps, not 0/0
    quant = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
    root = write_lerobot(tmp_path / "lr05", model, "0.5.1", stats=stats, norm_map=quant)
    policy, warned = load(root, robot="libero")
    assert policy.conventions.family == "lerobot>=0.5" and warned == []
    obs = libero_obs(1)
    st = stats["observation.state"]
    span = st["q99"] - st["q01"]
    norm = 2.0 * (obs["state"] - st["q01"]) / np.where(span == 0, 1e-8, span) - 1.0
    assert token_ids(policy, obs) == prompt_ids(np.digitize(norm, BINS) - 1)  # 8 bins: unpadded
    a = stats["action"]
    want = expected_actions(model, policy, obs, 50, 10, lambda x: (x + 1.0) * (a["q99"] - a["q01"]) / 2.0 + a["q01"])
    actions, _ = policy.act(obs)
    np.testing.assert_allclose(actions, want, atol=ATOL * np.abs(want).max(), rtol=0)


def test_processor_norm_map_wins_over_config_json(tmp_path, model, lerobot_stats):
    root = write_lerobot(tmp_path / "lr", model, "0.5.1", stats=lerobot_stats)
    pre = json.loads((root / "policy_preprocessor.json").read_text())
    for step in pre["steps"]:
        if step["registry_name"] == "normalizer_processor":
            step["config"]["norm_map"]["STATE"] = "MIN_MAX"
    (root / "policy_preprocessor.json").write_text(json.dumps(pre))
    policy, warned = load(root, robot="libero")
    assert policy.state_norm.mode == "MIN_MAX" and any("policy_preprocessor.json says MIN_MAX" in w for w in warned)


@pytest.mark.parametrize("mode, lo, hi", [("MIN_MAX", "min", "max"), ("QUANTILE10", "q10", "q90")])
def test_lerobot_range_modes_match_the_formula(mode, lo, hi):
    from oxygen_gym.policies.normalize import Normalizer

    st = feature_stats(6, 7)
    x = np.random.default_rng(0).normal(0, 2, (4, 6))
    n = Normalizer(mode, st, formula="lerobot", eps=1e-8)
    np.testing.assert_allclose(n.normalize(x), 2 * (x - st[lo]) / (st[hi] - st[lo]) - 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(n.unnormalize(n.normalize(x)), x, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ openpi
def test_openpi_converted_pi05_libero_prompt_without_state_and_whole_chunk(tmp_path, model, openpi_stats):
    root = write_openpi(tmp_path / "pi05_libero_pytorch", model, stats=openpi_stats, horizon=10)
    policy, warned = load(root, robot="libero")
    conv = policy.conventions
    assert conv.family == "openpi" and conv.asset_id == "physical-intelligence/libero"
    assert len(warned) == 1 and "discrete_state=" in warned[0]  # openpi's converter does not record it
    assert conv.camera_slots == {"base": "base_0_rgb", "wrist": "left_wrist_0_rgb"}
    obs = libero_obs(2)
    inputs = policy.model_inputs(obs)
    assert [bool(m) for m in inputs.image_masks] == [True, True, False]  # libero_policy masks the right wrist
    torch.testing.assert_close(inputs.images[0][0], preprocess_image(obs["images"]["base"], 224, "pil"))
    assert token_ids(policy, obs) == prompt_ids(None)  # pi05_libero: discrete_state_input=False
    a = openpi_stats["actions"]
    want = expected_actions(model, policy, obs, 10, 10, lambda x: (x + 1) / 2 * (a["q99"] - a["q01"] + 1e-6) + a["q01"])
    actions, _ = policy.act(obs)
    assert actions.shape == (10, 7)
    np.testing.assert_allclose(actions, want, atol=ATOL * np.abs(want).max(), rtol=0)


def test_openpi_training_checkpoint_without_config_guesses_and_says_so(tmp_path, model, openpi_stats):
    stats = {"state": feature_stats(8, 8), "actions": feature_stats(8, 9)}
    root = write_openpi(tmp_path / "30000", model, asset_ids=("droid",), stats=stats, training=True)
    policy, warned = load(root, robot="droid")
    assert policy.conventions.family == "openpi-training"
    assert policy.chunk == 15 and policy.horizon == 15  # openpi's pi05_droid config
    assert any("action_horizon=" in w for w in warned) and any("discrete_state=" in w for w in warned)
    obs = {"images": {"exterior": np.zeros((180, 320, 3), np.uint8), "wrist": np.zeros((180, 320, 3), np.uint8)},
           "state": np.linspace(-1, 1, 8).astype(np.float32), "prompt": INSTRUCTION}
    s = stats["state"]
    norm = (obs["state"] - s["q01"]) / (s["q99"] - s["q01"] + 1e-6) * 2 - 1
    assert token_ids(policy, obs) == prompt_ids(np.digitize(norm, BINS) - 1)  # openpi bins the unpadded state
    policy2, warned2 = load(root, robot="droid", action_horizon=16, discrete_state=True)
    assert policy2.chunk == 16 and policy2.horizon == 16 and warned2 == []


def test_openpi_several_asset_ids_need_asset_id(tmp_path, model, openpi_stats):
    root = write_openpi(tmp_path / "ck", model, asset_ids=("physical-intelligence/libero", "other"), stats=openpi_stats)
    with pytest.raises(ValueError, match="asset_id"):
        resolve_conventions(root, "libero")
    conv = resolve_conventions(root, "libero", asset_id="other")
    assert conv.asset_id == "other" and conv.stats_source == "assets/other/norm_stats.json"
    assert any("discrete_state=" in w for w in conv.warnings)  # not a known config: the pi0.5 default, said


# ------------------------------------------------------------------------------------------------ ours
def test_our_family_round_trips_exactly_with_no_warnings(tmp_path):
    import dataclasses

    from oxygen_gym.model import build_model

    cfg = dataclasses.replace(tiny_model().config, discrete_state=True, state_pad_to=None, action_horizon=12,
                              image_slots=("base_0_rgb", "left_wrist_0_rgb"))
    model = build_model(cfg, seed=2)
    stats = {"state": openpi_norm_stats({"s": feature_stats(8, 10)})["norm_stats"]["s"],
             "actions": openpi_norm_stats({"a": feature_stats(7, 11)})["norm_stats"]["a"]}
    from oxygen_gym.policies.checkpoints.resolve import _stats_from_dict

    root = save_pretrained(model, tmp_path / "ours", _stats_from_dict(stats), n_action_steps=6,
                           normalization={"STATE": "MEAN_STD"})
    policy, warned = load(root, robot="libero")
    assert warned == [] and policy.conventions.family == "ours"
    assert policy.model.config == cfg
    assert (policy.chunk, policy.horizon) == (12, 6)
    assert policy.state_norm.mode == "MEAN_STD" and policy.action_norm.mode == "QUANTILES"
    assert policy.conventions.tokenizer_source.startswith("built-in")
    obs = libero_obs(3)
    s = stats["state"]
    norm = (obs["state"] - np.asarray(s["mean"])) / (np.asarray(s["std"]) + 1e-6)
    assert token_ids(policy, obs) == prompt_ids(np.digitize(norm, BINS) - 1)
    a = {k: np.asarray(v) for k, v in stats["actions"].items()}
    want = expected_actions(model, policy, obs, 12, 6, lambda x: (x + 1) / 2 * (a["q99"] - a["q01"] + 1e-6) + a["q01"])
    actions, _ = policy.act(obs)
    np.testing.assert_allclose(actions, want, atol=ATOL * np.abs(want).max(), rtol=0)


def test_trained_model_names_load_as_our_family_or_say_not_installed(tmp_path, monkeypatch):
    from oxygen_gym.model import trained

    folder = tmp_path / "libero-spatial"
    monkeypatch.setitem(trained.TRAINED_MODELS, "libero-spatial", folder)
    with pytest.raises(FileNotFoundError, match="'libero-spatial' is not installed"):
        MultiTaskPolicy.from_pretrained("libero-spatial")
    save_pretrained(tiny_model(), folder, norm_stats=None)
    policy, warned = load("libero-spatial", norm_stats="identity")
    assert policy.conventions.family == "ours" and policy.conventions.root == folder and warned == []


# ------------------------------------------------------------------------------------------------ refusals
def _edit_config(root, **changes):
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(changes)
    (root / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("case, pattern", [
    ("peft", "PEFT.*merge_and_unload"),
    ("sharded", "sharded.*save_file"),
    ("orbax", "convert_jax_model_to_pytorch"),
    ("relative", "use_relative_actions"),
    ("type", "only pi05"),
    ("no_stats", "norm_stats='identity'"),
    ("robot_dims", "wrong robot"),
    ("no_camera", "camera_map"),
])
def test_bad_checkpoints_raise_saying_what_to_do(tmp_path, model, lerobot_stats, case, pattern):
    root = write_lerobot(tmp_path / "ck", model, "0.4.4", stats=None if case == "no_stats" else lerobot_stats)
    if case == "peft":
        (root / "adapter_config.json").write_text("{}")
    elif case in ("sharded", "orbax"):
        (root / "model.safetensors").unlink()
        if case == "sharded":
            (root / "model.safetensors.index.json").write_text("{}")
        else:
            (root / "params").mkdir()
    elif case == "relative":
        _edit_config(root, use_relative_actions=True)
    elif case == "type":
        _edit_config(root, type="pi0")
    elif case == "robot_dims":
        cfg = json.loads((root / "config.json").read_text())
        cfg["input_features"]["observation.state"]["shape"] = [14]
        (root / "config.json").write_text(json.dumps(cfg))
    elif case == "no_camera":
        cfg = json.loads((root / "config.json").read_text())
        feats = cfg["input_features"]
        names = {"observation.images.image": "observation.images.top", "observation.images.image2": "observation.images.front"}
        cfg["input_features"] = {names.get(k, k): v for k, v in feats.items()}
        (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises((ValueError, FileNotFoundError), match=pattern):
        MultiTaskPolicy.from_pretrained(root, robot="libero")


def test_camera_map_feeds_unknown_feature_names(tmp_path, model, lerobot_stats):
    root = write_lerobot(tmp_path / "ck", model, "0.4.4", stats=lerobot_stats, cameras=("front", "hand"))
    with pytest.raises(ValueError, match="camera_map"):
        resolve_conventions(root, "libero")
    conv = resolve_conventions(root, "libero", camera_map={"base": "observation.images.front", "wrist": "hand"})
    assert conv.camera_slots == {"base": "front", "wrist": "hand"}
    with pytest.raises(ValueError, match="not a camera of robot"):
        resolve_conventions(root, "libero", camera_map={"left": "front"})
    with pytest.raises(ValueError, match="image features are"):
        resolve_conventions(root, "libero", camera_map={"base": "nope"})


def test_user_norm_stats_and_identity(tmp_path, model, openpi_stats):
    root = write_lerobot(tmp_path / "pi05_base", model, "0.4.4", stats=None)
    stats_file = tmp_path / "norm_stats.json"
    stats_file.write_text(json.dumps(openpi_norm_stats(openpi_stats)))
    conv = resolve_conventions(root, "libero", norm_stats=stats_file)
    assert conv.state_norm.mode == "MEAN_STD" and conv.state_norm.formula == "lerobot"
    np.testing.assert_allclose(conv.state_norm.stats["mean"], openpi_stats["state"]["mean"], rtol=1e-6)
    conv = resolve_conventions(root, "libero", norm_stats="identity")
    assert conv.state_norm.mode == conv.action_norm.mode == "IDENTITY"


def test_tokenizer_search_order_and_error_lists_every_place(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from oxygen_gym.model.tokenizer import PALIGEMMA_VOCAB, check_tokenizer_vocab, find_tokenizer

    builtin = builtin_tokenizer().path
    ck, env, home, hf = (tmp_path / n for n in ("ck", "env", "openpi", "hf"))
    ck.mkdir()
    monkeypatch.delenv("OXYGEN_GYM_TOKENIZER", raising=False)
    monkeypatch.setenv("OPENPI_DATA_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf))
    with pytest.raises(FileNotFoundError) as err:
        find_tokenizer(2048, ck)
    for place in ("tokenizer.model", "paligemma_tokenizer.model", "OXYGEN_GYM_TOKENIZER", "openpi cache",
                  "Hugging Face cache", "tokenizer=PATH"):
        assert place in str(err.value)
    snap = hf / "models--google--paligemma-3b-pt-224" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (hf / "models--google--paligemma-3b-pt-224" / "refs").mkdir()
    (hf / "models--google--paligemma-3b-pt-224" / "refs" / "main").write_text("abc123")
    shutil.copy(builtin, snap / "tokenizer.model")
    assert find_tokenizer(2048, ck)[1].startswith("Hugging Face cache")
    (home / "big_vision").mkdir(parents=True)
    shutil.copy(builtin, home / "big_vision" / "paligemma_tokenizer.model")
    assert find_tokenizer(2048, ck)[1].startswith("openpi cache")
    env.mkdir()
    shutil.copy(builtin, env / "tokenizer.model")
    monkeypatch.setenv("OXYGEN_GYM_TOKENIZER", str(env))
    assert find_tokenizer(2048, ck)[1].startswith("$OXYGEN_GYM_TOKENIZER")
    shutil.copy(builtin, ck / "paligemma_tokenizer.model")
    assert find_tokenizer(2048, ck)[1].startswith("checkpoint folder")
    with pytest.raises(ValueError, match="PaliGemma's vocabulary"):  # a 1024-piece model for a 257152-vocab checkpoint
        check_tokenizer_vocab(builtin_tokenizer(), PALIGEMMA_VOCAB, "x")


def test_inspect_prints_what_the_policy_will_feed(lerobot04, capsys):
    from oxygen_gym.cli import main

    assert main(["inspect", str(lerobot04), "--robot", "libero"]) == 0
    out = capsys.readouterr().out
    for text in ("family:     lerobot<=0.4.4", "868,576 parameters", "BF16 x", "F32 x", "base         -> image",
                 "masked slots: empty_camera_0", "MEAN_STD from mean/std over 8 dims, eps 1e-08 (lerobot)",
                 "50 actions denoised; act() returns 10", "zero-padded to 32", "'Task: ", "tokenizer:  built-in",
                 "family='lerobot>=0.5'"):
        assert text in out, text
    assert main(["inspect", str(lerobot04), "--family", "lerobot>=0.5", "--camera-map", "base=image2,wrist=image"]) == 0
    out = capsys.readouterr().out
    assert "base         -> image2" in out and "unpadded" in out and "warnings:   none" in out
