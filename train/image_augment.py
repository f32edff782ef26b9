"""Image augmentation for behaviour cloning on few scenes: a random shift (DrQ-style: the policy must not key on exact
pixel positions) and colour jitter (brightness, contrast, saturation: it must not key on exact shading, which
LIBERO's lighting and the renderer change slightly from scene to scene). Both act on a batch of model-space images
`[B, cameras, 3, S, S]` in [-1, 1], each image drawn independently from a seeded generator."""
from __future__ import annotations

import torch

# ITU-R BT.601 luma weights: the greyscale a saturation change blends towards (torchvision's `rgb_to_grayscale`).
_LUMA = (0.299, 0.587, 0.114)


def random_shift(images: torch.Tensor, shift: int, generator: torch.Generator | None) -> torch.Tensor:
    """Translate each image of `[B, C_cams, 3, S, S]` by a random integer offset in [-shift, shift] per axis."""
    b, cams, c, s, _ = images.shape
    flat = images.reshape(b * cams, c, s, s)
    padded = torch.nn.functional.pad(flat, (shift, shift, shift, shift), mode="replicate")
    offsets = torch.randint(0, 2 * shift + 1, (b * cams, 2), generator=generator)
    out = torch.stack([padded[i, :, y : y + s, x : x + s] for i, (y, x) in enumerate(offsets.tolist())])
    return out.reshape(b, cams, c, s, s)


def color_jitter(images: torch.Tensor, strength: float, generator: torch.Generator | None) -> torch.Tensor:
    """Per image: brightness x(1 + u), contrast about its mean x(1 + u), saturation towards greyscale x(1 + u), each
    u ~ U(-strength, strength), applied in [0, 1] colour space (as torchvision's ColorJitter) and clipped."""
    if not 0.0 <= strength < 1.0:
        raise ValueError(f"color_jitter strength must be in [0, 1), got {strength}")
    b, cams, c, s, _ = images.shape
    if c != 3:
        raise ValueError(f"color_jitter expects RGB images [B, cams, 3, S, S], got {tuple(images.shape)}")
    x = (images.reshape(b * cams, 3, s, s) + 1.0) * 0.5
    u = (torch.rand(3, b * cams, 1, 1, 1, generator=generator) * 2.0 - 1.0) * strength
    x = (x * (1.0 + u[0])).clamp(0.0, 1.0)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * (1.0 + u[1]) + mean).clamp(0.0, 1.0)
    grey = (x * torch.tensor(_LUMA).view(1, 3, 1, 1)).sum(1, keepdim=True)
    x = ((x - grey) * (1.0 + u[2]) + grey).clamp(0.0, 1.0)
    return (x * 2.0 - 1.0).reshape(b, cams, 3, s, s)
