"""Fitting a camera image into a model's square input, as the references do it: openpi's client (uint8, PIL bilinear)
and lerobot's policies (float, torch bilinear without antialias), both scaled to fit with the aspect kept and centred
on black. Shared by every family (pi0.5, XR0, StarVLA) and the training data, so it lives below them."""
from __future__ import annotations

import numpy as np
import torch


def check_image(image) -> np.ndarray:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array (H, W, 3) uint8, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ValueError(f"image must be uint8 (H, W, 3), got dtype {image.dtype}")
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"image must have shape (H, W, 3), got {image.shape}")
    return image


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 `(H, W, 3)` -> `(height, width, 3)`: scaled to fit (aspect kept, PIL bilinear), centred on black."""
    image = check_image(image)
    cur_h, cur_w = image.shape[:2]
    if (cur_h, cur_w) == (height, width):
        return image
    from PIL import Image  # Pillow: only needed when images need resizing

    ratio = max(cur_w / width, cur_h / height)
    new_h, new_w = int(cur_h / ratio), int(cur_w / ratio)
    resized = Image.fromarray(image).resize((new_w, new_h), resample=Image.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - new_w) / 2)), max(0, int((height - new_h) / 2))))
    return np.asarray(canvas)


def resize_with_pad_torch(image: np.ndarray, height: int, width: int) -> torch.Tensor:
    """lerobot's resize (`resize_with_pad_torch`, policies/common/vla_utils.py): uint8 -> float [0, 1], torch
    bilinear without antialias (align_corners False), clamped, centred on black. Returns float `(3, height, width)`."""
    image = check_image(image)
    x = torch.from_numpy(image.astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    cur_h, cur_w = image.shape[:2]
    if (cur_h, cur_w) == (height, width):
        return x[0]
    ratio = max(cur_w / width, cur_h / height)
    new_h, new_w = int(cur_h / ratio), int(cur_w / ratio)
    x = torch.nn.functional.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    x = torch.nn.functional.pad(x, (left, width - new_w - left, top, height - new_h - top), value=0.0)
    return x[0]
