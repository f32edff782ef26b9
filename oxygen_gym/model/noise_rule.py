"""The rule for a flow-matching head's noise scale: a number >= 0, or a list of them, one per action dimension.

It lives beside the model so `save_pretrained` (which writes a checkpoint's declared `noise_scale`) and the policies
(policies/action_noise.py, which sample with it) check one rule.
"""
from __future__ import annotations

import math

NoiseScale = float | tuple[float, ...]


def _scale_value(value: object, name: str) -> float:
    error = ValueError(f"{name} must be a number >= 0 (1 = the reference sampler, 0 = deterministic) or a list of "
                       f"them, one per action dimension; got {value!r}")
    if isinstance(value, (bool, str, bytes)):  # a command line's text goes through parse_noise_scale
        raise error
    try:
        scale = float(value)
    except (TypeError, ValueError):
        raise error from None
    if not math.isfinite(scale) or scale < 0:
        raise error
    return scale


def check_noise_scale(value: object, name: str = "noise_scale") -> NoiseScale:
    """`value` as a float, or as a tuple of floats (one per action dimension), or a clear error naming `name`."""
    if not isinstance(value, (list, tuple)):
        return _scale_value(value, name)
    scales = tuple(_scale_value(v, name) for v in value)
    if not scales:
        raise ValueError(f"{name}: an empty list; give one number, or one per action dimension")
    return scales
