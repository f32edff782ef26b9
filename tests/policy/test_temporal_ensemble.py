"""Temporal ensembling (policies/temporal_ensemble.py) against ACT's Algorithm 2 written out as its paper states it:
a (calls x steps x action_dim) table of every prediction, each executed action the weighted mean of its column."""
from __future__ import annotations

import numpy as np
import pytest
from eval_episode import run_one_episode
from results_resume import assert_older_folder_resumes

from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.eval.libero.worker import EpisodeWorker
from oxygen_gym.policies.temporal_ensemble import TemporalEnsemble
from oxygen_gym.train.collect.collector import CollectConfig


class RandomChunks:
    """A chunk policy whose chunks are seeded random numbers (a test double: the ensemble must not care what made
    them)."""

    horizon = 10

    def __init__(self) -> None:
        self.calls, self.seed = 0, 0

    def reset(self, seed: int = 0) -> None:
        self.calls, self.seed = 0, seed

    def act(self, obs: dict):
        self.calls += 1
        rng = np.random.default_rng([self.seed, self.calls])
        return rng.normal(size=(self.horizon, 7)).astype(np.float32), [f"update {self.calls}"]


def libero_obs(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"images": {"base": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
                       "wrist": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)},
            "state": rng.normal(size=8).astype(np.float32), "prompt": "put the bowl on the plate"}


def act_reference(chunks: list[np.ndarray], replan: int, decay: float) -> np.ndarray:
    """ACT's all_time_actions table: row c holds call c's chunk from step c * replan; step t executes the mean of
    column t over the rows that predicted it, weight exp(-decay * i) in row order (i = 0 the oldest)."""
    horizon, dim = chunks[0].shape
    steps = len(chunks) * replan
    table = np.zeros((len(chunks), steps + horizon, dim))
    filled = np.zeros((len(chunks), steps + horizon), bool)
    for c, chunk in enumerate(chunks):
        table[c, c * replan: c * replan + horizon] = chunk
        filled[c, c * replan: c * replan + horizon] = True
    executed = []
    for t in range(steps):
        preds = table[filled[:, t], t]
        w = np.exp(-decay * np.arange(len(preds)))
        executed.append((w[:, None] * preds).sum(0) / w.sum())
    return np.stack(executed)


def run_wrapped(policy, replan: int, decay: float, calls: int, seed: int = 3):
    """The actions executed over `calls` calls (the first `replan` of each returned chunk) and the raw chunks."""
    wrapped = TemporalEnsemble(policy, replan=replan, decay=decay)
    wrapped.reset(seed=seed)
    executed = [wrapped.act({})[0][:replan] for _ in range(calls)]
    policy.reset(seed=seed)
    raw = [np.asarray(policy.act({})[0], np.float64) for _ in range(calls)]
    return np.concatenate(executed), raw


@pytest.mark.parametrize("replan", [1, 3, 10])
@pytest.mark.parametrize("decay", [0.0, 0.01, 0.7, -0.5])
def test_executed_actions_are_acts_weighted_mean(replan, decay):
    executed, raw = run_wrapped(RandomChunks(), replan, decay, calls=12)
    np.testing.assert_allclose(executed, act_reference(raw, replan, decay), rtol=0, atol=1e-6)
    if replan < 10:  # chunks overlap: the ensemble is not the newest chunk's head
        assert not np.allclose(executed[-replan:], raw[-1][:replan], atol=1e-3)


def test_the_first_chunk_and_a_reset_episode_pass_through_unchanged():
    policy = RandomChunks()
    wrapped = TemporalEnsemble(policy, replan=2, decay=0.01)
    wrapped.reset(seed=1)
    first, updates = wrapped.act({})
    for _ in range(4):
        wrapped.act({})
    wrapped.reset(seed=1)
    again, _ = wrapped.act({})
    policy.reset(seed=1)
    np.testing.assert_array_equal(first, policy.act({})[0])
    np.testing.assert_array_equal(again, first)  # nothing of the earlier episode leaks in
    assert updates == ["update 1"] and first.dtype == np.float32
    assert wrapped.horizon == 10  # everything else is the wrapped policy's


def test_the_real_policy_under_the_wrapper_matches_the_reference():
    """The shipped engine's chunks (built-in `tiny`, actions only), ensembled: the same as the table over the chunks
    the same policy gives unwrapped with the same seed."""
    from oxygen_gym import MultiTaskPolicy

    policy = MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=[], seed=0)
    wrapped = TemporalEnsemble(policy, replan=2, decay=0.01)
    wrapped.reset(seed=5)
    executed = np.concatenate([wrapped.act(libero_obs(t))[0][:2] for t in range(4)])
    policy.reset(seed=5)
    raw = [np.asarray(policy.act(libero_obs(t))[0], np.float64) for t in range(4)]
    np.testing.assert_allclose(executed, act_reference(raw, 2, 0.01), rtol=0, atol=1e-5)
    policy.close()


def test_bad_settings_are_clear_errors():
    for bad in (float("inf"), float("nan"), True, "0.01"):
        with pytest.raises(ValueError, match="ensemble must be a finite number"):
            TemporalEnsemble(RandomChunks(), replan=1, decay=bad)
    with pytest.raises(ValueError, match="replan must be an int >= 1"):
        TemporalEnsemble(RandomChunks(), replan=0)
    short = TemporalEnsemble(RandomChunks(), replan=11)
    with pytest.raises(ValueError, match=r"horizon >= replan=11.*shape \(10, 7\)"):
        short.act({})
    with pytest.raises(ValueError, match="--ensemble must be a finite number"):
        EvalConfig(ensemble=float("nan"))
    with pytest.raises(ValueError, match="--ensemble and --live"):
        EvalConfig(ensemble=0.01, live="measured")
    with pytest.raises(ValueError, match="--dagger-ensemble ensembles .* --dagger-beta 0"):
        CollectConfig(dagger_checkpoint="tiny", dagger_beta=0.3, dagger_ensemble=0.01)
    with pytest.raises(ValueError, match="--dagger-ensemble ensembles"):
        CollectConfig(dagger_ensemble=0.01)


def test_an_older_eval_folder_resumes_as_unensembled(tmp_path):
    assert_older_folder_resumes(tmp_path, "ensemble", {"ensemble": 0.01}, "ensemble was None, now 0.01")


def test_eval_wraps_its_policy_with_the_run_interval():
    worker = EpisodeWorker(EvalConfig(checkpoint="tiny", ensemble=0.05, replan=3))
    policy = worker.get_policy()
    assert isinstance(policy, TemporalEnsemble) and (policy.replan, policy.decay) == (3, 0.05)
    worker.close()
    assert not isinstance(EpisodeWorker(EvalConfig(checkpoint="tiny")).get_policy(), TemporalEnsemble)


@pytest.mark.timeout(600)
def test_an_eval_episode_runs_ensembled(tmp_path):
    record, config = run_one_episode(tmp_path / "run", "--replan", "1", "--ensemble", "0.01")
    assert record["calls"] == 4 and config["ensemble"] == 0.01
