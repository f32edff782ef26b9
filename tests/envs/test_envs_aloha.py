"""oxygen_gym/ALOHA-v0 on gym-aloha's real bimanual sim: API, cameras, determinism, success, errors."""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("gym_aloha")

import oxygen_gym.envs  # noqa: E402,F401

SIZE = 48
LEFT_GRIPPER = 6  # index of the left gripper (normalised, 0 closed .. 1 open) in state and action


@pytest.fixture(scope="module")
def env():
    e = gym.make("oxygen_gym/ALOHA-v0", task="transfer_cube", camera_size=SIZE, fast_render=True)
    yield e
    e.close()


def _finger_pad_centre(physics, geom_name):
    """World centre of a finger mesh's bounding box (the geom frame sits off the pad)."""
    m, d = physics.model, physics.data
    g = m.name2id(geom_name, "geom")
    mesh = m.geom_dataid[g]
    verts = m.mesh_vert[m.mesh_vertadr[mesh]: m.mesh_vertadr[mesh] + m.mesh_vertnum[mesh]]
    world = verts @ d.geom_xmat[g].reshape(3, 3).T + d.geom_xpos[g]
    return (world.min(0) + world.max(0)) / 2


def close_left_gripper_on_cube(env, seed=0):
    """Open the left gripper, put the cube between its fingers through the physics API, close the gripper.
    Returns the list of infos of the closing steps."""
    obs, _ = env.reset(seed=seed)
    physics = env.unwrapped.physics
    hold = obs["state"].astype(np.float64)
    hold[LEFT_GRIPPER] = 1.0
    for _ in range(15):
        obs, _, _, _, info = env.step(hold)
    assert obs["state"][LEFT_GRIPPER] > 0.7 and not info["is_success"]
    between = (_finger_pad_centre(physics, "vx300s_left/10_left_gripper_finger")
               + _finger_pad_centre(physics, "vx300s_left/10_right_gripper_finger")) / 2
    joint = physics.model.name2id("red_box_joint", "joint")
    qpos, qvel = physics.model.jnt_qposadr[joint], physics.model.jnt_dofadr[joint]
    physics.data.qpos[qpos: qpos + 7] = [*between, 1.0, 0.0, 0.0, 0.0]
    physics.data.qvel[qvel: qvel + 6] = 0.0
    physics.forward()
    hold[LEFT_GRIPPER] = 0.0
    infos = []
    for _ in range(20):
        _, _, terminated, _, info = env.step(hold)
        infos.append(info)
        if terminated:
            break
    return infos


def test_check_env_passes(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped)


def test_renders_only_the_policy_cameras_at_the_requested_size(env):
    obs, info = env.reset(seed=0)
    assert list(obs["images"]) == ["high", "left_wrist", "right_wrist"]
    for img in obs["images"].values():
        assert img.shape == (SIZE, SIZE, 3) and img.dtype == np.uint8 and img.std() > 3
    assert obs["state"].shape == (14,) and obs["state"].dtype == np.float32
    assert obs["prompt"] == "Transfer cube"
    assert info == {"is_success": False, "task": "transfer_cube", "episode": 0, "seed": 0, "step": 0,
                    "episode_id": "aloha/transfer_cube/seed0/ep0"}
    np.testing.assert_allclose(obs["state"][:6], [0, -0.96, 1.16, 0, -0.3, 0], atol=1e-6)  # gym-aloha's start pose

    one = gym.make("oxygen_gym/ALOHA-v0", task="insertion", camera_size=(32, 40), cameras=("high",))
    try:
        obs, _ = one.reset(seed=0)
        assert list(obs["images"]) == ["high"] and obs["images"]["high"].shape == (32, 40, 3)
        assert obs["prompt"] == "Insert the peg into the socket"
    finally:
        one.close()


def test_fast_render_changes_only_the_look(env):
    slow = gym.make("oxygen_gym/ALOHA-v0", task="transfer_cube", camera_size=SIZE, fast_render=False)
    try:
        a, _ = slow.reset(seed=2)
        b, _ = env.reset(seed=2)
        np.testing.assert_array_equal(a["state"], b["state"])
        assert not np.array_equal(a["images"]["high"], b["images"]["high"])  # no shadows, no antialiasing
        assert np.abs(a["images"]["high"].astype(int) - b["images"]["high"]).mean() < 40
    finally:
        slow.close()


def test_reset_is_deterministic_and_episodes_follow_gym_aloha_seeds(env):
    from gym_aloha.utils import sample_box_pose

    first, _ = env.reset(seed=5)
    cube = env.unwrapped.physics.named.data.qpos["red_box_joint"][:3].copy()
    np.testing.assert_allclose(cube, sample_box_pose(5)[:3])  # seed s, episode 0 = gym-aloha's reset(seed=s)
    for _ in range(3):
        env.step(first["state"] + 0.2)
    _, info = env.reset()
    assert info["episode"] == 1
    np.testing.assert_allclose(env.unwrapped.physics.named.data.qpos["red_box_joint"][:3], sample_box_pose(6)[:3])
    again, _ = env.reset(seed=5, options={"init_state": 0})
    for cam in first["images"]:
        np.testing.assert_array_equal(first["images"][cam], again["images"][cam])
    np.testing.assert_array_equal(first["state"], again["state"])


def test_reports_success_when_the_left_gripper_closes_on_the_cube(env):
    infos = close_left_gripper_on_cube(env)
    assert infos[-1]["is_success"] is True
    assert not any(i["is_success"] for i in infos[:-1])
    physics = env.unwrapped.physics
    contacts = {tuple(sorted((physics.model.id2name(c.geom1, "geom"), physics.model.id2name(c.geom2, "geom"))))
                for c in physics.data.contact[: physics.data.ncon]}
    assert any("red_box" in pair and any("left/10_" in g for g in pair) for pair in contacts)
    assert ("red_box", "table") not in contacts


@pytest.mark.parametrize("kwargs, match", [
    (dict(task="fold_shirt"), "task"),
    (dict(cameras=("high", "low")), "cameras"),
    (dict(cameras=()), "cameras"),
    (dict(camera_size=-4), "camera_size"),
    (dict(max_steps=1.5), "max_steps"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("oxygen_gym/ALOHA-v0", **kwargs)


def test_bad_actions_raise_clear_errors(env):
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(14,\)"):
        env.step(obs["state"][:7])
    bad = obs["state"].copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        env.step(bad)
    with pytest.raises(ValueError, match="init_state"):
        env.reset(options={"init_state": -1})


def test_truncates_at_max_steps():
    env = gym.make("oxygen_gym/ALOHA-v0", camera_size=SIZE, fast_render=True, max_steps=2)
    try:
        obs, _ = env.reset(seed=0)
        assert [env.step(obs["state"])[3] for _ in range(2)] == [False, True]
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step(obs["state"])
    finally:
        env.close()
