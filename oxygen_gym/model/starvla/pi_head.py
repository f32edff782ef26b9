"""QwenPI_v3's action head: a layer-wise cross-attention DiT (StarVLA `LayerwiseFM_ActionHeader.py`,
`framework/VLM4A/QwenPI_v3.py`, commit 0ed0aad).

Block i cross-attends to backbone layer i's hidden state (`hidden_states[-depth:][i]`, the layers' outputs as
transformers' `output_hidden_states` records them) through that layer's own LayerNorm + Linear (`project_layers`),
masked by the prefix mask. The projected keys/values of every layer depend on the frame only: `taps` computes them
once per frame, from the prefill's hidden states, and every Euler step reads them. Tokens: [future tokens, encoded
noisy actions + position embedding] (no state token: QwenPI_v3 bins the state into the prompt); the velocity is the
action decoder of the DiT's pre-output (`return_pre_output=True`) at the action positions.
"""
from __future__ import annotations

import torch
from torch import nn

from ...core.guidance import Guidance
from ..flow_sampler import euler_sample
from .encoders import MLP, ActionEncoder
from .flow_dit import FlowDiT, time_bucket
from .starvla_config import StarVLAConfig


class PIHead(nn.Module):
    """Parameter names: `project_layers.*` and the head's `action_model.*` of a StarVLA QwenPI_v3 state dict."""

    def __init__(self, config: StarVLAConfig) -> None:
        super().__init__()
        d, w, layers = config.pi, config.backbone_width, config.backbone_layers
        self.dims, self.action_dim = d, config.action_dim
        self.project_layers = nn.ModuleList(
            nn.Identity() if w == d.width else nn.Sequential(nn.LayerNorm(w), nn.Linear(w, d.width))
            for _ in range(layers)
        )
        self.model = FlowDiT(d.width, d.heads, d.head_dim, layers, d.width, d.output_dim, d.interleave_self_attention)
        self.action_encoder = ActionEncoder(config.action_dim, d.width)
        self.action_decoder = MLP(d.width, d.decoder_hidden, config.action_dim)
        self.future_tokens = nn.Embedding(d.future_tokens, d.width)
        self.position_embedding = nn.Embedding(d.max_seq_len, d.width)

    # ---------------------------------------------------------------- once per frame
    def taps(self, layer_hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """`layer_hidden`: the backbone layers' outputs `[B, T, W]`, first to last. Returns the cross blocks' keys
        and values `[B, cross blocks, heads, T, head_dim]` (block i reads layer i)."""
        if len(layer_hidden) != len(self.project_layers):
            raise ValueError(f"pi: {len(self.project_layers)} projectors, got {len(layer_hidden)} backbone layers")
        contexts = [self.project_layers[i](layer_hidden[i]) for i in self.model.cross_blocks]
        kv = self.model.context_kv(contexts)
        return {"pi_k": torch.stack([k for k, _ in kv], 1), "pi_v": torch.stack([v for _, v in kv], 1)}

    # ---------------------------------------------------------------- per step
    def velocity(self, x: torch.Tensor, t: torch.Tensor, kvs, mask: torch.Tensor) -> torch.Tensor:
        """Data-ward velocity `[B, H, A]` at `x [B, H, A]`, time buckets `t [B]`."""
        h = x.shape[1]
        if h > self.position_embedding.num_embeddings:
            raise ValueError(f"pi: horizon {h} exceeds max_seq_len {self.position_embedding.num_embeddings}")
        dtype = self.future_tokens.weight.dtype
        actions = self.action_encoder(x.to(dtype), t) + self.position_embedding.weight[None, :h]
        future = self.future_tokens.weight[None].expand(x.shape[0], -1, -1)
        out = self.model(torch.cat([future, actions], 1), t, kvs, mask, pre_output=True)
        return self.action_decoder(out[:, -h:]).float()

    def sample(self, extras: dict[str, torch.Tensor], lengths: torch.Tensor, noise: torch.Tensor, num_steps: int,
               *, static: bool = False, guidance: Guidance | None = None) -> torch.Tensor:
        k, v = extras["pi_k"], extras["pi_v"]
        read = k.shape[3] if static else int(lengths.max())
        k, v = k[:, :, :, :read], v[:, :, :, :read]
        if guidance is not None and guidance.method == "guided":  # autograd cannot save inference tensors
            k, v = k.clone(), v.clone()
        kvs = [(k[:, i], v[:, i]) for i in range(k.shape[1])]
        mask = torch.arange(read, device=lengths.device)[None] < lengths[:, None]
        b, buckets = noise.shape[0], self.dims.timestep_buckets

        def velocity(x: torch.Tensor, step: int) -> torch.Tensor:
            t = torch.full((b,), time_bucket(step, num_steps, buckets), device=noise.device, dtype=torch.long)
            return self.velocity(x, t, kvs, mask)

        if guidance is not None:
            guidance.check_against(noise, "pi")
        return euler_sample(velocity, noise, num_steps, guidance)
