"""The starting noise of a flow-matching action head, and its scale.

Denoising integrates from noise at t = 1 to an action chunk at t = 0. With unit Gaussian noise (pi0.5's own sampler,
openpi `pi0.py` `sample_actions`) the chunk is a sample of the learned distribution, rare modes included. A scale
below 1 starts nearer the flow's mean path (0: one deterministic chunk per observation). 1 keeps the reference
sampler exactly and is the default: on libero-spatial's base model, scale 0 dropped the bowl less but often never
released it, and solved fewer fresh scenes (35% against 50%; docs/libero-spatial.md).
"""
from __future__ import annotations

import math


def check_noise_scale(value: float, name: str = "noise_scale") -> float:
    """`value` as a float, or a clear error naming `name`: a finite number >= 0."""
    error = ValueError(f"{name} must be a number >= 0 (1 = the reference sampler, 0 = deterministic), got {value!r}")
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise error from None
    if not math.isfinite(scale) or scale < 0:
        raise error
    return scale
