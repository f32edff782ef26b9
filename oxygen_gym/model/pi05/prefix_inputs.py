"""pi0.5's prefix-input bundle: one frame's model-ready observation (images per slot, prompt tokens), kept by the
engine for requests that must wait for a slot and batched across robots by concatenating rows."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PrefixInputs:
    """`images`: one `[B, 3, H, W]` tensor in [-1, 1] per image slot; `image_masks`: bool `[B]` per slot (a masked
    slot writes no cache positions); `tokens`, `token_masks`: `[B, L]` prompt ids and their validity."""

    images: list[torch.Tensor]
    image_masks: list[torch.Tensor]
    tokens: torch.Tensor
    token_masks: torch.Tensor

    @staticmethod
    def cat(rows: Sequence["PrefixInputs"]) -> "PrefixInputs":
        if len(rows) == 1:
            return rows[0]
        return PrefixInputs(
            [torch.cat(cams) for cams in zip(*(r.images for r in rows))],
            [torch.cat(ms) for ms in zip(*(r.image_masks for r in rows))],
            torch.cat([r.tokens for r in rows]),
            torch.cat([r.token_masks for r in rows]),
        )
