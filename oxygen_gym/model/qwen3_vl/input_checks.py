"""Prompt checks before a prefill: a mismatch between the prompt, the pixels and the grids fails here, naming the
field, instead of scattering image features into the wrong tokens (transformers raises one generic message)."""
from __future__ import annotations

import torch

from .qwen_config import Qwen3VLSpec


def row_lengths(input_ids: torch.Tensor, lengths: torch.Tensor | None, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Valid tokens per row `[B]` (int64). Rows are right-padded: a mask must be ones then zeros."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
    b, length = input_ids.shape
    if lengths is not None and attention_mask is not None:
        raise ValueError("pass lengths or attention_mask, not both")
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}")
        m = attention_mask.to(torch.bool)
        lengths = m.sum(1)
        prefix = torch.arange(length, device=m.device)[None] < lengths[:, None]
        if not bool((prefix == m).all()):
            raise ValueError("attention_mask must be right-padded (each row: ones, then zeros); compact left padding first")
    if lengths is None:
        return torch.full((b,), length, dtype=torch.int64, device=input_ids.device)
    lengths = torch.as_tensor(lengths, device=input_ids.device).to(torch.int64)
    if lengths.shape != (b,) or bool((lengths < 1).any()) or bool((lengths > length).any()):
        raise ValueError(f"lengths must be [B={b}] ints in [1, L={length}], got {lengths.tolist()}")
    return lengths


def check_images(
    spec: Qwen3VLSpec, image_mask: torch.Tensor, pixel_values: torch.Tensor | None, image_grid_thw: torch.Tensor | None
) -> None:
    """`image_mask [B, L]`: the valid image-pad tokens. Their count, the pixel rows and the grids must agree."""
    n_tokens = int(image_mask.sum())
    if pixel_values is None or image_grid_thw is None:
        if pixel_values is not None or image_grid_thw is not None:
            raise ValueError("pixel_values and image_grid_thw come together: one of them is None")
        if n_tokens:
            raise ValueError(f"input_ids hold {n_tokens} image tokens (id {spec.image_token_id}) but pixel_values is None")
        return
    v = spec.vision
    grid = torch.as_tensor(image_grid_thw)
    if grid.dim() != 2 or grid.shape[1] != 3:
        raise ValueError(f"image_grid_thw must be [num_images, 3] (t, h, w), got shape {tuple(grid.shape)}")
    if bool((grid[:, 1:] % v.merge_size != 0).any()):
        raise ValueError(f"image_grid_thw {grid.tolist()}: h and w must be multiples of spatial_merge_size={v.merge_size}")
    if pixel_values.dim() != 2 or pixel_values.shape[1] != v.patch_dim:
        raise ValueError(
            f"pixel_values must be [patches, {v.patch_dim}] (in_channels x temporal_patch_size x patch_size^2), "
            f"got shape {tuple(pixel_values.shape)}"
        )
    patches = int(grid.prod(-1).sum())
    if pixel_values.shape[0] != patches:
        raise ValueError(f"pixel_values has {pixel_values.shape[0]} rows but image_grid_thw {grid.tolist()} needs {patches}")
    needed = patches // v.merge_size**2
    if n_tokens != needed:
        raise ValueError(
            f"input_ids hold {n_tokens} image tokens (id {spec.image_token_id}) but image_grid_thw {grid.tolist()} "
            f"needs {needed} (t*h*w / spatial_merge_size^2 per image)"
        )
