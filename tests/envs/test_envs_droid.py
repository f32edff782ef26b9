"""oxygen_gym/DROID-v0 on robosuite 1.4.0 (Panda, joint velocities at 15 Hz scaled as DROID's controller)."""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("robosuite")

import oxygen_gym.envs  # noqa: E402,F401
from oxygen_gym.envs.droid import CONTROL_HZ, MAX_JOINT_DELTA, droid_joint_command  # noqa: E402

SIZE = 48


@pytest.fixture(scope="module")
def env():
    e = gym.make("oxygen_gym/DROID-v0", task="lift", camera_size=SIZE, fast_render=True)
    yield e
    e.close()


class ScriptedLift:
    """A scripted Panda: differential inverse kinematics on the true cube position (above it, down, close, up),
    emitting DROID-style joint-velocity commands and gripper positions."""

    def __init__(self, env):
        self.env = env.unwrapped
        self.phase, self.closing, self.start_rot = "above", 0, None

    def __call__(self) -> np.ndarray:
        rs = self.env.robosuite_env
        robot = rs.robots[0]
        site = robot.controller.eef_name
        data = rs.sim.data
        eef = data.get_site_xpos(site).copy()
        rot = data.get_site_xmat(site).reshape(3, 3).copy()
        if self.start_rot is None:
            self.start_rot = rot
        cube = data.body_xpos[rs.cube_body_id].copy()
        grasp = cube + [0, 0, -0.005]
        target = {"above": cube + [0, 0, 0.10], "down": grasp, "close": grasp, "up": eef + [0, 0, 0.10]}[self.phase]
        err = target - eef
        if self.phase in ("above", "down") and np.linalg.norm(err) < 0.01:
            self.phase = "down" if self.phase == "above" else "close"
        elif self.phase == "close":
            self.closing += 1
            if self.closing > 6:
                self.phase = "up"
        idx = robot._ref_joint_vel_indexes
        jac = np.vstack([data.get_site_jacp(site).reshape(3, -1)[:, idx],
                         data.get_site_jacr(site).reshape(3, -1)[:, idx]])
        # keep the gripper pointing down: rotation error to the start orientation
        rot_err = 0.5 * sum(np.cross(rot[:, i], self.start_rot[:, i]) for i in range(3))
        joint_vel = np.linalg.pinv(jac) @ np.concatenate([4.0 * err, 2.0 * rot_err])  # rad/s
        command = np.clip(joint_vel / (MAX_JOINT_DELTA * CONTROL_HZ), -0.3, 0.3)  # DROID units
        return np.concatenate([command, [1.0 if self.phase in ("close", "up") else 0.0]]).astype(np.float32)


def test_check_env_passes(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped)


def test_observation_is_the_policy_input(env):
    obs, info = env.reset(seed=0)
    assert list(obs["images"]) == ["exterior", "exterior_2", "wrist"]
    for img in obs["images"].values():
        assert img.shape == (SIZE, SIZE, 3) and img.dtype == np.uint8 and img.std() > 3
    assert obs["state"].shape == (8,) and obs["state"].dtype == np.float32
    assert 0.0 <= obs["state"][7] <= 1.0
    assert obs["prompt"] == "Lift the red cube"
    assert info["episode_id"] == "droid/lift/seed0/ep0" and info["is_success"] is False
    joints, _ = env.unwrapped.joint_state()
    np.testing.assert_allclose(obs["state"][:7], joints, atol=1e-6)
    # upright: the table (bottom of the exterior view) is lighter than the dark backdrop above it
    ext = obs["images"]["exterior"].astype(float)
    assert ext[-8:].mean() > ext[:8].mean()


def test_joint_commands_scale_as_droid(env):
    np.testing.assert_allclose(droid_joint_command(np.array([0.5, -0.2, 0, 0, 0, 0, 0])), [0.5, -0.2, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(droid_joint_command(np.array([2.0, -1.0, 0, 0, 0, 0, 0.5])),
                               [1.0, -0.5, 0, 0, 0, 0, 0.25])  # direction kept
    obs, _ = env.reset(seed=0)
    command = np.zeros(8, np.float32)
    command[0] = 0.25  # 0.05 rad per step
    for _ in range(6):
        obs2, *_ = env.step(command)
    moved = obs2["state"][0] - obs["state"][0]
    assert 0.6 * 6 * 0.05 < moved < 1.1 * 6 * 0.05  # tracks the commanded 0.3 rad within the arm's dynamics
    command[7] = 1.0
    for _ in range(8):
        obs3, *_ = env.step(command)
    assert obs3["state"][7] > 0.9  # closed on nothing


def test_reset_is_deterministic_whatever_ran_before(env):
    first, _ = env.reset(seed=4, options={"init_state": 2})
    cube = env.unwrapped.robosuite_env.sim.data.body_xpos[env.unwrapped.robosuite_env.cube_body_id].copy()
    action = np.ones(8, np.float32) * 0.5
    for _ in range(3):
        env.step(action)
    other, _ = env.reset(seed=4, options={"init_state": 3})
    other_cube = env.unwrapped.robosuite_env.sim.data.body_xpos[env.unwrapped.robosuite_env.cube_body_id].copy()
    again, _ = env.reset(seed=4, options={"init_state": 2})
    for cam in first["images"]:
        np.testing.assert_array_equal(first["images"][cam], again["images"][cam])
    np.testing.assert_array_equal(first["state"], again["state"])
    assert np.abs(cube - other_cube).max() > 1e-3  # another episode places the cube elsewhere


def test_a_scripted_panda_lifting_the_cube_is_a_success(env):
    env.reset(seed=0)
    expert = ScriptedLift(env)
    for step in range(120):
        _, reward, terminated, truncated, info = env.step(expert())
        if terminated or truncated:
            break
        assert not info["is_success"]
    assert info["is_success"] is True and terminated and reward == 1.0
    assert expert.phase == "up"  # it was lifted, not knocked over the margin
    rs = env.unwrapped.robosuite_env
    assert rs.sim.data.body_xpos[rs.cube_body_id][2] > rs.model.mujoco_arena.table_offset[2] + 0.04


@pytest.mark.parametrize("task, prompt", [("stack", "Stack the red cube on the green cube"),
                                          ("pick_place_can", "Put the can in its bin")])
def test_other_tasks_build_and_step(task, prompt):
    e = gym.make("oxygen_gym/DROID-v0", task=task, camera_size=SIZE, fast_render=True)
    try:
        obs, info = e.reset(seed=0)
        assert obs["prompt"] == prompt and set(obs["images"]) == {"exterior", "exterior_2", "wrist"}
        _, _, terminated, _, info = e.step(np.zeros(8, np.float32))
        assert not terminated and info["is_success"] is False
    finally:
        e.close()


@pytest.mark.parametrize("kwargs, match", [
    (dict(task="open_drawer"), "task"),
    (dict(camera_size=(48,)), "camera_size"),
    (dict(max_steps=-3), "max_steps"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("oxygen_gym/DROID-v0", **kwargs)


def test_bad_actions_raise_clear_errors(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        env.step(np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([0, 0, 0, 0, 0, 0, np.inf, 0], np.float32))
