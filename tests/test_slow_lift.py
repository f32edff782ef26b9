"""The slow lift (policies/slow_lift.py, eval `--lift-scale`): upward commands scaled only where the gripper closes,
everything else as the policy asked; recorded among eval's result-deciding fields."""
from __future__ import annotations

import numpy as np
import pytest
from eval_episode import run_one_episode
from results_resume import assert_older_folder_resumes

from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.eval.libero.worker import EpisodeWorker
from oxygen_gym.policies.slow_lift import SlowLift


class FixedChunk:
    """A policy (test double) returning one fixed chunk."""

    def __init__(self, chunk: np.ndarray) -> None:
        self.chunk, self.resets = chunk, 0

    def reset(self, seed: int = 0) -> None:
        self.resets += 1

    def act(self, obs: dict):
        return self.chunk.copy(), ["update"]


def test_only_upward_commands_while_the_gripper_closes_are_scaled():
    rng = np.random.default_rng(0)
    chunk = rng.normal(size=(40, 7)).astype(np.float32)
    out, updates = SlowLift(FixedChunk(chunk), scale=0.25).act({})
    lifting = (chunk[:, 6] > 0) & (chunk[:, 2] > 0)
    assert 5 < lifting.sum() < 35 and updates == ["update"]
    np.testing.assert_array_equal(out[lifting, 2], chunk[lifting, 2] * np.float32(0.25))
    np.testing.assert_array_equal(out[~lifting], chunk[~lifting])  # down, or the gripper opening: as asked
    np.testing.assert_array_equal(np.delete(out, 2, axis=1), np.delete(chunk, 2, axis=1))  # other dims untouched
    np.testing.assert_array_equal(SlowLift(FixedChunk(chunk), scale=1).act({})[0], chunk)
    wrapped = SlowLift(FixedChunk(chunk), scale=0.5)
    wrapped.reset(seed=3)
    assert wrapped.resets == 1  # reset and the rest are the wrapped policy's


def test_bad_settings_are_clear_errors():
    for bad in (0, 1.5, -0.5, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match="lift_scale must be a number in \\(0, 1\\]"):
            SlowLift(FixedChunk(np.zeros((4, 7))), scale=bad)
    with pytest.raises(ValueError, match=r"action_dim > 6.*shape \(4, 3\)"):
        SlowLift(FixedChunk(np.zeros((4, 3))), scale=0.5).act({})
    with pytest.raises(ValueError, match="--lift-scale must be a number in"):
        EvalConfig(lift_scale=2.0)


def test_eval_wraps_its_policy_only_for_a_scale_below_one():
    policy = EpisodeWorker(EvalConfig(checkpoint="tiny", lift_scale=0.5)).get_policy()
    assert isinstance(policy, SlowLift) and policy.scale == 0.5
    assert not isinstance(EpisodeWorker(EvalConfig(checkpoint="tiny", lift_scale=1)).get_policy(), SlowLift)
    assert not isinstance(EpisodeWorker(EvalConfig(checkpoint="tiny")).get_policy(), SlowLift)


def test_an_older_eval_folder_resumes_without_the_slow_lift(tmp_path):
    assert_older_folder_resumes(tmp_path, "lift_scale", {"lift_scale": 0.5}, "lift_scale was None, now 0.5")


@pytest.mark.timeout(600)
def test_an_eval_episode_runs_with_the_slow_lift(tmp_path):
    _, config = run_one_episode(tmp_path / "run", "--lift-scale", "0.5")
    assert config["lift_scale"] == 0.5
