"""`--replan N` (eval and DAgger collection): how many actions of each chunk run before the policy is asked again,
instead of the protocol's (openpi's client `replan_steps`, 5). A result-deciding setting: recorded, compared on
resume, and reaching the loop that executes the chunks."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from eval_episode import run_one_episode
from results_resume import assert_older_folder_resumes

from oxygen_gym.eval.libero.eval_command import add_arguments, config_from_args
from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.train.collect.collector import ATTEMPTS, CollectConfig, collect
from oxygen_gym.train.collect.dagger import MixedActor


def _eval_config(*argv: str) -> EvalConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["libero", *argv]))


def test_eval_takes_replan_and_an_older_folder_resumes_as_the_protocols(tmp_path):
    from oxygen_gym.eval.libero.worker import EpisodeWorker

    assert _eval_config("--replan", "2").replan == 2
    assert _eval_config().replan is None
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="--replan"):
            EvalConfig(replan=bad)
    assert EpisodeWorker(EvalConfig(replan=3)).replan() == 3
    assert EpisodeWorker(EvalConfig()).replan() == 5  # openpi's replan_steps

    assert_older_folder_resumes(tmp_path, "replan", {"replan": 2}, "replan was None, now 2")


@pytest.mark.timeout(600)
def test_an_eval_episode_asks_the_policy_every_replan_actions(tmp_path):
    record, _ = run_one_episode(tmp_path / "run", "--replan", "2", max_steps=6)
    assert (record["replan"], record["calls"]) == (2, 3)  # the protocol's 5 would have asked twice


class CountingPolicy:
    horizon = 10

    def __init__(self, horizon: int = 10) -> None:
        self.horizon, self.asked = horizon, []

    def reset(self, seed=None) -> None:
        pass

    def act(self, obs):
        self.asked.append(obs["t"])
        return np.zeros((self.horizon, 7), np.float32), []


def test_the_dagger_driver_is_asked_every_replan_steps_and_a_short_chunk_is_an_error():
    policy = CountingPolicy()
    actor = MixedActor(policy, 0.0, replan=2, rng=np.random.default_rng(0))
    for t in range(10):
        actor({"t": t}, np.zeros(7, np.float32))
    assert policy.asked == [0, 2, 4, 6, 8]
    short = MixedActor(CountingPolicy(horizon=3), 0.0, replan=5, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="returned 3 actions but --replan is 5"):
        short({"t": 0}, np.zeros(7, np.float32))


def test_collect_checks_replan_and_records_it(tmp_path):
    assert CollectConfig(dagger_checkpoint="tiny").executed_per_chunk() == 5  # the openpi protocol's
    assert CollectConfig(dagger_checkpoint="tiny", replan=2).executed_per_chunk() == 2
    assert CollectConfig(perturb_rate=0.15, replan=1).executed_per_chunk() == 1
    with pytest.raises(ValueError, match="--replan sets how much .* give --perturb or --dagger"):
        CollectConfig(replan=2)  # the plain expert executes every step: nothing to replan
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="--replan must be an integer >= 1"):
            CollectConfig(dagger_checkpoint="tiny", replan=bad)
    # a folder collected with another replan is another collection
    cfg = CollectConfig(init_states=(0,), variants=1, dagger_checkpoint="tiny", replan=2)
    (tmp_path / "dataset.json").write_text(json.dumps({"config": {**cfg.to_json(), "replan": None},
                                                       "init_states": [0]}))
    (tmp_path / ATTEMPTS).write_text(json.dumps({"episode": cfg.episodes()[0].name}) + "\n")
    with pytest.raises(ValueError, match="replan"):
        collect(cfg, tmp_path, progress=False)
    older = {k: v for k, v in cfg.to_json().items() if k != "replan"}  # written before the field existed
    (tmp_path / "dataset.json").write_text(json.dumps({"config": older, "init_states": [0]}))
    assert collect(CollectConfig(init_states=(0,), variants=1, dagger_checkpoint="tiny"), tmp_path,
                   progress=False)["ran"] == 0
