"""A checkpoint's own sampling noise: config.json `noise_scale`, one number or one per action dimension
(policies/action_noise.py), written by `save_pretrained(noise_scale=)` (`oxygen-gym train --noise-scale`).

pi0.5's reference sampler starts every dimension from unit noise; a model may sample better otherwise (the shipped
`libero-spatial` declares a deterministic arm and a sampled gripper). `MultiTaskPolicy.from_pretrained` uses the
declaration unless given `noise_scale=`; eval records it among its result-deciding fields, and `--noise-scale`
still wins over it.
"""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError

from ..action_noise import NoiseScale, check_noise_scale
from .declared import declared_value

KEY = "noise_scale"


def declared_noise_scale(name_or_path: str | Path, revision: str | None = None) -> NoiseScale | None:
    """The checkpoint's `noise_scale`, or None where it declares none. A bad value is a CheckpointError naming the
    file and the field."""
    found = declared_value(name_or_path, KEY, revision)
    if found is None:
        return None
    root, cfg = found
    try:
        return check_noise_scale(cfg[KEY], f"{root / CONFIG_FILE}: {KEY!r}")
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def resolved_noise_scale(name_or_path: str | Path, given: NoiseScale | None, revision: str | None = None) -> NoiseScale:
    """The noise scale a policy of `name_or_path` samples with: `given` where not None, else the checkpoint's
    declaration, else 1 (the reference sampler)."""
    if given is not None:
        return check_noise_scale(given)
    declared = declared_noise_scale(name_or_path, revision)
    return 1.0 if declared is None else declared
