"""Shared check of the collections the state expert labels (DAgger rollouts, perturbed demos): replaying a demo's
executed actions from its scene visits the stored states, and the state expert, built with the settings the
collection recorded (its file's `env_args`), labels each exactly as stored."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def assert_replay_labels_match(path: str | Path, demo) -> None:
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401
    from oxygen_gym.envs.state_expert import StatePickPlaceExpert
    from oxygen_gym.train.collect.libero_hdf5 import file_attrs

    attrs = file_attrs(path)
    cfg = json.loads(attrs["env_args"])
    env = gym.make("oxygen_gym/LIBERO-v0", suite=str(attrs["suite"]), task_id=int(attrs["task_id"]),
                   protocol=cfg["protocol"], camera_size=cfg["camera_size"], max_steps=cfg["max_steps"],
                   fast_render=True, fast_reset=True)  # only states are compared: how frames render is moot
    try:
        obs, _ = env.reset(seed=env.unwrapped.protocol.seed, options={"scene_seed": int(demo.attrs["scene_seed"])})
        expert = StatePickPlaceExpert(env.unwrapped.libero_env.env, cfg.get("release_xy_m"), cfg.get("lift_speed"),
                                      cfg.get("place_height_m"))
        for t in range(len(demo)):
            np.testing.assert_allclose(obs["state"][:6], demo.ee_states[t], atol=1e-6)
            np.testing.assert_array_equal(expert(obs["state"]), demo.actions[t])
            expert.executed(demo.executed_actions[t])
            obs, *_ = env.step(demo.executed_actions[t])
    finally:
        env.close()
