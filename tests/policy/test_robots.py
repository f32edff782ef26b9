"""One file per robot (policies/robots/<robot>_robot.py): each robot's cameras, sizes, control rate and hold action
agree with its env's; an env's observation sent in the robot's openpi wire layout comes back from the server's parser
(serve/observations.py) unchanged and passes the policy's own check; the wire layout matches the keys openpi's
example clients send; ALOHA's conversion to pi's units and back is the identity."""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from oxygen_gym.eval.bench.serve_load import openpi_observation
from oxygen_gym.policies.inputs import check_observation
from oxygen_gym.policies.robots import ROBOTS, RobotSpec, get_robot
from oxygen_gym.serve.observations import to_policy_obs

ROOT = Path(__file__).resolve().parents[2]
ENVS = {"libero": "oxygen_gym.envs.libero:LiberoEnv", "droid": "oxygen_gym.envs.droid:DroidEnv",
        "aloha": "oxygen_gym.envs.aloha:AlohaEnv"}
SIZE = 32


def env_class(robot: str):
    module, name = ENVS[robot].split(":")
    return getattr(importlib.import_module(module), name)


def make_env(robot: str):
    return env_class(robot)(camera_size=SIZE)


def env_cameras(robot: str) -> tuple[str, ...]:
    """The cameras the env renders by default (ALOHA's are an argument whose default is its CAMERAS' keys)."""
    cls = env_class(robot)
    return tuple(importlib.import_module(cls.__module__).CAMERAS) if robot == "aloha" else cls.cameras


def to_wire(obs: dict, spec: RobotSpec) -> dict:
    """An env observation as the robot's openpi client sends it: flat keys, or a nested `images` map of openpi's
    camera names as CHW (ALOHA)."""
    wire = spec.wire
    if wire.flat_images:
        msg = {key: obs["images"][cam] for key, cam in wire.flat_images.items() if cam in obs["images"]}
        bounds = np.cumsum([0] + [n for _, n in wire.flat_state])
        msg |= {key: obs["state"][a:b] for (key, _), a, b in zip(wire.flat_state, bounds[:-1], bounds[1:])}
        return msg | {"prompt": obs["prompt"]}
    openpi_name = {cam: key for key, cam in wire.camera_aliases.items()}
    images = {openpi_name.get(cam, cam): np.ascontiguousarray(np.transpose(img, (2, 0, 1)))
              for cam, img in obs["images"].items()}
    return {"images": images, "state": obs["state"], "prompt": obs["prompt"]}


def test_one_file_per_robot_and_the_registry_lists_each():
    files = sorted(p.stem for p in (ROOT / "policies" / "robots").glob("*_robot.py"))
    assert files == sorted(f"{name}_robot" for name in ROBOTS)
    for name in ROBOTS:
        module = importlib.import_module(f"oxygen_gym.policies.robots.{name}_robot")
        specs = [v for v in vars(module).values() if isinstance(v, RobotSpec)]
        assert specs == [ROBOTS[name]] and get_robot(name) is ROBOTS[name]
    with pytest.raises(ValueError, match=r"robot: unknown robot 'ur5'; expected one of \['aloha', 'droid', 'libero'\]"):
        get_robot("ur5")


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_a_robot_file_is_consistent_with_itself(robot):
    spec = get_robot(robot)
    known = set(spec.cameras) | set(spec.optional_cameras)
    assert sum(n for _, n in spec.state_layout) == spec.state_dim
    assert set(spec.checkpoint_aliases) == known
    if spec.wire.flat_images:  # every required camera has a key; the state's parts fill state_dim
        assert set(spec.cameras) <= set(spec.wire.flat_images.values()) <= known
        assert sum(n for _, n in spec.wire.flat_state) == spec.state_dim
    else:
        assert set(spec.cameras) <= set(spec.wire.camera_aliases.values()) <= known
    # openpi's name for a camera on the wire (`observation/wrist_image`, `cam_high`) is one of the names checkpoints
    # give that camera (lerobot's and openpi's datasets): two tables that came apart would swap cameras
    wire_names = {key.rsplit("/", 1)[-1]: cam for key, cam in spec.wire.flat_images.items()} | spec.wire.camera_aliases
    for name, cam in wire_names.items():
        assert name in spec.checkpoint_aliases[cam], (name, cam)


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_a_robot_file_agrees_with_its_env(robot):
    spec, cls = get_robot(robot), env_class(robot)
    assert (cls.robot, cls.state_dim, cls.action_dim) == (spec.name, spec.state_dim, spec.action_dim)
    cams = env_cameras(robot)
    assert set(spec.cameras) <= set(cams) <= set(spec.cameras) | set(spec.optional_cameras), cams
    assert cls.metadata["render_fps"] == spec.control_hz and 1.0 / cls.control_dt == pytest.approx(spec.control_hz)
    # holding (LiveClock's step(None)) is the robot's: the env's method gives what the robot file gives
    rng = np.random.default_rng(0)
    last = rng.uniform(-1, 1, spec.action_dim).astype(np.float32)
    fake_env = type("E", (), {"action_dim": spec.action_dim})()
    np.testing.assert_array_equal(cls.hold_action(fake_env, last), spec.hold_action(last))
    if robot != "aloha":  # ALOHA holds at its measured joints before a first command: test_aloha_holds_...
        np.testing.assert_array_equal(cls.hold_action(fake_env, None), spec.hold_action(None))


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_an_env_observation_round_trips_through_the_wire_layout(robot):
    spec, env = get_robot(robot), make_env(robot)
    try:
        space = env.observation_space
        space.seed(1)
        obs = space.sample() | {"prompt": "pick up the cube"}
    finally:
        env.close()
    assert set(obs["images"]) == set(env_cameras(robot)) and obs["state"].shape == (spec.state_dim,)
    served = to_policy_obs(to_wire(obs, spec), spec)
    assert served.keys() == obs.keys() and served["prompt"] == obs["prompt"]
    assert served["images"].keys() == obs["images"].keys()
    for cam, img in obs["images"].items():
        np.testing.assert_array_equal(served["images"][cam], img)
    np.testing.assert_array_equal(served["state"], obs["state"])
    images, state, _ = check_observation(served, spec)  # the policy takes what the server made of it
    assert set(spec.cameras) <= set(images)


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_the_wire_layout_is_what_openpis_client_sends(robot):
    """openpi's example loops' keys (eval/bench/serve_load.py writes them out by hand) are the robot file's layout."""
    spec = get_robot(robot)
    sent = openpi_observation(robot, np.random.default_rng(2), "fold the towel")
    if spec.wire.flat_images:
        keys = set(spec.wire.flat_images) | {k for k, _ in spec.wire.flat_state} | {"prompt"}
        assert set(sent) <= keys
    else:
        assert set(sent["images"]) <= set(spec.wire.camera_aliases)
    served = to_policy_obs(sent, spec)
    assert set(served["images"]) == set(spec.cameras) and served["state"].shape == (spec.state_dim,)


def test_aloha_holds_at_its_measured_joints_before_a_first_command():
    spec, env = get_robot("aloha"), make_env("aloha")
    try:
        obs, _ = env.reset(seed=0)
        np.testing.assert_array_equal(env.hold_action(None), obs["state"])
        np.testing.assert_array_equal(env.hold_action(None), spec.hold_action(None, obs["state"]))
        sent = to_policy_obs(to_wire(obs, spec), spec)  # a real frame, CHW under openpi's camera names, and back
        for cam, img in obs["images"].items():
            np.testing.assert_array_equal(sent["images"][cam], img)
    finally:
        env.close()
    with pytest.raises(ValueError, match="state: ALOHA holds at its measured joints"):
        spec.hold_action(None)


def test_aloha_conversion_round_trips():
    """Robot actions -> pi's -> robot's again (and pi's -> robot's -> pi's) is the identity, as RTC needs when it
    hands a previous chunk back to the model; LIBERO and DROID pass through unchanged."""
    spec = get_robot("aloha")
    rng = np.random.default_rng(3)
    actions = rng.uniform(-1.5, 1.5, (50, 14)).astype(np.float32)
    actions[:, [6, 13]] = rng.uniform(0.0, 1.0, (50, 2))
    np.testing.assert_allclose(spec.actions_from_model(spec.actions_to_model(actions)), actions, rtol=0, atol=1e-5)
    model = rng.uniform(-1.5, 1.5, (50, 14)).astype(np.float32)
    np.testing.assert_allclose(spec.actions_to_model(spec.actions_from_model(model)), model, rtol=0, atol=1e-5)
    assert not np.allclose(spec.actions_to_model(actions), actions)  # a conversion, not the identity
    state = actions[0]
    flipped = spec.state_to_model(state)
    np.testing.assert_allclose(flipped[[1, 2, 8, 9]], -state[[1, 2, 8, 9]])  # openpi's joint flips
    for name in ("libero", "droid"):
        other = get_robot(name)
        a = rng.uniform(-1, 1, (4, other.action_dim)).astype(np.float32)
        assert other.actions_from_model(a) is a and other.actions_to_model(a) is a
