"""Model inputs the way Qwen's own processor builds them: the chat template, then `Qwen3VLProcessor` (smart resize,
patch flattening, one image-pad token per merged patch between vision start/end). Nothing is re-implemented, so a
checkpoint sees exactly the prompts transformers would give it.

`ImageOnlyQwen3VLProcessor`: `Qwen3VLProcessor` insists on a video processor, which transformers only builds with
torchvision installed; images alone need none (transformers/models/qwen3_vl/processing_qwen3_vl.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from transformers import Qwen3VLProcessor


class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
    """Qwen3VLProcessor without the video processor (images and text only)."""

    attributes = ["image_processor", "tokenizer"]

    def __init__(self, image_processor=None, tokenizer=None, chat_template: str | None = None, **kwargs) -> None:
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


@dataclass
class QwenPrompt:
    """One prompt's model inputs: `input_ids [1, L]`, `pixel_values [patches, patch_dim]`, `image_grid_thw [n, 3]`."""

    input_ids: torch.Tensor
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    text: str  # the templated prompt, before the image pads are expanded


def chat_messages(num_images: int, text: str) -> list[dict[str, Any]]:
    """One user turn: the images first, then the instruction (Qwen's usual order)."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(num_images)]
    content.append({"type": "text", "text": text})
    return [{"role": "user", "content": content}]


def processor_inputs(
    processor: Qwen3VLProcessor, images: Sequence[np.ndarray], text: str, *, add_generation_prompt: bool = True
) -> QwenPrompt:
    """`images`: uint8 `[H, W, 3]` arrays. The processor's chat template places the vision tokens; the processor
    resizes, patches and expands each image pad to its grid's merged-token count."""
    for i, im in enumerate(images):
        if im.dtype != np.uint8 or im.ndim != 3 or im.shape[-1] != 3:
            raise ValueError(f"images[{i}] must be uint8 [H, W, 3], got {im.dtype} {im.shape}")
    templated = processor.apply_chat_template(
        chat_messages(len(images), text), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    out = processor(images=list(images) or None, text=[templated], return_tensors="pt")
    return QwenPrompt(out["input_ids"], out.get("pixel_values"), out.get("image_grid_thw"), templated)
