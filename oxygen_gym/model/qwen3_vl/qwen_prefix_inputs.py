"""One frame's prefix for a family on a Qwen3-VL backbone (XR0, StarVLA; batch-first, the engine never looks inside):
the processor's tokens and pixels, and the robot state the action heads read beside the KV."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class QwenPrefixInputs:
    """`input_ids [B, L]` right-padded, row b valid up to `lengths[b]`; `pixel_values [patches, patch_dim]` and
    `image_grid_thw [images, 3]` of every row's images in row order (None: no images); `state [B, state_dim]` fp32."""

    input_ids: torch.Tensor
    lengths: torch.Tensor
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    state: torch.Tensor

    @staticmethod
    def from_processor(out, state, state_dim: int, device, dtype) -> "QwenPrefixInputs":
        """One frame's bundle from a Qwen processor's output (`input_ids`, optional `pixel_values` /
        `image_grid_thw`) and the normalised robot state (numpy, zero-padded to `state_dim`)."""
        import numpy as np

        ids = out["input_ids"]
        padded = np.zeros(state_dim, np.float32)
        padded[: state.shape[0]] = state
        pix, grid = out.get("pixel_values"), out.get("image_grid_thw")
        return QwenPrefixInputs(
            ids.to(device), torch.tensor([ids.shape[1]], device=device),
            None if pix is None else pix.to(device, dtype), None if grid is None else grid.to(device),
            torch.from_numpy(padded)[None].to(device),
        )

    @staticmethod
    def cat(rows: Sequence["QwenPrefixInputs"]) -> "QwenPrefixInputs":
        if len(rows) == 1:
            return rows[0]
        length = max(r.input_ids.shape[1] for r in rows)
        ids = torch.zeros(sum(r.input_ids.shape[0] for r in rows), length, dtype=torch.long, device=rows[0].input_ids.device)
        i = 0
        for r in rows:
            ids[i : i + r.input_ids.shape[0], : r.input_ids.shape[1]] = r.input_ids
            i += r.input_ids.shape[0]
        with_images = [r for r in rows if r.pixel_values is not None]
        if with_images and len(with_images) != len(rows):
            without = [i for i, r in enumerate(rows) if r.pixel_values is None]
            raise ValueError(
                f"QwenPrefixInputs.cat: pixel_values / image_grid_thw are None in rows {without} only: every row must "
                "have images, or none"
            )
        return QwenPrefixInputs(
            ids,
            torch.cat([r.lengths for r in rows]),
            torch.cat([r.pixel_values for r in rows]) if with_images else None,
            torch.cat([r.image_grid_thw for r in rows]) if with_images else None,
            torch.cat([r.state for r in rows]),
        )
