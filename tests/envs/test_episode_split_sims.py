"""Every sim's episode split counts its camera rendering apart from physics (envs/rendering.py RenderCount), so
eval's summary has a render part for ALOHA and DROID as for LIBERO (test_envs_render_on_request.py)."""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import oxygen_gym.envs  # noqa: E402,F401
from oxygen_gym.envs import run_episode  # noqa: E402

SIZE = 48
STEPS = 4


class HoldStill:
    """A policy that returns a chunk of zero actions."""

    def __init__(self, action_dim: int) -> None:
        self.action_dim = action_dim

    def act(self, obs):
        return np.zeros((STEPS, self.action_dim), np.float32), []


@pytest.mark.parametrize("env_id, needs, kwargs", [
    ("oxygen_gym/ALOHA-v0", "gym_aloha", {"task": "transfer_cube"}),
    ("oxygen_gym/DROID-v0", "robosuite", {"task": "lift"}),
])
def test_render_is_counted_apart_from_physics(env_id, needs, kwargs):
    pytest.importorskip(needs)
    env = gym.make(env_id, camera_size=SIZE, fast_render=True, **kwargs)
    try:
        policy = HoldStill(env.action_space.shape[0])
        res = run_episode(env, policy, max_steps=STEPS, replan=STEPS, seed=0, init_state=0)
        cameras = len(env.unwrapped.cameras)
        counter = env.unwrapped.render_count
    finally:
        env.close()
    assert res.steps == STEPS
    assert res.frames_rendered == STEPS * cameras  # every step renders every camera; the reset's are in reset
    assert counter.frames == (STEPS + 1) * cameras
    assert set(res.time_s) == {"reset", "physics", "render", "policy", "other"}
    assert res.time_s["render"] > 0 and res.time_s["physics"] > 0
    assert sum(res.time_s.values()) == pytest.approx(res.wall_s, abs=1e-3)
