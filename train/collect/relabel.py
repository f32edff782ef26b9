"""Recompute a collection's per-step labels from its recorded MuJoCo states (`oxygen-gym collect libero --relabel`).

Every demo stores the flattened sim state of each step (LIBERO's replay format), so labels that are functions of
sim state (envs/experts.SubtaskLabeller, envs/scene_memory.MemoryLabeller) can be recomputed without rendering or
re-running the expert: restore the state, `forward()`, read the poses. This gives memory labels to collections made
before they were recorded, and applies a revised labeller to old data.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from .libero_hdf5 import demo_names


def _labels(sim, states: np.ndarray, ee: np.ndarray, grip: np.ndarray) -> tuple[list[str], list[str]]:
    from oxygen_gym.envs.experts import SubtaskLabeller
    from oxygen_gym.envs.scene_memory import MemoryLabeller

    def restore(state: np.ndarray) -> None:
        sim.sim.set_state_from_flattened(state)
        sim.sim.forward()

    restore(states[0])  # the labellers record the object's resting height from the first step, as at collection
    subtask, memory = SubtaskLabeller(sim), MemoryLabeller(sim)
    subs, mems = [], []
    for t in range(len(states)):
        restore(states[t])
        subs.append(subtask(ee[t, :3], grip[t]))
        mems.append(memory(ee[t, :3], grip[t]))
    return subs, mems


def relabel(folder: str | Path) -> dict:
    """Rewrite `subtasks` and `memory` of every demo of every task file in `folder`; returns counts."""
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401

    counts = {"demos": 0, "steps": 0, "subtasks_changed": 0, "memory_changed": 0}
    for path in sorted(Path(folder).glob("*_demo.hdf5")):
        with h5py.File(path, "r") as f:
            suite, task_id = str(f["data"].attrs["suite"]), int(f["data"].attrs["task_id"])
        env = gym.make("oxygen_gym/LIBERO-v0", suite=suite, task_id=task_id, camera_size=32, fast_render=True,
                       fast_reset=True)
        try:
            env.reset(seed=0, options={"init_state": 0})
            sim = env.unwrapped.libero_env.env
            with h5py.File(path, "a") as f:
                for name in demo_names(path):
                    g = f["data"][name]
                    states = g["states"][()]
                    subs, mems = _labels(sim, states, g["obs/ee_states"][()], g["obs/gripper_states"][()])
                    old_subs = [s.decode() if isinstance(s, bytes) else str(s) for s in g["subtasks"][()]]
                    old_mems = [s.decode() if isinstance(s, bytes) else str(s) for s in g["memory"][()]] if "memory" in g else []
                    counts["subtasks_changed"] += sum(a != b for a, b in zip(old_subs, subs))
                    counts["memory_changed"] += len(mems) if not old_mems else sum(a != b for a, b in zip(old_mems, mems))
                    for key, values in (("subtasks", subs), ("memory", mems)):
                        if key in g:
                            del g[key]
                        g.create_dataset(key, data=np.array(values, dtype=object), dtype=h5py.string_dtype())
                    counts["demos"] += 1
                    counts["steps"] += len(states)
                f.flush()
        finally:
            env.close()
    return counts
