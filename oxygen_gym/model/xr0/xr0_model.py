"""Xiaomi-Robotics-0 behind the engine's interface (core/model_contract.py): a Qwen3-VL backbone (model/qwen3_vl) whose
prefill writes the slot KV, and a DiT action expert (action_expert.py) that reads the KV of the backbone's last
`read_layers` layers in place, by joint attention, with its own sink, state and action tokens after the prefix.

Language decoding (the chain-of-thought text mode, or any task prompt) continues the prefix through the backbone's
`extend` / `decode_step`; M-RoPE positions and cache indices are kept apart throughout.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ...core.guidance import Guidance
from ...core.kv_view import KVCache
from ...core.model_contract import ActionHead, PrefixState
from ..qwen3_vl import Qwen3VLBackbone
from ..qwen_backed import QwenBackedModel
from .action_expert import XR0ActionExpert
from .xr0_config import XR0Config
from ..qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs

ACTION_HEAD = "actions"  # XR0 has one DiT expert


class XR0Model(nn.Module, QwenBackedModel):

    def __init__(self, config: XR0Config) -> None:
        super().__init__()
        self.config = config
        self.vlm = Qwen3VLBackbone(config.qwen3vl_config())
        self.expert = XR0ActionExpert(config)
        self.dim_mask: torch.Tensor | None = None  # active action dims of the loaded statistics (None: all)
        self.requires_grad_(False)

    @property
    def action_heads(self) -> dict[str, ActionHead]:
        c = self.config
        # The DiT's own K/V are joined inside attention, never written to the row: nothing reserved past the prefix.
        return {ACTION_HEAD: ActionHead(ACTION_HEAD, c.action_dim, c.horizon, c.num_steps, writes_cache=False)}

    def clear_caches(self) -> None:
        self.expert.clear_caches()

    # ---------------------------------------------------------------- stages
    def prefill_frame(self, cache: KVCache, inputs: QwenPrefixInputs) -> PrefixState:
        pre = self.vlm.prefill(cache, inputs.input_ids, inputs.pixel_values, inputs.image_grid_thw, inputs.lengths)
        return PrefixState(pre.lengths, pre.next_positions, {"state": inputs.state})

    def denoise_head(
        self, head: str, cache: KVCache, state: PrefixState, noise: torch.Tensor, num_steps: int, *, static: bool = False,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        if head != ACTION_HEAD:
            raise ValueError(f"head: XR0 has one action head {ACTION_HEAD!r}, got {head!r}")
        return self.expert.sample(
            cache, state.lengths, state.next_positions, noise, state.extras["state"], num_steps, static=static,
            dim_mask=self.dim_mask, guidance=guidance,
        )


# Random-weight backbones: token embeddings N(0, 1) and every matrix N(0, gain / sqrt(fan_in)), with the residual
# branches' output projections at gain 3, so each layer moves the residual stream and greedy text depends on the
# observation (torch's default init leaves the stream dominated by the input embedding: measured, one token repeated).
RESIDUAL_OUT_GAIN = 3.0


def build_xr0(config: XR0Config | str, *, seed: int = 0, device="cpu", dtype: torch.dtype | None = None) -> XR0Model:
    """Random weights from `seed` (drawn under a private RNG state: the caller's is untouched)."""
    config = XR0Config.named(config) if isinstance(config, str) else config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = XR0Model(config)
        gen = torch.Generator().manual_seed(int(seed) + 1)
        for name, p in model.vlm.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.data.normal_(0.0, 1.0, generator=gen)
            elif p.dim() == 2 and name.startswith("model.language_model."):
                gain = RESIDUAL_OUT_GAIN if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                p.data.normal_(0.0, gain / math.sqrt(p.shape[1]), generator=gen)
            elif name == "lm_head.weight" and not config.backbone.get("tie_word_embeddings", True):
                p.data.normal_(0.0, 1.0 / math.sqrt(p.shape[1]), generator=gen)
    model.vlm.tie_weights()
    return model.to(device=device, dtype=dtype or torch.float32).eval()
