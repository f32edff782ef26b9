"""A noise scale per action dimension, and a checkpoint's declared one (config.json `noise_scale`).

`[0, 0, 0, 0, 0, 0, 1]` starts LIBERO's arm dims from zero and the gripper (and the padding past the list) from the
reference sampler's noise, exactly. A checkpoint may declare it: `MultiTaskPolicy.from_pretrained`, eval, DAgger
collection and the open-loop check then sample with it unless told otherwise, and eval records what ran, so a folder
run with the reference sampler is never resumed as one run with the declaration."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from oxygen_gym import MultiTaskPolicy
from oxygen_gym.model import CheckpointError, build_model, save_pretrained
from oxygen_gym.policies.action_noise import check_noise_scale, noise_multiplier, parse_noise_scale
from oxygen_gym.policies.checkpoints.noise_scale import declared_noise_scale, resolved_noise_scale

from declared_checkpoints import STATS, declared_and_plain

ARM_STILL = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two tiny checkpoints of our family (chunk 50): one declaring a deterministic arm, one declaring nothing."""
    return declared_and_plain(tmp_path_factory.mktemp("ckpt"), noise_scale=list(ARM_STILL))


def test_each_dim_is_scaled_exactly_and_the_dims_past_the_list_keep_unit_noise():
    ref = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=3)
    arm = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=3, noise_scale=list(ARM_STILL))
    try:
        assert arm.noise_scale == ARM_STILL
        for frame in (0, 4):
            a, b = ref.frame_noise(frame)["actions"], arm.frame_noise(frame)["actions"]
            assert a.shape[-1] > len(ARM_STILL)  # a padded head: the dims past the list are there to keep
            assert torch.count_nonzero(b[..., :6]) == 0
            torch.testing.assert_close(b[..., 6:], a[..., 6:], rtol=0, atol=0)
            assert a[..., :6].abs().sum() > 0
        same = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=3, noise_scale=[1.0] * 7)
        try:  # a list of ones is the reference sampler bit for bit
            torch.testing.assert_close(same.frame_noise(2)["actions"], ref.frame_noise(2)["actions"], rtol=0, atol=0)
        finally:
            same.close()
    finally:
        ref.close()
        arm.close()


def test_a_list_longer_than_the_head_or_empty_is_a_clear_error():
    with pytest.raises(ValueError, match="33 scales but head 'actions' has 32 action dims"):
        MultiTaskPolicy.from_pretrained("tiny", robot="libero", noise_scale=[1.0] * 33)
    with pytest.raises(ValueError, match="empty list"):
        check_noise_scale([])
    assert noise_multiplier(0.5, 32) == 0.5
    assert noise_multiplier((0.0, 1.0), 4).tolist() == [0.0, 1.0, 1.0, 1.0]


def test_the_command_line_form():
    assert parse_noise_scale("0.5") == 0.5
    assert parse_noise_scale("0,0,0,0,0,0,1") == ARM_STILL
    assert parse_noise_scale(" 0, 0.5 ") == (0.0, 0.5)
    for bad in ("", "a", "0,,1", "-1", "0,-1"):
        with pytest.raises(ValueError, match="--noise-scale must be a number >= 0"):
            parse_noise_scale(bad)
    from oxygen_gym.eval.libero.eval_command import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["libero", "--noise-scale", "0,0,0,0,0,0,1"])).noise_scale == ARM_STILL
    with pytest.raises(SystemExit):
        parser.parse_args(["libero", "--noise-scale", "0,x"])


def test_the_checkpoint_declares_it_and_a_given_scale_wins(checkpoints):
    declared, plain = checkpoints
    assert json.loads((declared / "config.json").read_text())["noise_scale"] == list(ARM_STILL)
    assert declared_noise_scale(declared) == ARM_STILL
    assert declared_noise_scale(plain) is None and declared_noise_scale("tiny") is None
    assert resolved_noise_scale(plain, None) == 1.0 and resolved_noise_scale(declared, 0.5) == 0.5
    for kwargs, expected in (({}, ARM_STILL), ({"noise_scale": None}, ARM_STILL), ({"noise_scale": 1.0}, 1.0)):
        with MultiTaskPolicy.from_pretrained(str(declared), robot="libero", **kwargs) as policy:
            assert policy.noise_scale == expected
    with MultiTaskPolicy.from_pretrained(str(plain), robot="libero") as policy:
        assert policy.noise_scale == 1.0


def test_bad_declarations_are_clear_errors(checkpoints, tmp_path):
    declared, _ = checkpoints
    model = build_model("tiny", seed=0)
    for bad in (-1.0, [0.0] * 33, [], True):
        with pytest.raises(ValueError, match="noise_scale must be a number >= 0 or a list of 1..32"):
            save_pretrained(model, tmp_path / "bad", STATS, noise_scale=bad)
    folder = tmp_path / "edited"
    folder.mkdir()
    cfg = json.loads((declared / "config.json").read_text())
    for bad in (-1, "0", [0, "x"], []):
        (folder / "config.json").write_text(json.dumps({**cfg, "noise_scale": bad}))
        with pytest.raises(CheckpointError, match="config.json: 'noise_scale'"):
            declared_noise_scale(folder)


def test_eval_records_the_declared_scale_and_refuses_a_folder_run_without_it(checkpoints, tmp_path):
    from oxygen_gym.eval.libero.eval_config import EvalConfig, with_declarations
    from oxygen_gym.eval.libero.eval_loop import check_resumable
    from oxygen_gym.eval.libero.results import ResultsError, ResultsFolder
    from oxygen_gym.eval.libero.worker import EpisodeWorker

    declared, plain = checkpoints
    assert with_declarations(EvalConfig(checkpoint=str(declared))).noise_scale == ARM_STILL
    assert with_declarations(EvalConfig(checkpoint=str(declared), noise_scale=1.0)).noise_scale == 1.0  # flag wins
    assert with_declarations(EvalConfig(checkpoint=str(plain))).noise_scale == 1.0
    assert with_declarations(EvalConfig(checkpoint="tiny")).noise_scale == 1.0
    assert with_declarations(EvalConfig(checkpoint=str(declared))).to_dict()["noise_scale"] == list(ARM_STILL)
    worker = EpisodeWorker(EvalConfig(checkpoint=str(declared)))  # the demo's path: no run_eval to resolve it
    try:
        assert worker.get_policy().noise_scale == ARM_STILL
    finally:
        worker.policy.close()

    before = EvalConfig(checkpoint=str(declared), out=str(tmp_path), noise_scale=1.0)  # run before the declaration
    (tmp_path / "config.json").write_text(json.dumps(before.to_dict()))
    now = with_declarations(EvalConfig(checkpoint=str(declared), out=str(tmp_path)))
    with ResultsFolder(tmp_path) as folder:
        check_resumable(folder, before)
        with pytest.raises(ResultsError, match="noise_scale 1.0 was the reference sampler"):
            check_resumable(folder, now)
    (tmp_path / "config.json").write_text(json.dumps(now.to_dict()))  # recorded as a list, read back equal
    with ResultsFolder(tmp_path) as folder:
        check_resumable(folder, with_declarations(EvalConfig(checkpoint=str(declared), out=str(tmp_path))))


def test_dagger_collection_and_open_loop_sample_with_the_declaration(checkpoints):
    from oxygen_gym.train.collect import CollectConfig

    declared, plain = checkpoints
    assert CollectConfig(dagger_checkpoint=str(declared), dagger_beta=0.0).dagger_noise_scale == ARM_STILL
    assert CollectConfig(dagger_checkpoint=str(declared), dagger_beta=0.0).to_json()["dagger_noise_scale"] == list(ARM_STILL)
    assert CollectConfig(dagger_checkpoint=str(declared), dagger_noise_scale=1.0).dagger_noise_scale == 1.0
    assert CollectConfig(dagger_checkpoint=str(plain)).dagger_noise_scale == 1.0
    assert CollectConfig().dagger_noise_scale == 1.0  # no driving policy: recorded as the reference sampler


def test_inspect_says_how_the_checkpoint_samples(checkpoints, capsys):
    from oxygen_gym.cli import main

    declared, plain = checkpoints
    assert main(["inspect", str(declared), "--robot", "libero"]) == 0
    assert "samples:    from noise times [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0] (config.json noise_scale" in capsys.readouterr().out
    assert main(["inspect", str(plain), "--robot", "libero"]) == 0
    assert "samples:    from unit noise (the reference sampler)" in capsys.readouterr().out


def test_the_server_samples_with_the_declaration_unless_told_otherwise(checkpoints):
    from oxygen_gym.serve.serve_command import add_arguments, build_policy

    declared, _ = checkpoints
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for argv, expected in (([], ARM_STILL), (["--noise-scale", "1"], 1.0), (["--noise-scale", "0,0.5"], (0.0, 0.5))):
        template = build_policy(parser.parse_args(["--checkpoint", str(declared), "--no-language", *argv]))
        try:
            assert template.noise_scale == expected
            assert template.session(engine=None).noise_scale == expected  # each robot's session samples with it
        finally:
            template.close()
