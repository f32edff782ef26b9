"""The starting noise of a flow-matching action head, and its scale.

Denoising integrates from noise at t = 1 to an action chunk at t = 0. With unit Gaussian noise (pi0.5's own sampler,
openpi `pi0.py` `sample_actions`) the chunk is a sample of the learned distribution, rare modes included: a small
policy that learned "open" as a minority mode of carrying frames (train/chunk_cut.py) opens on a few percent of the
steps and drops the bowl. A scale below 1 narrows the start towards the flow's mean path (0: one deterministic chunk
per observation), trading sample diversity for the dominant mode. 1 keeps the reference sampler exactly.
"""
from __future__ import annotations

import math


def check_noise_scale(value: float, name: str = "noise_scale") -> float:
    """`value` as a float, or a clear error naming `name`: a finite number >= 0."""
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number >= 0 (1 = the reference sampler, 0 = deterministic), got {value!r}") from None
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"{name} must be a number >= 0 (1 = the reference sampler, 0 = deterministic), got {value!r}")
    return scale
