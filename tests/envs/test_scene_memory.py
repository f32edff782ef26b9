"""The memory task's labeller (envs/scene_memory.py) on known LIBERO sim states: the bowl placed by hand (its free
joint) and the gripper put beside it, so each subtask holds in turn; the answer is always the one before it, and the
env reports the same answer in info["memory"]."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import oxygen_gym.envs  # noqa: F401
from oxygen_gym.envs.experts import BOWL_RIM, SubtaskLabeller
from oxygen_gym.envs.scene_memory import MemoryAnswers, MemoryLabeller

OPEN, CLOSED = np.array([0.04, -0.04]), np.array([0.015, -0.015])  # finger qpos: opening 0.08 vs on a bowl wall


@pytest.fixture(scope="module")
def scene():
    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, fast_render=True, fast_reset=True,
                   label_subtasks=True, camera_size=64)
    obs, info = env.reset(seed=7, options={"init_state": 0})
    yield env, obs, info
    env.close()


def _move_bowl(sim, xyz) -> np.ndarray:
    joint = sim.objects_dict["akita_black_bowl_1"].joints[0]
    qpos = sim.sim.data.get_joint_qpos(joint).copy()
    qpos[:3] = xyz
    sim.sim.data.set_joint_qpos(joint, qpos)
    sim.sim.forward()
    return sim.sim.data.body_xpos[sim.obj_body_id["akita_black_bowl_1"]].copy()


def test_what_the_robot_did_last_from_sim_state(scene):
    env, obs, info = scene
    sim = env.unwrapped.libero_env.env
    label, now = MemoryLabeller(sim), SubtaskLabeller(sim)
    assert label.question == "What did the robot do last?"
    # the init state: reaching, nothing done yet
    assert info["memory"] == "" == label(obs["state"][:3], obs["state"][6:8])
    bowl = sim.sim.data.body_xpos[sim.obj_body_id["akita_black_bowl_1"]].copy()
    plate = sim.sim.data.body_xpos[sim.obj_body_id["plate_1"]].copy()
    up = bowl + [0, 0, 0.10]
    cases = [  # (bowl position, gripper position, fingers) -> (the subtask now, what was done last)
        (bowl, bowl + BOWL_RIM, OPEN, "grasp the black bowl", "reach for the black bowl"),
        (up, up + BOWL_RIM, CLOSED, "carry the bowl to the plate", "grasp the black bowl"),
        ([plate[0], plate[1], up[2]], None, CLOSED, "place the bowl on the plate", "carry the bowl to the plate"),
        ([plate[0], plate[1], bowl[2] + 0.01], "above", OPEN, "release the bowl", "place the bowl on the plate"),
        (bowl, bowl + BOWL_RIM + [0.2, 0, 0.2], OPEN, "reach for the black bowl", ""),
    ]
    for where, gripper, fingers, subtask, last in cases:
        at = _move_bowl(sim, where)
        eef = at + BOWL_RIM if gripper is None else (at + BOWL_RIM + [0, 0, 0.1] if isinstance(gripper, str) else gripper)
        assert (now(eef, fingers), label(eef, fingers)) == (subtask, last)
    _move_bowl(sim, bowl)


def test_answers_are_nothing_then_every_subtask_but_the_last():
    a = MemoryAnswers.for_goal("akita_black_bowl_1", "plate_1")
    assert a.all() == ("", "reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate",
                       "place the bowl on the plate")
