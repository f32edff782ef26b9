"""`oxygen-gym collect`: the scripted expert's episode lands in LIBERO's HDF5 layout with subtask labels in order,
and a second run of the same command resumes (adds nothing)."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from oxygen_gym.train.collect import CollectConfig, collect, read_demos
from oxygen_gym.train.collect.collect_command import parse_range
from oxygen_gym.train.collect.collector import ATTEMPTS, task_file
from oxygen_gym.train.collect.relabel import relabel


@pytest.mark.timeout(900)  # ~40 s on an idle 2-core machine (one ~110-step episode); far slower under load
def test_an_expert_episode_is_written_in_libero_layout_and_resumes(tmp_path):
    cfg = CollectConfig(init_states=(0,), variants=1, workers=1, camera_size=64)
    counts = collect(cfg, tmp_path, progress=False)
    assert counts["kept"] == 1 and counts["failed"] == 0
    path = task_file(tmp_path, "libero_spatial", 0)
    with h5py.File(path) as f:
        g = f["data/demo_0"]
        t = int(g.attrs["num_samples"])
        for key, shape in (("obs/agentview_rgb", (t, 64, 64, 3)), ("obs/eye_in_hand_rgb", (t, 64, 64, 3)),
                           ("obs/ee_states", (t, 6)), ("obs/gripper_states", (t, 2)), ("obs/joint_states", (t, 7)),
                           ("actions", (t, 7)), ("dones", (t,)), ("rewards", (t,)), ("subtasks", (t,))):
            assert g[key].shape == shape, key
        assert f["data"].attrs["image_orientation"] == "policy"
        assert json.loads(f["data"].attrs["problem_info"])["language_instruction"].startswith("pick up the black bowl")
    (demo,) = read_demos(path)
    # Subtasks follow the task's order, each appearing once as a contiguous run.
    runs = [s for i, s in enumerate(demo.subtasks) if i == 0 or s != demo.subtasks[i - 1]]
    assert runs[:4] == ["reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate",
                        "place the bowl on the plate"]
    # the memory task's answers (envs/scene_memory.py) beside them: each step, the subtask before the current one
    order = ["", "reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate", "place the bowl on the plate"]
    subtask_order = order[1:] + ["release the bowl"]
    assert len(demo.memory) == t
    assert all(m == order[subtask_order.index(s)] for s, m in zip(demo.subtasks, demo.memory))
    assert np.array_equal(demo.actions, demo.executed_actions)  # variant 0 injects no noise
    # relabelling from the recorded sim states gives the labels recorded live (train/collect/relabel.py); the live
    # labels read body poses one physics substep behind the state (mj_step), so a step on a threshold may differ:
    # measured 7 of 1,866 subtask steps over 19 demos
    counts = relabel(tmp_path)
    assert counts["demos"] == 1 and counts["steps"] == t
    assert counts["subtasks_changed"] <= 2 and counts["memory_changed"] <= 2, counts
    again = collect(cfg, tmp_path, progress=False)
    assert again["ran"] == 0 and again["attempted_before"] == 1


def test_collect_refuses_a_folder_with_other_settings(tmp_path):
    (tmp_path / "dataset.json").write_text(json.dumps({"config": {**CollectConfig().to_json(), "variants": 5},
                                                        "init_states": [0]}))
    with pytest.raises(ValueError, match="variants"):
        collect(CollectConfig(), tmp_path, progress=False)
    # the expert's release and lift rules are settings too: one folder never mixes demonstrators
    cfg = CollectConfig(init_states=(0,), variants=1, perturb_rate=0.15)
    (tmp_path / "dataset.json").write_text(json.dumps({"config": {**cfg.to_json(), "lift_speed": 0.3},
                                                       "init_states": [0]}))
    # its one episode already attempted: were the check missing, collect would return at once instead of simulating
    (tmp_path / ATTEMPTS).write_text(json.dumps({"episode": cfg.episodes()[0].name}) + "\n")
    with pytest.raises(ValueError, match="lift_speed"):
        collect(cfg, tmp_path, progress=False)


@pytest.mark.parametrize("text", ["", "a-b", "-3", "3-"])
def test_bad_ranges_name_the_flag(text):
    with pytest.raises(ValueError, match="--init-states"):
        parse_range(text, "--init-states")
