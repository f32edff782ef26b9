"""The one Euler loop every flow head integrates with (pi0.5's experts, XR0's DiT, StarVLA's pi and groot heads),
with real-time chunking, in core/guidance.py's flow-time convention:

- tau_k = k / num_steps from 0 (noise) towards 1 (data); a head's `velocity(x, k)` is the data-ward velocity
  u = dx/dtau at step k; `x += u / num_steps`. A family whose own time runs the other way maps onto it in its
  velocity (pi0.5: t = 1 - tau, so it returns -v);
- `guided` / `cheap` guidance: u is `guided_velocity(velocity at step k, x, tau_k, guidance)`;
- `trained` guidance (heads trained with clean action prefixes only, `frozen_prefix=True`): the frozen indices are
  set to the target before every step and after the last; the head conditions them on the data end itself.

`denoise_scope` is where a head's whole denoise runs: inference mode, except that the `guided` method differentiates
the head (one backward per step), so it runs outside inference mode with grad off (guided_velocity turns it on for the
vector-Jacobian product alone). A head prepares its per-call tensors inside the scope, so they are not inference
tensors when autograd must save them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from ..core.guidance import Guidance, guided_velocity


@contextmanager
def denoise_scope(guidance: Guidance | None) -> Iterator[None]:
    """Inference mode, or for `guided` guidance autograd-capable tensors with grad off (see the module docstring)."""
    if guidance is not None and guidance.method == "guided":
        with torch.inference_mode(False), torch.no_grad():
            yield
    else:
        with torch.inference_mode():
            yield


def euler_sample(
    velocity: Callable[[torch.Tensor, int], torch.Tensor], noise: torch.Tensor, num_steps: int,
    guidance: Guidance | None = None, *, frozen_prefix: bool = False,
) -> torch.Tensor:
    """Integrate `velocity(x, step)` from `noise [B, H, A]` in `num_steps` Euler steps (fp32 state; `velocity` may
    return another dtype, added as it comes). `guidance`: RTC per row (shapes checked by the caller, which names its
    head); the `guided` method differentiates `velocity` in x (run inside `denoise_scope`). `frozen_prefix`: the head
    accepts `trained` guidance (it feeds the frozen indices at the data end's time conditioning)."""
    if guidance is not None:
        if guidance.method == "trained" and not frozen_prefix:
            raise ValueError("guidance method 'trained' is not a velocity correction: the head must feed the frozen "
                             "prefix")
        guidance = guidance.to(noise.device)
    frozen = guidance.frozen[..., None] if guidance is not None and guidance.method == "trained" else None
    x = noise.float()
    dt = 1.0 / num_steps
    for step in range(num_steps):
        if guidance is None:
            u = velocity(x, step)
        elif frozen is not None:  # training-time RTC: the delayed prefix is clean at every step
            x = torch.where(frozen, guidance.target, x)
            u = velocity(x, step)
        else:
            u = guided_velocity(lambda x_t, step=step: velocity(x_t, step), x, step / num_steps, guidance)
        x = x + dt * u
    return x if frozen is None else torch.where(frozen, guidance.target, x)
