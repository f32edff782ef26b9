"""pi0.5 with three separable stages over an explicit KV cache: prefill, denoise, decode.

prefill  images + prompt -> the backbone writes the prefix KV into cache rows (bidirectional prefix)
denoise  the action expert reads a row's prefix KV in place and integrates the flow (Euler, t = 1 -> 0)
extend   new text tokens continue causally after a row's cached sequence (task prompts, decode steps)

Padding (masked cameras, prompt padding) is compacted away before prefill, so a row's cache holds exactly its
valid tokens at indices 0..n-1, which are also their RoPE positions. Attention masks then follow from lengths.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import PI05Config
from .gemma import GemmaStack
from .kv import KVCache
from .layers import AdaRMSNorm, linear, rope_cos_sin
from .siglip import SiglipVision


@dataclass
class Prefix:
    """Compacted prefix embeddings: row b's valid tokens are `embs[b, :lengths[b]]`."""

    embs: torch.Tensor  # [B, L, W]
    lengths: torch.Tensor  # [B] int64
    valid: torch.Tensor  # [B, L_padded] bool: which padded positions survived (for mapping back)

    @property
    def max_len(self) -> int:
        return self.embs.shape[1]


def time_embedding(t: torch.Tensor, width: int, min_period: float, max_period: float) -> torch.Tensor:
    """Sine-cosine embedding of flow time `t [B]` (float64 inside, as the references compute it)."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    x = (2 * math.pi / period)[None, :] * t[:, None].double()
    return torch.cat([torch.sin(x), torch.cos(x)], dim=1).to(t.dtype)


class PI05Model(nn.Module):
    def __init__(self, config: PI05Config) -> None:
        super().__init__()
        self.config = config
        c = config
        self.vision = SiglipVision(c.vision, out_width=c.vlm.width)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.vlm.width)  # tied with the LM head
        self.vlm = GemmaStack(c.vlm, adaptive=False)
        self.expert = GemmaStack(c.expert, adaptive=True)
        self.action_in_proj = nn.Linear(c.action_dim, c.expert.width)
        self.action_out_proj = nn.Linear(c.expert.width, c.action_dim)
        self.time_mlp_in = nn.Linear(c.expert.width, c.expert.width)
        self.time_mlp_out = nn.Linear(c.expert.width, c.expert.width)
        self._denoise_mods: dict = {}
        self.norm_stats = None  # dataset statistics of a loaded checkpoint (loading.py), None for built-in models
        self.requires_grad_(False)  # an inference engine: no autograd anywhere

    # ---------------------------------------------------------------- helpers
    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        d = self.config.vlm
        return KVCache.empty(d.depth, rows, d.num_kv_heads, capacity, d.head_dim, device=self.device, dtype=self.dtype)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Tied LM head on final-normed hidden states, fp32 logits."""
        return F.linear(hidden.to(self.dtype), self.embed_tokens.weight).float()

    def clear_caches(self) -> None:
        """Forget derived constants (call after changing weights)."""
        self._denoise_mods.clear()

    # ---------------------------------------------------------------- prefix
    def embed_prefix_differentiable(
        self,
        images: list[torch.Tensor],
        image_masks: list[torch.Tensor],
        tokens: torch.Tensor,
        token_masks: torch.Tensor,
    ) -> Prefix:
        """SigLIP image tokens then scaled text embeddings, with invalid tokens compacted out. Outside inference mode,
        so the training forward (training.py) embeds images and prompts with the very code inference uses."""
        b = tokens.shape[0]
        n_img = self.config.vision.num_patches
        embs, valid = [], []
        for img, m in zip(images, image_masks, strict=True):
            m = m.to(torch.bool)
            if bool(m.any()):
                embs.append(self.vision(img).to(self.dtype))
            else:  # every row masks this camera: its tokens are never attended, skip the tower
                embs.append(torch.zeros(b, n_img, self.config.vlm.width, device=self.device, dtype=self.dtype))
            valid.append(m[:, None].expand(b, n_img))
        text = self.embed_tokens(tokens) * math.sqrt(self.config.vlm.width)
        embs.append(text.to(self.dtype))
        valid.append(token_masks.to(torch.bool))
        embs_t, valid_t = torch.cat(embs, 1), torch.cat(valid, 1)
        lengths = valid_t.sum(1)
        if bool(valid_t.all()):
            return Prefix(embs_t, lengths, valid_t)
        order = torch.argsort((~valid_t).to(torch.int8), dim=1, stable=True)  # valid first, order kept
        max_len = int(lengths.max())
        idx = order[:, :max_len]
        compact = embs_t.gather(1, idx[..., None].expand(-1, -1, embs_t.shape[-1]))
        return Prefix(compact, lengths, valid_t)

    embed_prefix = torch.inference_mode()(embed_prefix_differentiable)  # what inference calls

    @torch.inference_mode()
    def prefill(self, cache: KVCache, prefix: Prefix) -> torch.Tensor:
        """Run the backbone over the prefix, writing KV into cache rows [0, L). Returns final-normed hidden."""
        x = prefix.embs
        b, length, _ = x.shape
        pos = torch.arange(length, device=x.device)[None].expand(b, length)
        cos, sin = rope_cos_sin(pos, self.config.vlm.head_dim, self.config.rope_base)
        mask = None
        if bool((prefix.lengths < length).any()):
            key_ok = torch.arange(length, device=x.device)[None] < prefix.lengths[:, None]
            mask = key_ok[:, None, :].expand(b, length, length)
        for i, layer in enumerate(self.vlm.layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], slice(0, length), length, mask)
        return self.vlm.norm(x)

    # ---------------------------------------------------------------- actions
    def _modulations(self, num_steps: int, device) -> list:
        """adaRMS (scale, shift, gate) per Euler step: they depend on t only, so they are computed once."""
        key = (num_steps, str(device))
        if key not in self._denoise_mods:
            mods = []
            for step in range(num_steps):
                t = torch.tensor([1.0 + step * (-1.0 / num_steps)], dtype=torch.float32, device=device)
                emb = time_embedding(t, self.config.expert.width, self.config.min_period, self.config.max_period)
                cond = F.silu(linear(F.silu(linear(emb, self.time_mlp_in)), self.time_mlp_out))
                mods.append(self.expert.modulations(cond))
            self._denoise_mods[key] = mods
        return self._denoise_mods[key]

    @torch.inference_mode()
    def denoise(
        self, cache: KVCache, prefix_lengths: torch.Tensor, noise: torch.Tensor, num_steps: int | None = None
    ) -> torch.Tensor:
        """Integrate the action flow from `noise [B, H, action_dim]` at t=1 to t=0 over the rows' prefixes.

        The action tokens' KV goes into each row's scratch region after the longest prefix and is left there
        (a language request overwrites it later); the prefix itself is read in place, never copied.
        """
        num_steps = num_steps or self.config.num_steps
        b, horizon, _ = noise.shape
        p = int(prefix_lengths.max())
        if p + horizon > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} < prefix {p} + action horizon {horizon}")
        pos = prefix_lengths[:, None] + torch.arange(horizon, device=noise.device)[None]
        cos, sin = rope_cos_sin(pos, self.config.expert.head_dim, self.config.rope_base)
        mask = None
        if bool((prefix_lengths < p).any()):
            j = torch.arange(p + horizon, device=noise.device)[None]
            key_ok = (j < prefix_lengths[:, None]) | (j >= p)
            mask = key_ok[:, None, :].expand(b, horizon, p + horizon)
        dt = -1.0 / num_steps
        x_t = noise.float()
        for mods in self._modulations(num_steps, noise.device):
            h = linear(x_t, self.action_in_proj).to(self.dtype)
            for i, layer in enumerate(self.expert.layers):
                h = layer(h, cos, sin, cache.k[i], cache.v[i], slice(p, p + horizon), p + horizon, mask, mods[i])
            scale, shift, _ = mods[-1]
            v_t = linear(AdaRMSNorm.apply(h, scale, shift).float(), self.action_out_proj)
            x_t = x_t + dt * v_t
        return x_t

    @torch.inference_mode()
    def sample_actions(
        self,
        images: list[torch.Tensor],
        image_masks: list[torch.Tensor],
        tokens: torch.Tensor,
        token_masks: torch.Tensor,
        noise: torch.Tensor | None = None,
        num_steps: int | None = None,
    ) -> torch.Tensor:
        """lerobot's `PI05Pytorch.sample_actions` contract: prefill into a private cache, then denoise."""
        if noise is None:
            noise = torch.randn(tokens.shape[0], self.config.action_horizon, self.config.action_dim, device=self.device)
        prefix = self.embed_prefix(images, image_masks, tokens, token_masks)
        cache = self.new_cache(tokens.shape[0], prefix.max_len + noise.shape[1])
        self.prefill(cache, prefix)
        return self.denoise(cache, prefix.lengths, noise, num_steps)

    # ---------------------------------------------------------------- language
    @torch.inference_mode()
    def extend(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """Append `tokens [B, T]` to each row's sequence at positions `start[b] + t`, causally.

        Row b attends to its cache positions `[0, start[b] + t]`. Returns final-normed hidden `[B, T, W]`.
        """
        b, t = tokens.shape
        dev = tokens.device
        pos = start[:, None] + torch.arange(t, device=dev)[None]
        read_len = int(pos.max()) + 1
        if read_len > cache.capacity:
            raise ValueError(f"sequence of {read_len} tokens exceeds cache capacity {cache.capacity}")
        cos, sin = rope_cos_sin(pos, self.config.vlm.head_dim, self.config.rope_base)
        mask = None
        if b > 1 or t > 1:
            mask = torch.arange(read_len, device=dev)[None, None, :] <= pos[:, :, None]
        rows = torch.arange(b, device=dev)[:, None]
        x = (self.embed_tokens(tokens) * math.sqrt(self.config.vlm.width)).to(self.dtype)
        for i, layer in enumerate(self.vlm.layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], (rows, pos), read_len, mask)
        return self.vlm.norm(x)

    @torch.inference_mode()
    def decode_step(self, cache: KVCache, last_tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per row: feed `last_tokens [B]` at `positions [B]`, return next-token logits `[B, vocab]`."""
        return self.lm_logits(self.extend(cache, last_tokens[:, None], positions)[:, 0])
