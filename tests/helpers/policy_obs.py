"""Observations in each robot's format (docs/api.md), drawn from a seeded generator."""
import numpy as np

CAMERAS = {"libero": ("base", "wrist"), "droid": ("exterior", "wrist"), "aloha": ("high", "left_wrist", "right_wrist")}
STATE_DIM = {"libero": 8, "droid": 8, "aloha": 14}


def make_obs(robot: str, rng: np.random.Generator, size=(96, 128), prompt="put the bowl on the plate") -> dict:
    images = {c: rng.integers(0, 256, (*size, 3), dtype=np.uint8) for c in CAMERAS[robot]}
    state = rng.uniform(-0.5, 0.5, STATE_DIM[robot]).astype(np.float32)
    if robot == "aloha":
        state[[6, 13]] = rng.uniform(0.2, 0.8, 2)
    return {"images": images, "state": state, "prompt": prompt}
