"""Shared check of the collections the state expert labels (DAgger rollouts, perturbed demos): replaying a demo's
executed actions from its scene visits the stored states, and the state expert labels each exactly as stored."""
from __future__ import annotations

import numpy as np


def assert_replay_labels_match(demo, camera_size: int, max_steps: int) -> None:
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert

    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, camera_size=camera_size,
                   fast_render=True, fast_reset=True, max_steps=max_steps)
    try:
        obs, _ = env.reset(seed=7, options={"scene_seed": int(demo.attrs["scene_seed"])})
        expert = StatePickPlaceExpert(env.unwrapped.libero_env.env)
        for t in range(len(demo)):
            np.testing.assert_allclose(obs["state"][:6], demo.ee_states[t], atol=1e-6)
            np.testing.assert_array_equal(expert(obs["state"]), demo.actions[t])
            expert.executed(demo.executed_actions[t])
            obs, *_ = env.step(demo.executed_actions[t])
    finally:
        env.close()
