"""GR00T N1.5's flow-matching action head (lerobot 0.4.4 `policies/groot/action_head/flow_matching_action_head.py`,
the head StarVLA's QwenGR00T puts on Qwen3-VL) over the backbone's final normed hidden state.

Once per frame (`taps`): the backbone features through `vlln` (LayerNorm) and `vl_self_attention` (plain
transformer blocks, masked by the prefix mask so padded rows of a batch leave the valid ones unchanged), then every
cross block's keys/values. Per Euler step: tokens [state encoder(state), future tokens, action encoder(x, t) +
position embedding], each encoder embodiment-specific; the DiT alternates cross- and self-attention and ends in its
time-modulated output layer; the decoder's last `horizon` rows are the velocity.
"""
from __future__ import annotations

import torch
from torch import nn

from ...core.guidance import Guidance
from ..flow_sampler import euler_sample
from .encoders import CategorySpecificMLP, MultiEmbodimentActionEncoder
from .flow_dit import Block, FlowDiT, time_bucket
from .starvla_config import StarVLAConfig


class SelfAttentionTransformer(nn.Module):
    def __init__(self, width: int, heads: int, head_dim: int, depth: int) -> None:
        super().__init__()
        self.transformer_blocks = nn.ModuleList(Block(width, heads, head_dim, None, ada=False) for _ in range(depth))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for block in self.transformer_blocks:
            x = block(x, None, None, mask)
        return x


class GR00THead(nn.Module):
    """Parameter names: lerobot's `FlowmatchingActionHead` (`model.*`, `state_encoder.*`, `action_encoder.*`,
    `action_decoder.*`, `future_tokens`, `position_embedding`, `vlln`, `vl_self_attention.*`)."""

    def __init__(self, config: StarVLAConfig) -> None:
        super().__init__()
        d, w = config.groot, config.backbone_width
        self.dims, self.action_dim = d, config.action_dim
        self.model = FlowDiT(d.width, d.heads, d.head_dim, d.depth, w, d.hidden, interleave=True)
        self.state_encoder = CategorySpecificMLP(d.num_embodiments, d.max_state_dim, d.hidden, d.width)
        self.action_encoder = MultiEmbodimentActionEncoder(config.action_dim, d.width, d.num_embodiments)
        self.action_decoder = CategorySpecificMLP(d.num_embodiments, d.hidden, d.hidden, config.action_dim)
        self.future_tokens = nn.Embedding(d.future_tokens, d.width)
        self.position_embedding = nn.Embedding(d.max_seq_len, d.width)
        if d.vl_layers:
            self.vlln = nn.LayerNorm(w)
            self.vl_self_attention = SelfAttentionTransformer(w, w // d.vl_head_dim, d.vl_head_dim, d.vl_layers)

    # ---------------------------------------------------------------- once per frame
    def backbone_features(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """lerobot's `process_backbone_output`: vlln, then the self-attention transformer (identity without)."""
        if not self.dims.vl_layers:
            return hidden
        return self.vl_self_attention(self.vlln(hidden), mask)

    def taps(self, hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """`hidden [B, T, W]`: the backbone's last layer output (before the final norm, as StarVLA reads it:
        starvla_model.py). Returns the cross blocks' keys and values `[B, cross blocks, heads, T, head_dim]`."""
        feats = self.backbone_features(hidden, mask)
        kv = self.model.context_kv([feats] * len(self.model.cross_blocks))
        return {"groot_k": torch.stack([k for k, _ in kv], 1), "groot_v": torch.stack([v for _, v in kv], 1)}

    # ---------------------------------------------------------------- per step
    def embodiment(self, rows: int, device) -> torch.Tensor:
        return torch.full((rows,), self.dims.embodiment_id, dtype=torch.long, device=device)

    def state_features(self, state: torch.Tensor) -> torch.Tensor:
        """`state [B, max_state_dim]` (zero-padded) -> one token `[B, 1, width]`."""
        ids = self.embodiment(state.shape[0], state.device)
        return self.state_encoder(state[:, None].to(self.future_tokens.weight.dtype), ids)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, state_tokens: torch.Tensor, kvs, mask) -> torch.Tensor:
        b, h = x.shape[:2]
        if h > self.position_embedding.num_embeddings:
            raise ValueError(f"groot: horizon {h} exceeds max_seq_len {self.position_embedding.num_embeddings}")
        ids = self.embodiment(b, x.device)
        actions = self.action_encoder(x.to(state_tokens.dtype), t, ids) + self.position_embedding.weight[None, :h]
        future = self.future_tokens.weight[None].expand(b, -1, -1)
        out = self.model(torch.cat([state_tokens, future, actions], 1), t, kvs, mask)
        return self.action_decoder(out, ids)[:, -h:].float()

    def sample(self, extras: dict[str, torch.Tensor], lengths: torch.Tensor, noise: torch.Tensor, num_steps: int,
               *, static: bool = False, guidance: Guidance | None = None) -> torch.Tensor:
        k, v, state = extras["groot_k"], extras["groot_v"], extras["state"]
        read = k.shape[3] if static else int(lengths.max())
        k, v = k[:, :, :, :read], v[:, :, :, :read]
        if guidance is not None and guidance.method == "guided":  # autograd cannot save inference tensors
            k, v, state = k.clone(), v.clone(), state.clone()
        kvs = [(k[:, i], v[:, i]) for i in range(k.shape[1])]
        mask = torch.arange(read, device=lengths.device)[None] < lengths[:, None]
        tokens = self.state_features(state)
        b, buckets = noise.shape[0], self.dims.timestep_buckets

        def velocity(x: torch.Tensor, step: int) -> torch.Tensor:
            t = torch.full((b,), time_bucket(step, num_steps, buckets), device=noise.device, dtype=torch.long)
            return self.velocity(x, t, tokens, kvs, mask)

        if guidance is not None:
            guidance.check_against(noise, "groot")
        return euler_sample(velocity, noise, num_steps, guidance)
