"""LIBERO's render_on_request: the frames that are used are rendered and equal an always-rendering env's, byte for
byte; the others are not rendered at all; a used frame that was not rendered is an error, never a black image fed on.
Also fresh scenes (`options={"scene_seed": s}`): the same seed gives the same scene, and none is an official one.

The reference env is today's code path: an always-rendering env whose camera gate is never installed.
"""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("libero")
imageio = pytest.importorskip("imageio.v2")

import oxygen_gym.envs  # noqa: E402,F401
from oxygen_gym.envs import run_episode  # noqa: E402
from oxygen_gym.envs.libero_scenes import (  # noqa: E402
    SAME_SCENE_M, distance_to_official, object_positions, object_qpos_slices, official_positions)

SMALL = dict(suite="libero_spatial", task_id=0, camera_size=64, fast_render=True, fast_reset=True)
ACTIONS = np.random.default_rng(0).uniform(-0.6, 0.6, (12, 7)).astype(np.float32)


@pytest.fixture(scope="module")
def reference():
    env = gym.make("oxygen_gym/LIBERO-v0", **SMALL)
    env.unwrapped.camera_gate.install = lambda *args, **kwargs: None  # robosuite's own sensors, as before the gate
    yield env
    env.close()


@pytest.fixture(scope="module")
def lazy():
    env = gym.make("oxygen_gym/LIBERO-v0", render_on_request=True, **SMALL)
    yield env
    env.close()


@pytest.fixture(scope="module")
def tiny():
    from oxygen_gym import MultiTaskPolicy

    policy = MultiTaskPolicy.from_pretrained("tiny", robot="libero", seed=0)
    yield policy
    policy.close()


def _images(obs):
    return {k: v.copy() for k, v in obs["images"].items()}


def test_requested_steps_render_the_same_bytes_and_the_rest_render_nothing(reference, lazy):
    requested = {3, 5, 9, 10, 12}  # irregular, as a live clock asks
    ref_obs, _ = reference.reset(seed=7, options={"init_state": 2})
    obs, info = lazy.reset(seed=7, options={"init_state": 2})
    assert info["rendered"] and all(np.array_equal(obs["images"][c], ref_obs["images"][c]) for c in obs["images"])
    gate = lazy.unwrapped.camera_gate
    frames = gate.frames
    for step, action in enumerate(ACTIONS, 1):
        if step in requested:
            lazy.unwrapped.request_render()
        ref_obs, *_ = reference.step(action)
        obs, _, _, _, info = lazy.step(action)
        np.testing.assert_array_equal(obs["state"], ref_obs["state"])  # the physics never notices the gate
        assert info["rendered"] is (step in requested)
        for cam in obs["images"]:
            if step in requested:
                np.testing.assert_array_equal(obs["images"][cam], ref_obs["images"][cam], err_msg=f"{step} {cam}")
            else:
                assert not obs["images"][cam].any()
    assert gate.frames - frames == 2 * len(requested)  # two cameras per requested step, nothing else rendered
    with pytest.raises(RuntimeError, match="not rendered"):
        lazy.step(ACTIONS[0])
        lazy.unwrapped.render_mode = "rgb_array"
        try:
            lazy.unwrapped.render()
        finally:
            lazy.unwrapped.render_mode = None


class _Recording:
    """The real policy, plus a copy of every observation's images and every chunk it returned."""

    def __init__(self, policy):
        self.policy, self.images, self.actions = policy, [], []

    @property
    def last_frame(self):
        return self.policy.last_frame

    def act(self, obs):
        self.images.append(_images(obs))
        actions, updates = self.policy.act(obs)
        self.actions.append(np.array(actions))
        return actions, updates


def _episode(env, policy, **kwargs):
    policy.reset(seed=3)
    rec = _Recording(policy)
    return rec, run_episode(env, rec, max_steps=15, seed=7, init_state=1, reset_policy=False, **kwargs)


def test_the_policy_receives_the_images_it_receives_today(reference, lazy, tiny):
    want, ref = _episode(reference, tiny)
    got, res = _episode(lazy, tiny)
    assert res.calls == ref.calls == 3
    for a, b in zip(want.images, got.images):
        for cam in a:
            np.testing.assert_array_equal(a[cam], b[cam])
    np.testing.assert_array_equal(np.stack(want.actions), np.stack(got.actions))
    assert res.frames_rendered == 2 * 3  # the last step of each 5-action chunk
    assert set(res.time_s) == {"reset", "physics", "render", "policy", "other"}
    assert sum(res.time_s.values()) == pytest.approx(res.wall_s, abs=1e-3)
    assert res.time_s["render"] > 0 and res.time_s["policy"] > 0 and res.time_s["physics"] > 0


def test_a_video_still_gets_every_frame(lazy, tiny, tmp_path):
    _, res = _episode(lazy, tiny, video_dir=str(tmp_path))
    assert res.frames_rendered == 2 * 15
    with imageio.get_reader(res.video_path, format="FFMPEG") as reader:
        frames = [f[:64, :128] for f in reader]
    assert len(frames) == 16  # the reset frame and one per step
    assert all(f.std() > 5 for f in frames)  # rendered scenes, no black placeholder


def test_a_used_frame_that_was_not_rendered_is_an_error(lazy, tiny, monkeypatch):
    import oxygen_gym.envs.wrappers as wrappers

    monkeypatch.setattr(wrappers, "request_render", lambda env: None)  # the chunk player forgets to ask
    with pytest.raises(RuntimeError, match="not rendered"):
        _episode(lazy, tiny)


def _drawn(env):
    sim = env.unwrapped.libero_env.env
    return object_positions(env.unwrapped.start_qpos, object_qpos_slices(sim))


def test_fresh_scenes_follow_their_seed_and_are_no_official_init_state(lazy):
    env = lazy.unwrapped
    env.reset(seed=7, options={"init_state": 4})
    sim = env.libero_env.env
    official = official_positions(sim, env.init_states)
    assert distance_to_official(_drawn(lazy), official) == (4, 0.0)  # the check finds an official scene

    obs, info = lazy.reset(seed=7, options={"scene_seed": 101})
    first, first_image = _drawn(lazy), obs["images"]["base"].copy()
    assert info["init_state"] is None and info["scene_seed"] == 101 and info["episode_id"].endswith("scene101")
    _, _, _, _, info = lazy.step(ACTIONS[0])  # a fresh scene is an episode like any other
    assert info["step"] == 1 and info["scene_seed"] == 101
    lazy.reset(seed=7, options={"scene_seed": 102})
    other = _drawn(lazy)
    obs, _ = lazy.reset(seed=7, options={"scene_seed": 101})  # after another scene: the same scene again
    np.testing.assert_array_equal(_drawn(lazy), first)
    np.testing.assert_array_equal(obs["images"]["base"], first_image)
    assert np.abs(other - first).max() > 0.005
    for positions in (first, other):
        _, distance = distance_to_official(positions, official)
        assert distance > SAME_SCENE_M
    with pytest.raises(ValueError, match="scene_seed"):
        lazy.reset(options={"scene_seed": -1})
    with pytest.raises(ValueError, match="not both"):
        lazy.reset(options={"scene_seed": 1, "init_state": 0})


def test_the_live_clock_renders_every_step_it_may_hand_to_a_policy(lazy):
    """On the live clock any step's observation may start a call, so LiveClock asks for every step's render; an env
    that renders on request never hands it a black image."""
    from oxygen_gym.envs.live_clock import LiveClock

    clock = LiveClock(lazy)
    clock.reset(seed=7, options={"init_state": 2})
    for action in [None, ACTIONS[0], None]:
        obs, _, _, _, info = clock.step(action)
        assert info["rendered"] is True
        assert all(img.any() for img in obs["images"].values())
