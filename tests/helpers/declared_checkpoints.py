"""Tiny checkpoints of our family for the tests of what a checkpoint declares for its own evaluation (config.json
`replan_steps`, `noise_scale`, `language_tasks`): one folder declaring the given fields, one declaring nothing, same
weights."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from oxygen_gym.model import NormStats, build_model, save_pretrained

STATS = {  # LIBERO's 8-d state and 7-d action, identity-like quantiles
    "state": NormStats(mean=np.zeros(8), std=np.ones(8), q01=-np.ones(8), q99=np.ones(8)),
    "actions": NormStats(mean=np.zeros(7), std=np.ones(7), q01=-np.ones(7), q99=np.ones(7)),
}


def identity_stats(state_dim: int, action_dim: int) -> dict[str, NormStats]:
    """Identity-like quantile statistics for a robot's state and action dims (ALOHA: 14 and 14)."""

    def one(n: int) -> NormStats:
        return NormStats(mean=np.zeros(n), std=np.ones(n), q01=-np.ones(n), q99=np.ones(n))

    return {"state": one(state_dim), "actions": one(action_dim)}


def declared_and_plain(root: Path, stats: dict[str, NormStats] = STATS, **declared) -> tuple[Path, Path]:
    """(root/declared with `declared` written into its config.json, root/plain without), both returning 10 actions;
    `stats`: the robot's normalisation statistics (default LIBERO's)."""
    model = build_model("tiny", seed=0)
    return (save_pretrained(model, root / "declared", stats, n_action_steps=10, **declared),
            save_pretrained(model, root / "plain", stats, n_action_steps=10))
