"""The Euler loop both StarVLA flow heads share, with real-time chunking.

StarVLA's flow time is engine/rtc.py's convention already (`LayerwiseFM_ActionHeader.py` / lerobot's GR00T head
`get_action`): tau = k / num_steps from 0 (noise) towards 1 (data), the head predicts the data-ward velocity u and
`x += u / num_steps`; the DiT is fed the bucket int(tau * 1000). So guidance is `guided_velocity(u, x, tau)` as is.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...engine.rtc import Guidance, guided_velocity


def time_bucket(step: int, num_steps: int, buckets: int) -> int:
    """The integer time the DiT sees at Euler step `step` (`int(t_cont * num_timestep_buckets)`)."""
    return int(step / float(num_steps) * buckets)


def euler_sample(
    velocity: Callable[[torch.Tensor, int], torch.Tensor], noise: torch.Tensor, num_steps: int,
    guidance: Guidance | None, head: str,
) -> torch.Tensor:
    """Integrate `velocity(x, step)` from `noise [B, H, A]` in `num_steps` Euler steps (fp32 state). `guidance`: RTC
    per row; the `guided` method differentiates `velocity` in x (the caller's tensors must not be inference tensors)."""
    if guidance is not None:
        guidance.check_against(noise, head)
    x = noise.float()
    dt = 1.0 / num_steps
    for step in range(num_steps):
        if guidance is None:
            u = velocity(x, step)
        else:
            u = guided_velocity(lambda x_t, step=step: velocity(x_t, step), x, step / num_steps, guidance)
        x = x + dt * u.float()
    return x
