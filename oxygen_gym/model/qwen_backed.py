"""The engine members every family on a Qwen3-VL backbone shares (XR0, StarVLA): where the pool lives, the KV layout,
the prefix bundle (the Qwen processor's ids, pixels, grids and the robot state), and language continuing the prefix
through the backbone with per-task adapters. A family adds its config, its heads, `prefill_frame` and `denoise_head`.

It needs `self.vlm` (a `Qwen3VLBackbone`) and `self.config` with `image_size` and `max_prefix_length()`.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.kv_view import KVCache
from ..core.model_contract import EngineModel, KVLayout
from .lora_bank import adapter_routing
from .qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs


class QwenBackedModel(EngineModel):
    language_layers = "vlm.model.language_model.layers"  # what per-task adapters may target (model/lora_bank.py)

    @property
    def device(self) -> torch.device:
        return self.vlm.device

    @property
    def dtype(self) -> torch.dtype:
        return self.vlm.dtype

    @property
    def kv_layout(self) -> KVLayout:
        return self.vlm.kv_layout

    @property
    def image_size(self) -> int:
        """Side of the square camera images the policy feeds the processor."""
        return self.config.image_size

    def max_prefix_length(self) -> int:
        return self.config.max_prefix_length()

    def prefix_length(self, inputs: QwenPrefixInputs) -> int:
        return int(inputs.lengths[0])

    def batch_prefix_inputs(self, inputs: Sequence[QwenPrefixInputs]) -> QwenPrefixInputs:
        return QwenPrefixInputs.cat(inputs)

    def extend(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, positions: torch.Tensor | None = None,
               read_len: int | None = None, *, adapters: torch.Tensor | None = None) -> torch.Tensor:
        with adapter_routing(self, adapters):  # the bank is this model's (its language layers are under vlm.)
            return self.vlm.extend(cache, tokens, start, positions, read_len)

    def decode_step(self, cache: KVCache, last_tokens: torch.Tensor, positions: torch.Tensor,
                    cache_index: torch.Tensor | None = None, read_len: int | None = None, *,
                    adapters: torch.Tensor | None = None) -> torch.Tensor:
        with adapter_routing(self, adapters):
            return self.vlm.decode_step(cache, last_tokens, positions, cache_index, read_len)
