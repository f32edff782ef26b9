"""DAgger collection (train/collect/dagger.py): who executes each chunk, what is stored, and fine-tuning on several
collections with the statistics the weights were trained with."""
from __future__ import annotations

import json

import numpy as np
import pytest
from state_expert_replay import assert_replay_labels_match

from oxygen_gym.envs.state_expert import SETTLE_STEPS, StatePickPlaceExpert
from oxygen_gym.model.norm_stats import load_norm_stats
from oxygen_gym.train.collect.collector import CollectConfig
from oxygen_gym.train.collect.dagger import MixedActor
from oxygen_gym.train.collect.libero_hdf5 import write_demo
from oxygen_gym.train.dataset import compute_norm_stats, load_demos
from oxygen_gym.train.trainer import TrainConfig, train
from test_train_data import synthetic_demo

COMMON = dict(batch_size=4, warmup=2, threads=1, device="cpu", monitor_rows=8)


class RecordingPolicy:
    """A policy whose chunk says which call it came from (action[0] = call index, action[1] = step within it), and
    which records the observations it was asked on."""

    def __init__(self, horizon: int = 10) -> None:
        self.horizon, self.asked, self.seeds = horizon, [], []

    def reset(self, seed=None) -> None:
        self.seeds.append(seed)

    def act(self, obs):
        self.asked.append(obs["t"])
        chunk = np.zeros((self.horizon, 7), np.float32)
        chunk[:, 0], chunk[:, 1] = len(self.asked), np.arange(self.horizon)
        return chunk, []


def _run(beta: float, steps: int = 40, seed: int = 3):
    policy = RecordingPolicy()
    actor = MixedActor(policy, beta, replan=5, rng=np.random.default_rng(seed))
    label = np.full(7, -7.0, np.float32)  # the expert's label, recognisable
    executed = [actor({"t": t}, label) for t in range(steps)]
    return policy, actor, np.stack(executed)


def test_beta_zero_executes_the_policy_chunk_by_chunk_asked_on_each_chunks_first_observation():
    policy, actor, executed = _run(beta=0.0)
    assert policy.asked == list(range(0, 40, 5))  # replan 5, as eval's openpi loop
    assert actor.policy_steps == 40
    assert np.array_equal(executed[:, 1], np.tile(np.arange(5), 8))  # the first 5 of each chunk, in order
    assert np.array_equal(executed[:, 0], np.repeat(np.arange(1, 9), 5))


def test_mixed_chunks_run_whole_and_expert_chunks_execute_the_label():
    policy, actor, executed = _run(beta=0.5, steps=200)
    by_chunk = executed.reshape(40, 5, 7)
    expert = (by_chunk[:, :, 0] == -7).all(axis=1)
    policy_chunks = (by_chunk[:, :, 0] > 0).all(axis=1)
    assert (expert | policy_chunks).all()  # a chunk is never split between the two
    assert 10 < expert.sum() < 30  # about half at beta 0.5
    assert actor.policy_steps == 5 * policy_chunks.sum() and len(policy.asked) == policy_chunks.sum()
    # the same key (rng seed) gives the same mixture and the same policy noise seed; another key another
    again_policy, _, again = _run(beta=0.5, steps=200)
    assert np.array_equal(again, executed) and again_policy.seeds == policy.seeds
    other_policy, _, other = _run(beta=0.5, steps=200, seed=4)
    assert not np.array_equal(other, executed) and other_policy.seeds != policy.seeds


def test_dagger_beta_must_leave_the_policy_something_to_drive():
    with pytest.raises(ValueError, match="--dagger-beta"):
        CollectConfig(init_states=(), fresh_scenes=(0,), dagger_checkpoint="libero-spatial", dagger_beta=1.0)
    with pytest.raises(ValueError, match="--dagger-beta"):
        CollectConfig(init_states=(), fresh_scenes=(0,), dagger_checkpoint="libero-spatial", dagger_beta=-0.1)


class _Sim:
    """The few sim fields StatePickPlaceExpert reads: body positions, orientations (upright) and velocities by name,
    the goal check, and the BDDL initial state (a bowl on the table: inside no fixture region)."""

    parsed_problem = {"initial_state": []}

    def __init__(self, bowl, plate) -> None:
        self.obj_body_id = {"akita_black_bowl_1": 0, "plate_1": 1}
        positions = np.array([bowl, plate], np.float64)
        upright = np.tile(np.eye(3).reshape(1, 9), (2, 1))
        data = type("D", (), {"body_xpos": positions, "body_xmat": upright, "cvel": np.zeros((2, 6))})()
        self.sim = type("S", (), {"data": data})()

    def _check_success(self) -> bool:
        return False


def test_settling_count_follows_the_gripper_that_ran_not_the_experts_own_label(monkeypatch):
    import oxygen_gym.envs.state_expert as state_expert
    from oxygen_gym.envs import experts

    bowl, plate = np.array([0.0, 0.2, 0.9]), np.array([0.1, 0.0, 0.9])
    monkeypatch.setattr(state_expert, "pick_place_goal", lambda env: ("akita_black_bowl_1", "plate_1"))
    expert = StatePickPlaceExpert(_Sim(bowl, plate))
    at_grasp = np.concatenate([bowl + experts.BOWL_RIM, [0, 0, 0], [0.02, -0.02]])  # half-closed at the grasp point
    for _ in range(SETTLE_STEPS + 3):
        label = expert(at_grasp)
        assert expert.phase == "close" and label[6] > 0
        expert.executed(np.r_[label[:6], -1.0])  # the policy opened instead: the grip never settles
    assert expert.closing == 0
    for _ in range(SETTLE_STEPS):
        expert.executed(expert(at_grasp))  # the expert's own closing commands run: now it counts
    assert expert.closing == SETTLE_STEPS


def _data(folder, scenes, actions_scale=1.0):
    folder.mkdir()
    for i in scenes:
        demo = synthetic_demo(i, steps=12, size=64)
        demo.actions = (demo.actions * actions_scale).astype(np.float32)
        demo.attrs = {**demo.attrs, "scene": i}
        del demo.attrs["init_state"]
        write_demo(folder / "synthetic_demo.hdf5", f"demo_{i}", demo, {"image_orientation": "policy"})
    (folder / "dataset.json").write_text(json.dumps({"config": {"dagger_checkpoint": str(folder.parent / "base")}}))
    return folder


def test_fine_tuning_on_two_collections_keeps_the_base_statistics_and_names_both(tmp_path):
    first = _data(tmp_path / "expert", [0, 1])
    base = train(TrainConfig(data=str(first), out=str(tmp_path / "base"), steps=1, **COMMON), progress=False)
    second = _data(tmp_path / "dagger", [5, 6], actions_scale=3.0)  # other units: stats from it would differ
    both = f"{first},{second}"
    assert len(load_demos(both)) == 4
    tuned = train(TrainConfig(data=both, out=str(tmp_path / "tuned"), init=str(base), steps=1, **COMMON),
                  progress=False)
    base_stats, tuned_stats = load_norm_stats(base), load_norm_stats(tuned)
    assert np.array_equal(tuned_stats["actions"].q99, base_stats["actions"].q99)
    assert not np.allclose(compute_norm_stats(load_demos(both))["actions"].q99, base_stats["actions"].q99)
    info = json.loads((tuned / "training.json").read_text())
    assert info["data"]["path"] == "../expert,../dagger" and info["train_config"]["data"] == "../expert,../dagger"
    assert info["data"]["scenes"] == [0, 1, 5, 6]
    assert str(tmp_path) not in json.dumps(info)  # the DAgger policy's path too is written relative
    assert info["data"]["collect"][1]["dagger_checkpoint"] == "../base"
    with pytest.raises(ValueError, match="--data .*nowhere"):
        load_demos(f"{first},{tmp_path / 'nowhere'}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_dagger_rollout_stores_the_state_experts_label_of_every_state_it_visited(tmp_path):
    """Replaying the executed actions from the same scene visits the same states, and the state expert labels
    them exactly as stored: the labels belong to the states the policy drove to, not to the expert's own path."""
    pytest.importorskip("libero")
    from oxygen_gym.train.collect.collector import collect, task_file
    from oxygen_gym.train.collect.libero_hdf5 import read_demos

    cfg = CollectConfig(init_states=(), fresh_scenes=(3,), variants=1, workers=1, camera_size=64, max_steps=25,
                        dagger_checkpoint="tiny", dagger_beta=0.5)
    counts = collect(cfg, tmp_path, progress=False)
    assert counts["kept"] == 1 and counts["succeeded"] == 0  # 25 steps of a random-weight policy: kept anyway
    (demo,) = read_demos(task_file(tmp_path, "libero_spatial", 0))
    assert 0 < demo.attrs["policy_steps"] < len(demo) and demo.attrs["dagger_beta"] == 0.5
    differs = np.abs(demo.executed_actions - demo.actions).max(axis=1) > 1e-6
    assert differs.sum() >= demo.attrs["policy_steps"] - 1  # the policy's steps ran its own actions
    assert_replay_labels_match(task_file(tmp_path, "libero_spatial", 0), demo)
