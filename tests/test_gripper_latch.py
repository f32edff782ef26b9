"""The gripper open latch (policies/gripper_latch.py): an open asked while the gripper is held closed runs only once
`confirm` calls in a row ask for it; everything else passes through unchanged."""
from __future__ import annotations

import numpy as np
import pytest
from eval_episode import run_one_episode
from results_resume import assert_older_folder_resumes

from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.eval.libero.worker import EpisodeWorker
from oxygen_gym.policies.gripper_latch import GripperOpenLatch
from oxygen_gym.train.collect.collector import CollectConfig

REPLAN, HORIZON = 3, 10


class ScriptedGripper:
    """A chunk policy (test double) whose call c returns random arm actions and the gripper commands `script[c]`,
    one per step of the chunk; the latch must not care what made them."""

    def __init__(self, script: list[list[float]]) -> None:
        self.script, self.calls = script, 0

    def reset(self, seed: int = 0) -> None:
        self.calls = 0

    def act(self, obs: dict):
        rng = np.random.default_rng(self.calls)
        chunk = rng.normal(size=(HORIZON, 7)).astype(np.float32)
        chunk[:, 6] = self.script[self.calls]
        self.calls += 1
        return chunk, [f"update {self.calls}"]


def chunk_of(executed: list[float], rest: float) -> list[float]:
    return executed + [rest] * (HORIZON - len(executed))


def run(script: list[list[float]], confirm: int = 2) -> tuple[list[np.ndarray], GripperOpenLatch]:
    latch = GripperOpenLatch(ScriptedGripper(script), replan=REPLAN, confirm=confirm)
    latch.reset(seed=0)
    return [latch.act({})[0] for _ in script], latch


def test_a_lone_open_while_holding_is_replaced_by_the_last_closing_command():
    script = [chunk_of([-1, -1, 0.8], 0.8), chunk_of([0.9, -0.5, 0.7], -1), chunk_of([0.9, 0.9, 0.9], 0.9)]
    out, latch = run(script)
    hold = [0.9, 0.8, 0.7] + [0.8] * 7  # the opens replaced by call 0's last executed command, 0.8
    np.testing.assert_array_equal(out[1][:, 6], np.float32(hold))
    assert latch.suppressed_calls == 1
    np.testing.assert_array_equal(out[0][:, 6], np.float32(script[0]))  # nothing held before the grasp
    np.testing.assert_array_equal(out[2][:, 6], np.float32(script[2]))


def test_an_open_asked_in_confirm_calls_in_a_row_runs_and_the_rest_passes_through():
    script = [chunk_of([1, 1, 1], 1), chunk_of([1, -1, -1], -1), chunk_of([-1, -1, -1], -1), chunk_of([-1] * 3, 1)]
    out, latch = run(script)
    reference = ScriptedGripper(script)
    expected = [reference.act({})[0] for _ in script]
    expected[1][:, 6] = np.where(expected[1][:, 6] < 0, 1, expected[1][:, 6])
    for got, want in zip(out, expected):
        np.testing.assert_array_equal(got, want)  # arm dims and language updates' chunk untouched
    assert latch.suppressed_calls == 1
    out3, latch3 = run(script, confirm=3)  # the third call in a row
    assert latch3.suppressed_calls == 2 and (out3[3][:REPLAN, 6] < 0).all()


def test_asks_must_be_consecutive_and_a_reset_forgets_the_grip():
    script = [chunk_of([1] * 3, 1), chunk_of([-1] * 3, -1), chunk_of([1] * 3, 1), chunk_of([-1] * 3, -1)]
    out, latch = run(script)
    assert latch.suppressed_calls == 2 and all((o[:, 6] > 0).all() for o in out)
    latch.reset(seed=0)
    assert latch.suppressed_calls == 0
    latch.policy.script = [chunk_of([-1] * 3, -1)]
    np.testing.assert_array_equal(latch.act({})[0][:, 6], -1)  # a new episode starts open: nothing held


def test_an_open_beyond_the_executed_steps_does_not_count():
    script = [chunk_of([1] * 3, 1), chunk_of([1] * 3, -1), chunk_of([-1] * 3, -1)]
    out, latch = run(script)
    np.testing.assert_array_equal(out[1][:, 6], script[1])
    assert latch.suppressed_calls == 1 and (out[2][:, 6] > 0).all()


def test_bad_settings_are_clear_errors():
    for bad in (1, 0, True, 2.0, "2"):
        with pytest.raises(ValueError, match="confirm must be an int >= 2"):
            GripperOpenLatch(ScriptedGripper([]), replan=3, confirm=bad)
    with pytest.raises(ValueError, match="replan must be an int >= 1"):
        GripperOpenLatch(ScriptedGripper([]), replan=0)
    with pytest.raises(ValueError, match=r"horizon >= replan=11.*shape \(10, 7\)"):
        GripperOpenLatch(ScriptedGripper([[1] * HORIZON]), replan=11).act({})
    with pytest.raises(ValueError, match="--open-confirm must be an int >= 2"):
        EvalConfig(open_confirm=1)
    with pytest.raises(ValueError, match="--open-confirm and --live"):
        EvalConfig(open_confirm=2, live="measured")
    with pytest.raises(ValueError, match="--dagger-open-confirm counts .* --dagger-beta 0"):
        CollectConfig(dagger_checkpoint="tiny", dagger_beta=0.3, dagger_open_confirm=2)
    with pytest.raises(ValueError, match="--dagger-open-confirm must be an int >= 2"):
        CollectConfig(dagger_checkpoint="tiny", dagger_beta=0.0, dagger_open_confirm=1)


def test_an_older_eval_folder_resumes_without_the_latch(tmp_path):
    assert_older_folder_resumes(tmp_path, "open_confirm", {"open_confirm": 2}, "open_confirm was None, now 2")


def test_eval_wraps_its_policy_with_the_run_interval():
    worker = EpisodeWorker(EvalConfig(checkpoint="tiny", open_confirm=3, replan=4))
    policy = worker.get_policy()
    assert isinstance(policy, GripperOpenLatch) and (policy.replan, policy.confirm) == (4, 3)
    worker.close()
    assert not isinstance(EpisodeWorker(EvalConfig(checkpoint="tiny")).get_policy(), GripperOpenLatch)


@pytest.mark.timeout(600)
def test_an_eval_episode_runs_latched(tmp_path):
    record, config = run_one_episode(tmp_path / "run", "--replan", "2", "--open-confirm", "2")
    assert record["calls"] == 2 and config["open_confirm"] == 2
    assert record["open_suppressed_calls"] in (0, 1)  # 2 calls: at most the second asks while held


def test_once_released_the_gripper_is_open_and_nothing_is_held():
    """After a confirmed open the gripper is open: a later open passes at once, even after a call that moved nothing
    (a zero command leaves the gripper as it was)."""
    script = [chunk_of([1] * 3, 1), chunk_of([-1] * 3, -1), chunk_of([-1] * 3, -1), chunk_of([0] * 3, 0),
              chunk_of([-1] * 3, -1)]
    out, latch = run(script)
    assert latch.suppressed_calls == 1
    np.testing.assert_array_equal(out[4][:, 6], np.float32(script[4]))
