"""`noise_scale`: the flow-matching heads' starting noise times a scale (policies/action_noise.py). 1 is the reference
sampler bit for bit, 0 one deterministic chunk per observation whatever the seed; eval, DAgger collection and the
open-loop check (`--noise-scale`) take the same setting, and a results folder from before the flag resumes as a run at 1."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from oxygen_gym import MultiTaskPolicy
from oxygen_gym.policies.action_noise import check_noise_scale


def _obs(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"images": {"base": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
                       "wrist": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)},
            "state": rng.normal(size=8).astype(np.float32), "prompt": "put the bowl on the plate"}


def _actions(seed: int, noise_scale: float | None, steps: int = 2) -> list[np.ndarray]:
    kwargs = {} if noise_scale is None else {"noise_scale": noise_scale}
    policy = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=0, **kwargs)
    try:
        policy.reset(seed=seed)
        return [policy.act(_obs(t))[0] for t in range(steps)]
    finally:
        policy.close()


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), "half", True, [0.0, -1.0], [0.0, "x"]])
def test_a_bad_scale_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match="noise_scale must be a number >= 0"):
        check_noise_scale(bad)
    with pytest.raises(ValueError, match="noise_scale"):
        MultiTaskPolicy.from_pretrained("tiny", robot="libero", noise_scale=bad)


def test_the_noise_is_scaled_exactly_and_scale_one_is_the_reference_sampler():
    ref = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=3)
    half = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=3, noise_scale=0.5)
    try:
        for frame in (0, 5):
            a, b = ref.frame_noise(frame), half.frame_noise(frame)
            assert set(a) == set(b)
            for head in a:
                assert a[head].abs().sum() > 0
                torch.testing.assert_close(b[head], a[head] * 0.5, rtol=0, atol=0)
    finally:
        ref.close()
        half.close()
    for x, y in zip(_actions(1, None), _actions(1, 1.0)):
        np.testing.assert_array_equal(x, y)


def test_scale_zero_gives_one_chunk_per_observation_whatever_the_seed():
    zero_a, zero_b = _actions(1, 0.0), _actions(2, 0.0)
    for x, y in zip(zero_a, zero_b):
        np.testing.assert_array_equal(x, y)
    one_a, one_b = _actions(1, 1.0), _actions(2, 1.0)
    assert not np.allclose(one_a[0], one_b[0])  # with noise the seed matters: the test above can fail
    assert not np.allclose(zero_a[0], one_a[0])


def test_eval_takes_the_scale_and_an_older_folder_resumes_as_scale_one(tmp_path):
    from oxygen_gym.eval.libero.eval_command import add_arguments, config_from_args
    from oxygen_gym.eval.libero.eval_config import EvalConfig
    import argparse

    from results_resume import assert_older_folder_resumes

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["libero", "--noise-scale", "0"])).noise_scale == 0.0
    assert config_from_args(parser.parse_args(["libero"])).noise_scale is None  # the checkpoint's, resolved by run_eval
    with pytest.raises(ValueError, match="--noise-scale"):
        EvalConfig(noise_scale=-1)
    from oxygen_gym.eval.libero.worker import EpisodeWorker

    worker = EpisodeWorker(EvalConfig(checkpoint="tiny", noise_scale=0.25))
    try:
        assert worker.get_policy().noise_scale == 0.25  # the policy eval runs samples with it
    finally:
        worker.policy.close()

    assert_older_folder_resumes(tmp_path, "noise_scale", {"noise_scale": 0.0}, "noise_scale was None, now 0.0",
                                base={"noise_scale": 1.0})


def test_dagger_collection_takes_the_scale():
    from oxygen_gym.train.collect import CollectConfig
    from oxygen_gym.train.collect.dagger import policy_for

    assert policy_for("tiny", "openpi", 0.0).noise_scale == 0.0  # the driving policy
    assert policy_for("tiny", "openpi").noise_scale == 1.0

    assert CollectConfig(dagger_checkpoint="tiny", dagger_noise_scale=0.0).dagger_noise_scale == 0.0
    with pytest.raises(ValueError, match="--dagger-noise-scale"):
        CollectConfig(dagger_checkpoint="tiny", dagger_noise_scale=-1.0)
