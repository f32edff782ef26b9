"""Record the held-out frames tests/policy/test_memory_adapter.py checks the shipped memory adapter on.

    .venv/bin/python tools/memory_fixture.py --init-state 35 --out tests/fixtures/memory_heldout_init35.npz

The scripted expert (envs/experts.py) runs libero_spatial task 0 from an init state the shipped model never saw
(35: the demo's); the frame in the middle of each run of one memory answer (envs/scene_memory.py) is kept, with
the observation exactly as `policy.act` gets it (both 256 px cameras, state, prompt) and its label. The frames are
picked by that rule alone, never by what the adapter answers on them.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def record(init_state: int) -> dict[str, np.ndarray]:
    import gymnasium as gym

    import oxygen_gym.envs  # noqa: F401
    from oxygen_gym.envs.experts import PickPlaceExpert

    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, fast_render=True, fast_reset=True,
                   label_subtasks=True)
    try:
        obs, info = env.reset(seed=7, options={"init_state": init_state})
        expert = PickPlaceExpert(env.unwrapped.libero_env.env)
        frames, done = [], False
        while not done:
            frames.append((obs, info["memory"]))
            obs, _, terminated, truncated, info = env.step(expert(obs["state"]))
            done = terminated or truncated
    finally:
        env.close()
    runs: list[list[int]] = []
    for i, (_, label) in enumerate(frames):
        if not runs or frames[runs[-1][0]][1] != label:
            runs.append([])
        runs[-1].append(i)
    keep = [r[len(r) // 2] for r in runs]
    pick = [frames[i] for i in keep]
    return {"base": np.stack([o["images"]["base"] for o, _ in pick]),
            "wrist": np.stack([o["images"]["wrist"] for o, _ in pick]),
            "state": np.stack([o["state"] for o, _ in pick]), "prompt": np.array(pick[0][0]["prompt"]),
            "label": np.array([label for _, label in pick]), "step": np.array(keep), "init_state": np.array(init_state)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init-state", type=int, default=35)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    data = record(args.init_state)
    np.savez_compressed(args.out, **data)
    print(f"{args.out}: steps {data['step'].tolist()} labels {data['label'].tolist()} "
          f"({args.out.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
