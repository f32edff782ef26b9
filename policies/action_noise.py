"""The starting noise of a flow-matching action head, and its scale: one number, or one per action dimension.

Denoising integrates from noise at t = 1 to an action chunk at t = 0. With unit Gaussian noise (pi0.5's own sampler,
openpi `pi0.py` `sample_actions`) the chunk is a sample of the learned distribution, rare modes included. A scale
below 1 starts nearer the flow's mean path (0: one deterministic chunk per observation). 1 keeps the reference
sampler exactly and is the default. On libero-spatial's base model, scale 0 everywhere dropped the bowl less but
often never released it (35% of fresh scenes against 50%): the release needs the gripper's sampled chance. A scale
per dimension keeps it there and takes the arm's away (`[0, 0, 0, 0, 0, 0, 1]`, the shipped model's declaration,
experiments/libero-spatial-log.md "A deterministic arm, a sampled gripper").

A sequence of n scales covers a head's first n action dimensions, in the model's action order (every robot
transform here keeps the robot's order: LIBERO's 3 position, 3 rotation, gripper); the dimensions past them (the
padding of a 32-d head) keep unit noise, as in training.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from oxygen_gym.model.noise_rule import NoiseScale

__all__ = ["NoiseScale", "check_noise_scale", "noise_multiplier", "noise_scale_arg", "parse_noise_scale"]


def __getattr__(name: str):
    # The rule's names load on first use: the command-line parsers take `noise_scale_arg` from here, and importing
    # oxygen_gym.model (torch) at parser build would make every `oxygen-gym ... --help` slow (oxygen_gym/cli.py).
    if name in ("NoiseScale", "check_noise_scale"):
        from oxygen_gym.model import noise_rule

        return getattr(noise_rule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_noise_scale(text: str, name: str = "--noise-scale") -> NoiseScale:
    """A command line's noise scale: `0.5`, or one per action dimension, comma separated (`0,0,0,0,0,0,1`)."""
    from oxygen_gym.model.noise_rule import check_noise_scale

    parts = []
    for part in str(text).split(","):
        try:
            parts.append(float(part))
        except ValueError:
            parts.append(part)  # refused below, with the message every other bad value gets
    return check_noise_scale(parts[0] if len(parts) == 1 else parts, name)


def noise_multiplier(scale: NoiseScale, action_dim: int, head: str = "actions") -> float | torch.Tensor:
    """What a head's `[.., action_dim]` noise is multiplied by: the number itself, or `[action_dim]` scales (the
    sequence, then 1 for the dimensions past it). A sequence longer than the head is an error naming it."""
    import torch

    if isinstance(scale, float):
        return scale
    if len(scale) > action_dim:
        raise ValueError(f"noise_scale: {len(scale)} scales but head {head!r} has {action_dim} action dims")
    out = torch.ones(action_dim)
    out[: len(scale)] = torch.tensor(scale)
    return out


def noise_scale_arg(text: str) -> NoiseScale:
    """`parse_noise_scale` as an argparse type, so a bad value's message is the one printed."""
    import argparse

    try:
        return parse_noise_scale(text, "the noise scale")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
