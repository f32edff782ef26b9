"""The one checkpoint-convention overrides record: validated once, frozen, and the same fields wherever the overrides
are taken (from_pretrained's keywords, the CLI flags, the eval config and the results it records)."""
import argparse
import dataclasses
import inspect

import pytest

from oxygen_gym.eval.libero.eval_config import (ABSENT_DEFAULTS, CONVENTION_FIELDS, LIVE_DEFAULTS, RESULT_FIELDS,
                                                EvalConfig)
from oxygen_gym.policies import MultiTaskPolicy
from oxygen_gym.policies.checkpoints import ConventionOverrides
from oxygen_gym.policies.checkpoints.overrides import OverrideError


def test_the_record_is_frozen_and_owns_its_camera_map():
    cams = {"base": "image"}
    o = ConventionOverrides(camera_map=cams, action_horizon=8)
    cams["wrist"] = "image2"
    assert o.camera_map == {"base": "image"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.action_horizon = 9
    assert o.replace(action_horizon=9).action_horizon == 9 and o.action_horizon == 8


@pytest.mark.parametrize("field, value", [
    ("discrete_state", 1), ("action_horizon", 0), ("action_horizon", True), ("action_horizon", 2.0),
    ("family", "lerobot"), ("image_resize", "cv2"), ("asset_id", 3), ("revision", 1), ("camera_map", ["base"]),
    ("norm_stats", 0.5),
])
def test_unusable_values_fail_naming_the_field(field, value):
    with pytest.raises(OverrideError, match=field) as err:
        ConventionOverrides(**{field: value})
    assert err.value.field == field and isinstance(err.value, ValueError)


def test_kwargs_round_trip_and_unknown_names():
    kw = {"norm_stats": "identity", "discrete_state": False, "family": "openpi"}
    o = ConventionOverrides.from_kwargs(**kw)
    assert o.as_kwargs() == kw
    assert o.as_kwargs(("family", "tokenizer")) == {"family": "openpi"}
    with pytest.raises(TypeError, match="tokeniser"):
        ConventionOverrides.from_kwargs(tokeniser="x")


def test_from_pretrained_takes_exactly_the_records_fields_as_keywords():
    params = inspect.signature(MultiTaskPolicy.from_pretrained).parameters
    for name in ConventionOverrides.names():
        assert params[name].default is None and params[name].kind is inspect.Parameter.KEYWORD_ONLY, name


def test_flags_build_the_record_and_name_a_bad_flag():
    parser = argparse.ArgumentParser()
    ConventionOverrides.add_arguments(parser)
    args = parser.parse_args(["--camera-map", "base=image,wrist=image2", "--no-discrete-state", "--action-horizon",
                              "16", "--family", "openpi", "--tokenizer", "/t/tokenizer.model"])
    assert ConventionOverrides.from_args(args) == ConventionOverrides(
        tokenizer="/t/tokenizer.model", camera_map={"base": "image", "wrist": "image2"}, discrete_state=False,
        action_horizon=16, family="openpi")
    assert ConventionOverrides.from_args(parser.parse_args([])) == ConventionOverrides()
    with pytest.raises(ValueError, match="--action-horizon"):
        ConventionOverrides.from_args(parser.parse_args(["--action-horizon", "0"]))
    with pytest.raises(ValueError, match="--family"):
        ConventionOverrides.from_args(parser.parse_args(["--family", "jax"]))


def test_the_eval_config_records_the_overrides_under_their_own_names():
    assert set(CONVENTION_FIELDS) <= {f.name for f in dataclasses.fields(EvalConfig)}
    # resumed runs and merges compare these keys of config.json: they must not change; the live-control keys came
    # later, and a folder without them reads as a run without --live (LIVE_DEFAULTS)
    assert RESULT_FIELDS == ("env", "checkpoint", "robot", "mode", "decode_budget", "target_action_hz",
                             "language_tasks", "protocol", "max_steps", "fast_render", "dtype", "fast_reset",
                             "norm_stats", "asset_id", "camera_map", "discrete_state", "action_horizon", "family",
                             "noise_scale", "replan", "ensemble", "live", "execution", "handover", "queue_threshold")
    assert set(LIVE_DEFAULTS) == set(RESULT_FIELDS[-4:]) and all(v is None for v in LIVE_DEFAULTS.values())
    # a folder from before --noise-scale sampled at 1, one from before --replan ran the protocol's replan, one from
    # before --ensemble executed chunks without ensembling, one from before the sim plug-ins ran LIBERO
    assert ABSENT_DEFAULTS == {**LIVE_DEFAULTS, "env": "libero", "noise_scale": 1.0, "replan": None, "ensemble": None}
    cfg = EvalConfig(protocol="lerobot", norm_stats="identity", camera_map={"base": "image"})
    assert cfg.overrides() == ConventionOverrides(norm_stats="identity", camera_map={"base": "image"},
                                                  image_resize="torch")
    assert EvalConfig.from_dict(cfg.to_dict()).overrides() == cfg.overrides()
    with pytest.raises(ValueError, match="family"):
        EvalConfig(family="jax")


def test_serve_takes_the_convention_flags():
    from oxygen_gym.serve.serve_command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--checkpoint", "owner/x", "--norm-stats", "identity", "--asset-id", "droid"])
    assert ConventionOverrides.from_args(args).as_kwargs() == {"norm_stats": "identity", "asset_id": "droid"}
