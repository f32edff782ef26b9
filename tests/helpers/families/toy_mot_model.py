"""A toy Mixture-of-Transformers behind the engine's interface (oxygen_gym/core/model_contract.py): the modeling half
of the fifth family, written only as a test fixture (its IO and registration: toy_family.py).

Two transformers of the same depth share attention layer by layer, each with its own weights (the MoT of pi0):
- the backbone reads a prefix of image patches (a one-convolution encoder per camera, plus a slot embedding), one
  state token and the prompt's bytes, attending bidirectionally within the prefix; it writes the slot KV and decodes
  text causally after the prefix with a tied LM head (`extend`, `decode_step`);
- one action expert reads each backbone layer's prefix KV in place, joined with its own action tokens' K/V (never
  written to the row), and integrates a rectified flow with the shared sampler (model/flow_sampler.py).

Positions are 1D RoPE: a token's position is its cache index. Random weights only, about 12 thousand; it imports
the package's shared layers and the seam, never another family or the engine.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from oxygen_gym.core.guidance import Guidance
from oxygen_gym.core.kv_view import KVCache
from oxygen_gym.core.model_contract import ActionHead, EngineModel, KVLayout, PrefixState
from oxygen_gym.model.flow_sampler import denoise_scope, euler_sample
from oxygen_gym.model.layers import GatedMLP, RMSNorm, apply_rope, grouped_attention, linear, rope_cos_sin, write_kv

ACTION_HEAD = "actions"  # the one action expert


@dataclass(frozen=True)
class ToyMoTConfig:
    vocab_size: int = 258  # 256 bytes, BOS, EOS (toy_family.ByteTokenizer)
    width: int = 16
    depth: int = 2
    num_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 8
    mlp_dim: int = 16
    image_slots: tuple[str, ...] = ("view_0", "view_1", "view_2")
    image_size: int = 8  # camera images are resized to image_size x image_size
    patch_size: int = 4  # so each camera is (8 / 4)^2 = 4 prefix tokens
    state_dim: int = 16  # the robot state, zero-padded, is one prefix token
    max_prompt_tokens: int = 48  # BOS + prompt bytes
    action_dim: int = 14
    horizon: int = 10
    num_steps: int = 4
    rope_base: float = 10000.0

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass
class ToyPrefix:
    """One bundle of prefix inputs, batch-first: row b's prefix is its images' patches, its state token, then
    `tokens[b, :lengths[b] - images - 1]` (prompts are padded at the end, so a row's valid tokens come first)."""

    images: torch.Tensor  # [B, n, 3, S, S] float in [-1, 1]
    slots: torch.Tensor  # [B, n] long: each image's slot index
    state: torch.Tensor  # [B, state_dim]
    tokens: torch.Tensor  # [B, T] long, padded with 0
    lengths: torch.Tensor  # [B] long: cache positions the prefill writes

    @staticmethod
    def cat(parts: Sequence["ToyPrefix"]) -> "ToyPrefix":
        if len({tuple(p.slots.shape[1:]) for p in parts}) != 1:
            raise ValueError("prefix inputs: rows of one batch must carry the same number of camera images")
        t = max(p.tokens.shape[1] for p in parts)
        return ToyPrefix(
            torch.cat([p.images for p in parts]), torch.cat([p.slots for p in parts]),
            torch.cat([p.state for p in parts]),
            torch.cat([F.pad(p.tokens, (0, t - p.tokens.shape[1])) for p in parts]),
            torch.cat([p.lengths for p in parts]),
        )


class ToyLayer(nn.Module):
    """A pre-norm transformer layer (grouped-query attention, gated MLP). Backbone and expert each have their own."""

    def __init__(self, c: ToyMoTConfig) -> None:
        super().__init__()
        self.c = c
        self.input_norm = RMSNorm(c.width)
        self.q_proj = nn.Linear(c.width, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.width, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.width, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.width, bias=False)
        self.post_norm = RMSNorm(c.width)
        self.mlp = GatedMLP(c.width, c.mlp_dim)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q `[B, H, T, D]`, k/v `[B, K, T, D]` of `x [B, T, W]`, RoPE on q and k."""
        b, t, _ = x.shape
        h = self.input_norm(x)
        split = lambda y: y.view(b, t, -1, self.c.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(linear(h, self.q_proj)), split(linear(h, self.k_proj)), split(linear(h, self.v_proj))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        x = x + linear(attended, self.o_proj)
        return x + self.mlp(self.post_norm(x))

    def cached(self, x, cos, sin, k_cache, v_cache, write_at, read_len: int, mask) -> torch.Tensor:
        """Backbone tokens: write their K/V at `write_at`, attend to cache positions [0, read_len) under `mask`."""
        q, k, v = self.qkv(x, cos, sin)
        write_kv(k_cache, v_cache, write_at, k, v)
        return self.finish(x, grouped_attention(q, k_cache[:, :, :read_len], v_cache[:, :, :read_len], mask))

    def joint(self, x, cos, sin, prefix_k, prefix_v, mask) -> torch.Tensor:
        """Expert tokens: attend to the backbone's prefix K/V (read in place) and to each other; nothing written."""
        q, k, v = self.qkv(x, cos, sin)
        keys, values = torch.cat([prefix_k, k.to(prefix_k.dtype)], 2), torch.cat([prefix_v, v.to(prefix_v.dtype)], 2)
        return self.finish(x, grouped_attention(q, keys, values, mask))


class ToyMoTModel(nn.Module, EngineModel):
    def __init__(self, config: ToyMoTConfig) -> None:
        super().__init__()
        c = self.config = config
        # the backbone: image encoder, state and token embeddings, layers, norm (tied LM head)
        self.patch_embed = nn.Conv2d(3, c.width, kernel_size=c.patch_size, stride=c.patch_size)
        self.slot_embed = nn.Embedding(len(c.image_slots), c.width)
        self.state_proj = nn.Linear(c.state_dim, c.width)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.width)
        self.layers = nn.ModuleList(ToyLayer(c) for _ in range(c.depth))
        self.norm = RMSNorm(c.width)
        # the action expert: same depth, its own weights, flow time added to every action token
        self.action_in = nn.Linear(c.action_dim, c.width)
        self.time_mlp = nn.Sequential(nn.Linear(c.width, c.width), nn.SiLU(), nn.Linear(c.width, c.width))
        self.expert_layers = nn.ModuleList(ToyLayer(c) for _ in range(c.depth))
        self.expert_norm = RMSNorm(c.width)
        self.action_out = nn.Linear(c.width, c.action_dim)
        self.requires_grad_(False)

    # ---------------------------------------------------------------- what the engine allocates and checks
    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def kv_layout(self) -> KVLayout:
        return KVLayout(self.config.depth, self.config.num_kv_heads, self.config.head_dim)

    @property
    def action_heads(self) -> dict[str, ActionHead]:
        c = self.config
        return {ACTION_HEAD: ActionHead(ACTION_HEAD, c.action_dim, c.horizon, c.num_steps, writes_cache=False)}

    def max_prefix_length(self) -> int:
        c = self.config
        return len(c.image_slots) * c.patches + 1 + c.max_prompt_tokens

    def prefix_length(self, inputs: ToyPrefix) -> int:
        return int(inputs.lengths[0])

    def batch_prefix_inputs(self, inputs: Sequence[ToyPrefix]) -> ToyPrefix:
        return ToyPrefix.cat(inputs)

    # ---------------------------------------------------------------- prefill
    def _rope(self, positions: torch.Tensor):
        return rope_cos_sin(positions, self.config.head_dim, self.config.rope_base)

    @torch.inference_mode()
    def prefill_frame(self, cache: KVCache, inputs: ToyPrefix) -> PrefixState:
        """Images, state and prompt through the backbone (bidirectional over each row's valid prefix), K/V written at
        cache indices [0, L) of rows [0, B); a continuation starts at position = length."""
        b, n = inputs.slots.shape
        patches = self.patch_embed(inputs.images.flatten(0, 1).to(self.dtype)).flatten(2).transpose(1, 2)
        patches = patches.reshape(b, n * self.config.patches, -1) + self.slot_embed(inputs.slots).repeat_interleave(
            self.config.patches, dim=1)
        x = torch.cat([patches, linear(inputs.state, self.state_proj)[:, None], self.embed_tokens(inputs.tokens)], 1)
        length = x.shape[1]
        if length > cache.capacity:
            raise ValueError(f"prefix of {length} tokens exceeds cache capacity {cache.capacity}")
        pos = torch.arange(length, device=x.device)[None].expand(b, length)
        cos, sin = self._rope(pos)
        keys_ok = torch.arange(length, device=x.device)[None] < inputs.lengths[:, None]
        mask = keys_ok[:, None, :].expand(b, length, length)
        for i, layer in enumerate(self.layers):
            x = layer.cached(x, cos, sin, cache.k[i], cache.v[i], slice(0, length), length, mask)
        return PrefixState(inputs.lengths, inputs.lengths.clone())

    # ---------------------------------------------------------------- the action expert
    def time_embedding(self, tau: float) -> torch.Tensor:
        """`[1, 1, W]`: the MLP of a sine-cosine embedding of flow time tau (0 noise -> 1 data)."""
        half = self.config.width // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=self.device, dtype=torch.float32) / half)
        angle = 1000.0 * tau * freqs
        emb = torch.cat([angle.cos(), angle.sin()])[None, None].to(self.dtype)
        return self.time_mlp(emb)

    def denoise_head(
        self, head: str, cache: KVCache, state: PrefixState, noise: torch.Tensor, num_steps: int, *, static: bool = False,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        if head != ACTION_HEAD:
            raise ValueError(f"head: the toy MoT has one action head {ACTION_HEAD!r}, got {head!r}")
        if guidance is not None:
            guidance.check_against(noise, head)
        with denoise_scope(guidance):  # guided RTC differentiates the expert, outside inference mode
            return self._denoise(cache, state, noise, num_steps, static, guidance)

    def _denoise(self, cache, state, noise, num_steps, static, guidance) -> torch.Tensor:
        b, horizon, _ = noise.shape
        read = cache.capacity if static else int(state.lengths.max())  # static: no host read, the mask does the rest
        prefix_ok = torch.arange(read, device=noise.device)[None] < state.lengths[:, None]
        own = torch.ones(b, horizon, horizon, dtype=torch.bool, device=noise.device)
        mask = torch.cat([prefix_ok[:, None, :].expand(b, horizon, read), own], 2)
        pos = state.next_positions[:, None] + torch.arange(horizon, device=noise.device)[None]
        cos, sin = self._rope(pos)
        kv = [(cache.k[i, :, :, :read], cache.v[i, :, :, :read]) for i in range(self.config.depth)]
        times = [self.time_embedding(step / num_steps) for step in range(num_steps)]

        def velocity(x: torch.Tensor, step: int) -> torch.Tensor:
            h = linear(x, self.action_in).to(self.dtype) + times[step]
            for layer, (k, v) in zip(self.expert_layers, kv, strict=True):
                h = layer.joint(h, cos, sin, k, v, mask)
            return linear(self.expert_norm(h), self.action_out).float()

        return euler_sample(velocity, noise, num_steps, guidance)

    # ---------------------------------------------------------------- language
    @torch.inference_mode()
    def extend(
        self,
        cache: KVCache,
        tokens: torch.Tensor,
        start: torch.Tensor,
        positions: torch.Tensor | None = None,
        read_len: int | None = None,
        *,
        adapters: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tokens `[B, T]` causally after each row's sequence, K/V stored at `start[b] + t`; final-normed hidden."""
        if adapters is not None:
            raise ValueError("adapters: the toy MoT family has no per-task LoRA adapters")
        b, t = tokens.shape
        steps = torch.arange(t, device=tokens.device)[None]
        index = start[:, None] + steps
        pos = index if positions is None else positions[:, None] + steps
        if read_len is None:
            read_len = int(index.max()) + 1
            if read_len > cache.capacity:
                raise ValueError(f"sequence of {read_len} tokens exceeds cache capacity {cache.capacity}")
        cos, sin = self._rope(pos)
        mask = torch.arange(read_len, device=tokens.device)[None, None, :] <= index[:, :, None]
        rows = torch.arange(b, device=tokens.device)[:, None]
        x = self.embed_tokens(tokens)
        for i, layer in enumerate(self.layers):
            x = layer.cached(x, cos, sin, cache.k[i], cache.v[i], (rows, index), read_len, mask)
        return self.norm(x)

    @torch.inference_mode()
    def decode_step(
        self,
        cache: KVCache,
        last_tokens: torch.Tensor,
        positions: torch.Tensor,
        cache_index: torch.Tensor | None = None,
        read_len: int | None = None,
        *,
        adapters: torch.Tensor | None = None,
    ) -> torch.Tensor:
        start = positions if cache_index is None else cache_index
        hidden = self.extend(cache, last_tokens[:, None], start, positions, read_len, adapters=adapters)
        return F.linear(hidden[:, 0], self.embed_tokens.weight).float()  # tied LM head


TOKEN_EMBED_STD = 0.2
RESIDUAL_OUT_GAIN = 3.0


def build_toy_mot(config: ToyMoTConfig | None = None, *, seed: int = 0, device="cpu",
                  dtype: torch.dtype | None = None) -> ToyMoTModel:
    """Random weights from `seed` (a private RNG: the caller's is untouched): every matrix N(0, 1 / fan_in), the
    residual branches' outputs at gain 3, token embeddings N(0, 0.2^2), slot embeddings N(0, 1), norms the identity.
    Measured: with unit token embeddings the tied LM head's logits follow the input token and greedy text repeats one
    byte whatever the observation; at 0.2 it varies with the observation."""
    config = config or ToyMoTConfig()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = ToyMoTModel(config)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    for name, p in model.named_parameters():
        if isinstance(model.get_submodule(name.rsplit(".", 1)[0]), RMSNorm):
            continue  # RMSNorm scales by (1 + weight): zeros are the identity
        if name.endswith("embed_tokens.weight"):
            p.data.normal_(0.0, TOKEN_EMBED_STD, generator=gen)
        elif name.endswith("slot_embed.weight"):
            p.data.normal_(0.0, 1.0, generator=gen)
        elif name.endswith(".bias"):
            p.data.zero_()
        else:
            fan_in = p[0].numel()
            gain = RESIDUAL_OUT_GAIN if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
            p.data.normal_(0.0, gain / math.sqrt(fan_in), generator=gen)
    return model.to(device=device, dtype=dtype or torch.float32).eval()
