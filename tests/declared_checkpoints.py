"""Tiny checkpoints of our family for the tests of what a checkpoint declares for its own evaluation (config.json
`replan_steps`, `noise_scale`): one folder declaring the given fields, one declaring nothing, same weights."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from oxygen_gym.model import NormStats, build_model, save_pretrained

STATS = {  # LIBERO's 8-d state and 7-d action, identity-like quantiles
    "state": NormStats(mean=np.zeros(8), std=np.ones(8), q01=-np.ones(8), q99=np.ones(8)),
    "actions": NormStats(mean=np.zeros(7), std=np.ones(7), q01=-np.ones(7), q99=np.ones(7)),
}


def declared_and_plain(root: Path, **declared) -> tuple[Path, Path]:
    """(root/declared with `declared` written into its config.json, root/plain without), both returning 10 actions."""
    model = build_model("tiny", seed=0)
    return (save_pretrained(model, root / "declared", STATS, n_action_steps=10, **declared),
            save_pretrained(model, root / "plain", STATS, n_action_steps=10))
