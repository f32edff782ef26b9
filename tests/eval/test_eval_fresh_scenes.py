"""`oxygen-gym eval libero --fresh-scenes`: validation episodes on fresh scenes. Scene k of a task is the scene
collection's scene k (same sampler seed, same first images), and `held_out` compares it with the scenes a trained
checkpoint's data holds, never with its official init states."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from oxygen_gym.cli import main
from oxygen_gym.eval.libero.episode_set import EpisodeSpec, build_episode_set, parse_fresh_scenes, record_key
from oxygen_gym.eval.libero.eval_config import EvalConfig
from oxygen_gym.eval.libero.narration import is_held_out
from oxygen_gym.train.collect import EpisodeKey
from oxygen_gym.train.collect.libero_hdf5 import Demo
from oxygen_gym.train.trainer import _dataset_info

TASK0 = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"


def test_an_eval_scene_uses_collections_seed_and_no_init_state():
    specs = build_episode_set(["libero_spatial", "libero_goal"], [0, 3], 50, [7, 8], fresh_scenes=[1003, 2, 1000])
    assert len(specs) == 2 * 2 * 2 * 3 and [s.scene for s in specs[:3]] == [2, 1000, 1003]
    for spec in specs:
        seed = EpisodeKey(spec.suite, spec.task_id, None, 0, scene=spec.scene).scene_seed()
        assert spec.scene_seed == seed and spec.reset_options == {"scene_seed": seed}
        record = spec.to_dict()
        assert record["init_state"] is None and record["scene"] == spec.scene and record["scene_seed"] == seed
        assert EpisodeSpec.from_record(record) == spec and record_key(record) == spec.key
    # an official episode's record and key are what they were before fresh scenes (old folders resume)
    official = EpisodeSpec("libero_spatial", 0, 7, 3)
    assert official.to_dict() == {"suite": "libero_spatial", "task_id": 0, "seed": 7, "episode": 3, "init_state": 3}
    assert official.key == ("libero_spatial", 0, 7, 3) and official.reset_options == {"init_state": 3}
    assert EpisodeSpec.from_record(official.to_dict()) == official
    # scene 3 is not init state 3: distinct keys, and a mixed list still sorts
    scene3 = EpisodeSpec("libero_spatial", 0, 7, 3, scene=3)
    assert scene3.key != official.key and sorted([scene3, official]) == [official, scene3]


@pytest.mark.parametrize("extra, flags", [
    (["--init-states", "30-31"], ["--fresh-scenes", "--init-states"]),
    (["--episodes", "2"], ["--fresh-scenes", "--episodes"]),
])
def test_fresh_scenes_beside_official_states_is_a_clear_error(extra, flags, capsys, tmp_path):
    argv = ["eval", "libero", "--fresh-scenes", "1000-1001", *extra, "--out", str(tmp_path / "x"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert all(flag in err for flag in flags), err
    assert not (tmp_path / "x").exists()


def test_bad_scene_lists_and_configs_name_the_field():
    for bad in ("abc", "5-2", "-3", "1,1"):
        with pytest.raises(ValueError, match="--fresh-scenes"):
            parse_fresh_scenes(bad)
    assert parse_fresh_scenes("1003,1000-1001") == [1000, 1001, 1003]
    with pytest.raises(ValueError, match="--fresh-scenes and --init-states"):
        EvalConfig(init_states=[30], fresh_scenes=[1000])


def _demo(attrs: dict) -> Demo:
    z = np.zeros((2, 7), np.float32)
    return Demo(agentview=np.zeros((2, 4, 4, 3), np.uint8), wrist=np.zeros((2, 4, 4, 3), np.uint8),
                ee_states=np.zeros((2, 6), np.float32), gripper_states=np.zeros((2, 2), np.float32), joint_states=z,
                actions=z, executed_actions=z, states=np.zeros((2, 5)), subtasks=["a", "a"], attrs=attrs)


def test_held_out_compares_a_scene_with_the_training_scenes(tmp_path):
    demos = [_demo({"scene": k, "scene_seed": 1, "variant": v, "task_name": TASK0}) for k in (0, 1, 7) for v in (0, 1)]
    data = _dataset_info(str(tmp_path), demos)
    assert data["scenes"] == [0, 1, 7] and data["init_states"] == []
    assert [is_held_out(data, TASK0, None, scene=k) for k in (0, 1, 7)] == [False] * 3
    assert [is_held_out(data, TASK0, None, scene=k) for k in (2, 1000)] == [True] * 2
    assert is_held_out(data, "another_task", None, scene=0) is True  # same index, other task: another scene
    assert is_held_out(data, TASK0, 0) is True  # official init state 0 is not fresh scene 0
    # official-state data: its init states are seen, every fresh scene is held out
    official = _dataset_info(str(tmp_path), [_demo({"init_state": i, "task_name": TASK0}) for i in (0, 1)])
    assert official["scenes"] == [] and is_held_out(official, TASK0, 1) is False
    assert is_held_out(official, TASK0, None, scene=1) is True
    # a training.json from before `scenes`: the collection's requested scenes count as seen
    old = {k: v for k, v in data.items() if k != "scenes"}
    old["collect"] = {"fresh_scenes": [0, 1, 7, 9]}
    assert is_held_out(old, TASK0, None, scene=9) is False and is_held_out(old, TASK0, None, scene=10) is True
    old["collect"] = [{"fresh_scenes": [0, 1]}, {"fresh_scenes": [7, 9]}]  # several collections (train --data A,B)
    assert is_held_out(old, TASK0, None, scene=9) is False and is_held_out(old, TASK0, None, scene=10) is True


def _trained_checkpoint(tmp_path, scenes: list[int]):
    """The shipped trained model, its training.json saying its data held fresh scenes `scenes` (weights unchanged)."""
    from oxygen_gym.model.trained import trained_model_dir

    src = trained_model_dir("libero-spatial")
    if src is None:
        pytest.skip("the shipped libero-spatial weights are not installed")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    info = json.loads((ckpt / "training.json").read_text())
    info["data"].update(init_states=[], scenes=scenes)
    (ckpt / "training.json").write_text(json.dumps(info))
    return ckpt


@pytest.mark.timeout(600)
def test_a_scene_episode_starts_from_the_collection_scene_and_resumes(tmp_path, monkeypatch, capsys):
    pytest.importorskip("libero")
    from oxygen_gym.envs import episode as episode_module
    from oxygen_gym.eval.libero import worker as worker_module

    first_obs: list[dict] = []

    class FirstObservation:
        """The real policy, noting the first observation of each episode it is given."""

        def __init__(self, policy):
            self._policy, self._calls = policy, 0

        def __getattr__(self, name):
            return getattr(self._policy, name)

        def act(self, obs, *args, **kwargs):
            if self._calls == 0:
                first_obs.append({k: v.copy() for k, v in obs["images"].items()})
            self._calls += 1
            return self._policy.act(obs, *args, **kwargs)

    real_run_episode = episode_module.run_episode
    monkeypatch.setattr(episode_module, "run_episode",
                        lambda env, policy, **kw: real_run_episode(env, FirstObservation(policy), **kw))
    ckpt, out = _trained_checkpoint(tmp_path, scenes=[1000]), tmp_path / "run"
    argv = ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--fresh-scenes", "1000-1001",
            "--max-steps", "5", "--checkpoint", str(ckpt), "--out", str(out), "--no-progress", "--fast-reset"]
    try:
        assert main(argv) in (0, 1)
        records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        assert [(r["status"], r["episode"], r["scene"], r["init_state"]) for r in records] == [
            ("ok", 1000, 1000, None), ("ok", 1001, 1001, None)]
        seeds = [EpisodeKey("libero_spatial", 0, None, 0, scene=k).scene_seed() for k in (1000, 1001)]
        assert [r["scene_seed"] for r in records] == seeds
        assert [r["held_out"] for r in records] == [False, True]  # scene 1000 is in the training data
        summary = json.loads((out / "summary.json").read_text())
        assert summary["held_out"]["training"]["episodes"] == 1 and summary["held_out"]["held_out"]["episodes"] == 1
        assert "| scenes | success | episodes |" in (out / "summary.md").read_text()

        # the images the policy saw first are those of LiberoEnv.reset with collection's seed for that scene
        env = worker_module._WORKER.env
        assert len(first_obs) == 2
        for seed, seen in zip(seeds[::-1], first_obs[::-1], strict=True):
            obs, _ = env.reset(seed=7, options={"scene_seed": seed})
            for cam, image in obs["images"].items():
                assert np.array_equal(image, seen[cam]), cam
        assert not np.array_equal(first_obs[0]["base"], first_obs[1]["base"])  # two scenes, two pictures

        # the same command again resumes: every scene is finished, nothing runs twice
        before = (out / "episodes.jsonl").read_bytes()
        assert main(argv) in (0, 1)
        assert (out / "episodes.jsonl").read_bytes() == before and len(first_obs) == 2
        capsys.readouterr()
    finally:
        worker_module.close_worker()
