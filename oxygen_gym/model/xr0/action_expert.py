"""The XR0 action expert: tokens [sink, state, actions] through the DiT over the backbone prefix's K/V, and the
rectified flow that integrates them.

Conventions (XR0.py = rosmontis2005/Xiaomi-Robotics-0-orchardbech `xr0/mibot/models/VLA/XR0.py`, the training code;
modeling_mibot.py = the checkpoint's own inference code, vendored copies of it; physical-ai-studio = Intel's port
`library/src/physicalai/policies/xr0/model.py`):

- flow: x_t = (1 - t) * noise + t * actions, velocity = actions - noise; Euler from t = 0 (noise) to 1 in
  `num_steps` steps, t_k = k / num_steps, x += v / num_steps (XR0.py `_flow_interpolate`, `_flow_generate`).
- time: t_embedder(1000 t) = Linear-SiLU-Linear (no biases) on [cos, sin] of 1000 t * 10000^(-i/128), then
  t_projector (one Linear with bias, no activation between) -> [B, 6, W] (`dit_forward`, `TimestepEmbedder`).
- tokens: [sink.weight, state_projector(state), action_projector(x_t * dim_mask)]; the velocity is
  action_output_layer of the last `horizon` outputs. The projectors are Linear-GELU(tanh)-Linear without biases.
- mask: the prefix's valid keys, then among the DiT tokens: sink/state causal among themselves, actions see sink,
  state and actions j with i - window <= j <= i (`torch.triu(..., diagonal=-local_window)` on a tril); window None =
  plain causal (modeling_mibot.py's `torch.tril`).
- positions: the prefix's largest M-RoPE position + 1 + token index, + gap on the action tokens. All three M-RoPE
  axes get the same value (the prompt ends in text, whose positions are equal on the axes and above every image
  position, so the per-axis maxima the references take agree), so M-RoPE reduces to 1D RoPE with the text
  rope_theta here.
- layers: DiT layer i reads backbone layer (L - depth + i), the tail (`DiT.forward` start_idx).

The prefix K/V are read in place: never copied, never written (the row stays intact for language and other heads).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...core.guidance import Guidance
from ...core.kv_view import KVCache
from ..flow_sampler import denoise_scope, euler_sample
from ..layers import linear, rope_cos_sin
from .dit import DiT
from .xr0_config import XR0Config


class MLPProjector(nn.Module):
    """Linear, then (GELU(tanh), Linear) x (num_layers - 1): keys `layers.0`, `layers.2`, ... as published."""

    def __init__(self, d_in: int, d_out: int, num_layers: int = 1, bias: bool = False) -> None:
        super().__init__()
        mods: list[nn.Module] = [nn.Linear(d_in, d_out, bias=bias)]
        for _ in range(num_layers - 1):
            mods += [nn.GELU(approximate="tanh"), nn.Linear(d_out, d_out, bias=bias)]
        self.layers = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.layers:
            x = linear(x, m) if isinstance(m, nn.Linear) else m(x)
        return x


class TimestepEmbedder(nn.Module):
    """DiT/GLIDE sinusoid (cos first, max period 1e4) then Linear-SiLU-Linear: keys `mlp.0`, `mlp.2`."""

    def __init__(self, width: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, width, bias=False), nn.SiLU(), nn.Linear(width, width, bias=False))

    def frequencies(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t.float()[:, None] * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if self.freq_dim % 2:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return emb

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        x = self.frequencies(t)
        return linear(F.silu(linear(x, self.mlp[0])), self.mlp[2])


class XR0ActionExpert(nn.Module):
    """Parameter names = the checkpoint's top-level non-`vlm.` keys (`dit.*`, `t_embedder.*`, ...)."""

    def __init__(self, config: XR0Config) -> None:
        super().__init__()
        c = config
        w = c.dit.width
        self.config = c
        self.dit = DiT(c.dit, c.rms_eps)
        self.t_embedder = TimestepEmbedder(w, c.freq_dim)
        self.t_projector = MLPProjector(w, 6 * w, num_layers=1, bias=True)
        self.state_projector = MLPProjector(c.state_dim, w, num_layers=2)
        self.action_projector = MLPProjector(c.action_dim, w, num_layers=2)
        self.action_output_layer = MLPProjector(w, c.action_dim, num_layers=2)
        self.sink = nn.Embedding(1, w)
        self._mods: dict = {}
        self.requires_grad_(False)

    @property
    def dtype(self) -> torch.dtype:
        return self.sink.weight.dtype

    def clear_caches(self) -> None:
        """Forget the per-step modulations (call after changing weights)."""
        self._mods.clear()

    # ---------------------------------------------------------------- pieces that depend on t or the config only
    def modulations(self, t: torch.Tensor) -> torch.Tensor:
        """AdaLN parameters `[depth, B, 6, W]` for flow times `t [B]`."""
        temb = self.t_projector(self.t_embedder(t * self.config.time_scale).to(self.dtype))
        temb = temb.view(t.shape[0], 6, -1)
        return torch.stack([layer.modulation(temb) for layer in self.dit.layers])

    def _step_modulations(self, num_steps: int, device: torch.device) -> list[torch.Tensor]:
        """Modulations of each Euler step (batch 1, broadcast over rows), computed once per step count."""
        key = (num_steps, str(device), self.dtype, torch.is_inference_mode_enabled())  # guided RTC: no inference tensors
        if key not in self._mods:
            ts = torch.arange(num_steps, device=device, dtype=torch.float32) / num_steps
            self._mods[key] = [self.modulations(ts[i : i + 1]) for i in range(num_steps)]
        return self._mods[key]

    def own_mask(self, horizon: int, device=None) -> torch.Tensor:
        """bool `[Q, Q]` over [sink, state, actions] (True = may attend)."""
        s = 1 + self.config.state_len
        q = s + horizon
        i = torch.arange(q, device=device)[:, None]
        j = torch.arange(q, device=device)[None]
        mask = j <= i  # sink/state causal; nobody sees a later token
        if self.config.window is not None:
            action_pair = (i >= s) & (j >= s)
            mask &= ~action_pair | (j >= i - self.config.window)
        return mask

    def positions(self, next_positions: torch.Tensor, horizon: int) -> torch.Tensor:
        """RoPE positions `[B, Q]`: next_position + index, + gap on the action tokens."""
        s = 1 + self.config.state_len
        idx = torch.arange(s + horizon, device=next_positions.device)
        idx = torch.where(idx >= s, idx + self.config.position_gap, idx)
        return next_positions.long()[:, None] + idx[None]

    # ---------------------------------------------------------------- one velocity evaluation
    def _context_tokens(self, state: torch.Tensor) -> torch.Tensor:
        """[sink, state tokens] `[B, 1 + state_len, W]`: fixed across Euler steps."""
        if state.dim() == 2:
            state = state[:, None]
        sink = self.sink.weight[None].expand(state.shape[0], 1, -1)
        return torch.cat([sink, self.state_projector(state.to(self.dtype)).to(self.dtype)], dim=1)

    def _tokens(self, context: torch.Tensor, x_t: torch.Tensor, dim_mask: torch.Tensor | None) -> torch.Tensor:
        if dim_mask is not None:  # dit_forward: noisy_action * action_mask (inactive padding dims zeroed)
            m = dim_mask.to(x_t.dtype)
            x_t = x_t * (m[:, None] if m.dim() == 2 else m)
        return torch.cat([context, self.action_projector(x_t.to(self.dtype)).to(self.dtype)], dim=1)

    def _run(self, h, mods, cos, sin, layers_kv, cache_mask, own_mask, horizon) -> torch.Tensor:
        for layer, m, (k, v) in zip(self.dit.layers, mods, layers_kv, strict=True):
            h = layer(h, m, cos, sin, k, v, cache_mask, own_mask)
        return self.action_output_layer(h[:, -horizon:]).float()

    def _cos_sin(self, next_positions: torch.Tensor, horizon: int):
        pos = self.positions(next_positions, horizon)
        return rope_cos_sin(pos, self.config.dit.head_dim, self.config.rope_theta)

    @torch.inference_mode()
    def velocity(
        self,
        prefix_k: list[torch.Tensor],
        prefix_v: list[torch.Tensor],
        prefix_valid: torch.Tensor,
        prefix_next_pos: torch.Tensor,
        x_t: torch.Tensor,
        t: torch.Tensor,
        state: torch.Tensor,
        dim_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Velocity `[B, H, A]` (fp32) at `x_t [B, H, A]`, flow time `t [B]`, over plain per-layer K/V.

        `prefix_k/v`: every backbone layer (`[B, K, T, D]`, transformers' past_key_values; the last `depth` are
        read) or exactly the `depth` read ones; `prefix_valid [B, T]`: the attention mask of the prefill.
        """
        n = self.config.read_layers
        if len(prefix_k) < n:
            raise ValueError(f"need the K/V of at least {n} backbone layers, got {len(prefix_k)}")
        layers_kv = list(zip(prefix_k[-n:], prefix_v[-n:]))
        horizon = x_t.shape[1]
        cos, sin = self._cos_sin(prefix_next_pos, horizon)
        mods = self.modulations(t.float())
        h = self._tokens(self._context_tokens(state), x_t, dim_mask)
        own = self.own_mask(horizon, x_t.device)
        return self._run(h, mods, cos, sin, layers_kv, prefix_valid.bool(), own, horizon)

    def _cache_view(self, cache: KVCache, lengths: torch.Tensor, static: bool):
        """Per read layer (k, v) views of rows [0, B) and the key mask; static: full capacity, no host reads."""
        b = lengths.shape[0]
        layers = cache.k.shape[0]
        first = layers - self.config.read_layers
        if first < 0:
            raise ValueError(f"cache has {layers} layers, the DiT reads the last {self.config.read_layers}")
        read = cache.capacity if static else int(lengths.max())
        kv = [(cache.k[first + i, :b, :, :read], cache.v[first + i, :b, :, :read]) for i in range(self.config.read_layers)]
        mask = torch.arange(read, device=lengths.device)[None] < lengths[:, None]
        return kv, mask

    @torch.inference_mode()
    def velocity_from_cache(
        self,
        cache: KVCache,
        lengths: torch.Tensor,
        next_positions: torch.Tensor,
        x_t: torch.Tensor,
        t: torch.Tensor,
        state: torch.Tensor,
        *,
        static: bool = False,
        dim_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`velocity` over the engine's cache rows [0, B), read in place (static: shape-static, for graphs)."""
        kv, cache_mask = self._cache_view(cache, lengths, static)
        horizon = x_t.shape[1]
        cos, sin = self._cos_sin(next_positions, horizon)
        h = self._tokens(self._context_tokens(state), x_t, dim_mask)
        own = self.own_mask(horizon, x_t.device)
        return self._run(h, self.modulations(t.float()), cos, sin, kv, cache_mask, own, horizon)

    def sample(
        self,
        cache: KVCache,
        lengths: torch.Tensor,
        next_positions: torch.Tensor,
        noise: torch.Tensor,
        state: torch.Tensor,
        num_steps: int | None = None,
        *,
        static: bool = False,
        dim_mask: torch.Tensor | None = None,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        """Normalised actions `[B, H, A]` (fp32): Euler from the noise at t = 0 to the data at t = 1
        (model/flow_sampler.py). `guidance`: real-time chunking (core/guidance.py, whose flow-time convention is this
        one's)."""
        if guidance is not None:
            guidance.check_against(noise, "actions")
            if guidance.method == "trained":
                raise ValueError("rtc.method 'trained' needs a head trained with clean action prefixes; XR0's DiT "
                                 "conditions on one flow time per row: use 'guided' or 'cheap'")
        with denoise_scope(guidance):  # guided: a backward pass through the DiT, outside inference mode
            return self._sample(cache, lengths, next_positions, noise, state, num_steps, static, dim_mask, guidance)

    def _sample(self, cache, lengths, next_positions, noise, state, num_steps, static, dim_mask, guidance):
        num_steps = num_steps or self.config.num_steps
        kv, cache_mask = self._cache_view(cache, lengths, static)
        horizon = noise.shape[1]
        cos, sin = self._cos_sin(next_positions, horizon)
        own = self.own_mask(horizon, noise.device)
        context = self._context_tokens(state)
        steps = self._step_modulations(num_steps, noise.device)

        def velocity(x_t: torch.Tensor, step: int) -> torch.Tensor:
            return self._run(self._tokens(context, x_t, dim_mask), steps[step], cos, sin, kv, cache_mask, own, horizon)

        return euler_sample(velocity, noise, num_steps, guidance)
