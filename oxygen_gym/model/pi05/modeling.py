"""pi0.5 with three separable stages over an explicit KV cache: prefill, denoise, decode (the engine's interface,
oxygen_gym/core/model_contract.py).

prefill  images + prompt -> the backbone writes the prefix KV into cache rows (bidirectional prefix)
denoise  the action expert (head "actions") reads a row's prefix KV in place and integrates the flow (Euler, t = 1 -> 0)
extend   new text tokens continue causally after a row's cached sequence (task prompts, decode steps)

Padding (masked cameras, prompt padding) is compacted away before prefill, so a row's cache holds exactly its
valid tokens at indices 0..n-1, which are also their RoPE positions (1D RoPE: position = cache index). Attention
masks then follow from lengths. Each stage has one body; `static=True` / `read_len=` select the shape-static form
that CUDA graphs capture (full-capacity reads under a mask, the action tokens at the row's end).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...core.guidance import Guidance
from ...core.kv_view import KVCache
from ...core.model_contract import ActionHead, EngineModel, KVLayout, PrefixState
from ..flow_sampler import denoise_scope, euler_sample
from ..layers import AdaRMSNorm, linear, rope_cos_sin
from ..lora_bank import adapter_routing
from .config import PI05Config
from .gemma import GemmaStack
from .prefix_inputs import PrefixInputs
from .siglip import SiglipVision

ACTION_HEAD = "actions"  # pi0.5's own action expert; multi-expert configs add more (config.extra_heads)


class ExtraExpert(nn.Module):
    """An action expert beyond the first: the same parts under the same names, so one denoise body serves all."""

    def __init__(self, config: PI05Config) -> None:
        super().__init__()
        c = config
        self.expert = GemmaStack(c.expert, adaptive=True)
        self.action_in_proj = nn.Linear(c.action_dim, c.expert.width)
        self.action_out_proj = nn.Linear(c.expert.width, c.action_dim)
        self.time_mlp_in = nn.Linear(c.expert.width, c.expert.width)
        self.time_mlp_out = nn.Linear(c.expert.width, c.expert.width)


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


class PI05Model(nn.Module, EngineModel):
    language_layers = "vlm.layers"  # the decoder layers per-task adapters may target (model/lora_bank.py)

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
        # Registered after pi0.5's own parameters, so a seed gives a one-head model the same weights as before.
        self.extra_experts = nn.ModuleDict({h.name: ExtraExpert(c) for h in c.extra_heads})
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

    @property
    def image_size(self) -> int:
        """Side of the square images its vision tower takes (what a camera image is resized to)."""
        return self.config.vision.image_size

    @property
    def kv_layout(self) -> KVLayout:
        d = self.config.vlm
        return KVLayout(d.depth, d.num_kv_heads, d.head_dim)

    @property
    def action_heads(self) -> dict[str, ActionHead]:
        c = self.config
        heads = {ACTION_HEAD: ActionHead(ACTION_HEAD, c.action_dim, c.action_horizon, c.num_steps, writes_cache=True)}
        for h in c.extra_heads:
            heads[h.name] = ActionHead(h.name, c.action_dim, h.horizon, h.num_steps, writes_cache=True)
        return heads

    def expert_parts(self, head: str = ACTION_HEAD) -> nn.Module:
        """The module holding `head`'s expert stack, action projections and time MLP (`expert`, `action_in_proj`,
        `action_out_proj`, `time_mlp_in`, `time_mlp_out`)."""
        if head == ACTION_HEAD:
            return self
        if head not in self.extra_experts:
            raise ValueError(f"head: unknown action head {head!r}; this model has {list(self.action_heads)}")
        return self.extra_experts[head]

    def max_prefix_length(self) -> int:
        return len(self.config.image_slots) * self.config.vision.num_patches + self.config.max_token_len

    def prefix_length(self, inputs: PrefixInputs) -> int:
        cameras = sum(bool(m.any()) for m in inputs.image_masks)  # masked cameras are compacted out of the cache
        return cameras * self.config.vision.num_patches + int(inputs.token_masks[0].sum())

    def batch_prefix_inputs(self, inputs) -> PrefixInputs:
        return PrefixInputs.cat(inputs)

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

    def prefill_frame(self, cache: KVCache, inputs: PrefixInputs) -> PrefixState:
        """The engine's prefill: embed, then the backbone. 1D RoPE: a continuation starts at position = length."""
        prefix = self.embed_prefix(inputs.images, inputs.image_masks, inputs.tokens, inputs.token_masks)
        self.prefill(cache, prefix, hidden=False)
        return PrefixState(prefix.lengths, prefix.lengths.clone())

    @torch.inference_mode()
    def prefill(self, cache: KVCache, prefix: Prefix, *, hidden: bool = True) -> torch.Tensor | None:
        """Run the backbone over the prefix, writing KV into cache rows [0, L). Returns final-normed hidden, or with
        `hidden=False` None: then the last layer only writes its K/V (its attention and MLP feed nothing but that
        hidden state; the action expert and language decoding read the cache), 1/depth of the prefill saved."""
        x = prefix.embs
        b, length, _ = x.shape
        pos = torch.arange(length, device=x.device)[None].expand(b, length)
        cos, sin = rope_cos_sin(pos, self.config.vlm.head_dim, self.config.rope_base)
        mask = None
        if bool((prefix.lengths < length).any()):
            key_ok = torch.arange(length, device=x.device)[None] < prefix.lengths[:, None]
            mask = key_ok[:, None, :].expand(b, length, length)
        layers = self.vlm.layers if hidden else self.vlm.layers[:-1]
        for i, layer in enumerate(layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], slice(0, length), length, mask)
        if not hidden:
            last = len(self.vlm.layers) - 1
            self.vlm.layers[last].write_kv_only(x, cos, sin, cache.k[last], cache.v[last], slice(0, length))
            return None
        return self.vlm.norm(x)

    # ---------------------------------------------------------------- actions
    def _modulations(self, num_steps: int, device, head: str = ACTION_HEAD) -> list:
        """adaRMS (scale, shift, gate) per Euler step: they depend on t only, so they are computed once per head."""
        # inference tensors can't be saved for autograd: the guided RTC loop (outside inference mode) gets its own
        key = (head, num_steps, str(device), torch.is_inference_mode_enabled())
        if key not in self._denoise_mods:
            parts = self.expert_parts(head)
            mods = []
            for step in range(num_steps):
                t = torch.tensor([1.0 + step * (-1.0 / num_steps)], dtype=torch.float32, device=device)
                emb = time_embedding(t, self.config.expert.width, self.config.min_period, self.config.max_period)
                cond = F.silu(linear(F.silu(linear(emb, parts.time_mlp_in)), parts.time_mlp_out))
                mods.append(parts.expert.modulations(cond))
            self._denoise_mods[key] = mods
        return self._denoise_mods[key]

    def denoise_head(
        self, head: str, cache: KVCache, state: PrefixState, noise: torch.Tensor, num_steps: int, *, static: bool = False,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        return self.denoise(
            cache, state.lengths, noise, num_steps, positions=state.next_positions, static=static, head=head,
            guidance=guidance,
        )

    def denoise(
        self,
        cache: KVCache,
        prefix_lengths: torch.Tensor,
        noise: torch.Tensor,
        num_steps: int | None = None,
        *,
        positions: torch.Tensor | None = None,
        static: bool = False,
        head: str = ACTION_HEAD,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        """Integrate the action flow from `noise [B, H, action_dim]` at t=1 to t=0 over the rows' prefixes.

        The action tokens' KV goes into each row's scratch region after the longest prefix (`static`: the row's last
        H positions, so nothing depends on the lengths' values) and is left there (a language request overwrites it
        later); the prefix itself is read in place, never copied. `positions`: RoPE position of the first action
        token per row (None: the prefix length). `head`: which action expert (multi-expert configs). `guidance`:
        real-time chunking (core/guidance.py), per row; the flow runs in model/flow_sampler.py.
        """
        if guidance is not None:
            guidance.check_against(noise, head)
        with denoise_scope(guidance):  # guided: a backward pass through the expert, outside inference mode
            return self._denoise_body(cache, prefix_lengths, noise, num_steps, positions, static, head, guidance)

    def _denoise_body(self, cache, prefix_lengths, noise, num_steps, positions, static, head, guidance):
        parts = self.expert_parts(head)
        num_steps = num_steps or self.action_heads[head].num_steps
        b, horizon, _ = noise.shape
        if static:
            p = cache.capacity - horizon  # the admission check keeps every prefix within [0, capacity - horizon)
        else:
            p = int(prefix_lengths.max())
            if p + horizon > cache.capacity:
                raise ValueError(f"cache capacity {cache.capacity} < prefix {p} + action horizon {horizon}")
        start = prefix_lengths if positions is None else positions
        pos = start[:, None] + torch.arange(horizon, device=noise.device)[None]
        cos, sin = rope_cos_sin(pos, self.config.expert.head_dim, self.config.rope_base)
        mask = None
        if static or bool((prefix_lengths < p).any()):
            j = torch.arange(p + horizon, device=noise.device)[None]
            key_ok = (j < prefix_lengths[:, None]) | (j >= p)
            mask = key_ok[:, None, :].expand(b, horizon, p + horizon)
        write = slice(p, p + horizon)

        def velocity(x: torch.Tensor, mods: list, ks: list, vs: list) -> torch.Tensor:
            h = linear(x, parts.action_in_proj).to(self.dtype)
            for i, layer in enumerate(parts.expert.layers):
                h = layer(h, cos, sin, ks[i], vs[i], write, p + horizon, mask, mods[i])
            scale, shift, _ = mods[-1]
            return linear(AdaRMSNorm.modulate(h, scale, shift).float(), parts.action_out_proj)

        # The flow in the data-ward convention of core/guidance.py: tau = 1 - t, u = -v, x += u / num_steps.
        steps = self._modulations(num_steps, noise.device, head)
        method = None if guidance is None else guidance.method
        if method == "trained":  # training-time RTC: the delayed prefix is clean, conditioned at t = 0, every step
            at_data, frozen = self._modulations_at_data(noise.device, head), guidance.frozen.to(noise.device)

            def step_mods(step: int) -> list:
                return _per_token(at_data, steps[step], frozen)
        else:
            step_mods = steps.__getitem__
        if method == "guided":
            ks, vs = self._private_kv(cache, p + horizon)

            def data_ward(x: torch.Tensor, step: int) -> torch.Tensor:
                # detach(): a fresh alias per step, so this step's action-token writes start a new autograd history
                return -velocity(x, step_mods(step), [k.detach() for k in ks], [v.detach() for v in vs])
        else:
            def data_ward(x: torch.Tensor, step: int) -> torch.Tensor:
                return -velocity(x, step_mods(step), cache.k, cache.v)

        return euler_sample(data_ward, noise, num_steps, guidance, frozen_prefix=True)

    def _modulations_at_data(self, device, head: str) -> list:
        """adaRMS at t = 0 (the clean end of the flow): what training-time RTC's frozen prefix is conditioned on."""
        key = (head, "data", str(device), torch.is_inference_mode_enabled())
        if key not in self._denoise_mods:
            parts = self.expert_parts(head)
            t = torch.zeros(1, dtype=torch.float32, device=device)
            emb = time_embedding(t, self.config.expert.width, self.config.min_period, self.config.max_period)
            self._denoise_mods[key] = parts.expert.modulations(F.silu(linear(F.silu(linear(emb, parts.time_mlp_in)), parts.time_mlp_out)))
        return self._denoise_mods[key]

    @staticmethod
    def _private_kv(cache: KVCache, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """A copy of positions [0, length) per layer, one tensor each, for the guided (autograd) denoise: the action
        tokens' K/V are written into it with their history, which must not reach the pool (nor share one version
        counter across layers). The pool's scratch region is not written in this mode."""
        ks = [cache.k[i, :, :, :length].clone() for i in range(cache.k.shape[0])]
        vs = [cache.v[i, :, :, :length].clone() for i in range(cache.v.shape[0])]
        return ks, vs

    @torch.inference_mode()
    def sample_actions(
        self,
        images: list[torch.Tensor],
        image_masks: list[torch.Tensor],
        tokens: torch.Tensor,
        token_masks: torch.Tensor,
        noise: torch.Tensor | None = None,
        num_steps: int | None = None,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        """lerobot's `PI05Pytorch.sample_actions` contract: prefill into a private cache, then denoise."""
        if noise is None:
            noise = torch.randn(tokens.shape[0], self.config.action_horizon, self.config.action_dim, device=self.device)
        prefix = self.embed_prefix(images, image_masks, tokens, token_masks)
        cache = self.new_cache(tokens.shape[0], prefix.max_len + noise.shape[1])
        self.prefill(cache, prefix, hidden=False)
        return self.denoise(cache, prefix.lengths, noise, num_steps, guidance=guidance)

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
        """Append `tokens [B, T]` to each row's sequence at cache indices `start[b] + t`, causally, with RoPE
        positions `positions[b] + t` (None: the cache indices).

        Row b attends to its cache positions `[0, start[b] + t]`. Returns final-normed hidden `[B, T, W]`.
        `read_len`: attend over exactly that many positions under the mask (shape-static, for graph capture).
        `adapters [B]`: each row's LoRA adapter slot (0 = base; None: no adapter anywhere).
        """
        b, t = tokens.shape
        dev = tokens.device
        steps = torch.arange(t, device=dev)[None]
        index = start[:, None] + steps
        pos = index if positions is None else positions[:, None] + steps
        static = read_len is not None
        if not static:
            read_len = int(index.max()) + 1
            if read_len > cache.capacity:
                raise ValueError(f"sequence of {read_len} tokens exceeds cache capacity {cache.capacity}")
        cos, sin = rope_cos_sin(pos, self.config.vlm.head_dim, self.config.rope_base)
        mask = None
        if static or b > 1 or t > 1:
            mask = torch.arange(read_len, device=dev)[None, None, :] <= index[:, :, None]
        rows = torch.arange(b, device=dev)[:, None]
        x = (self.embed_tokens(tokens) * math.sqrt(self.config.vlm.width)).to(self.dtype)
        with adapter_routing(self, adapters):
            for i, layer in enumerate(self.vlm.layers):
                x = layer(x, cos, sin, cache.k[i], cache.v[i], (rows, index), read_len, mask)
        return self.vlm.norm(x)

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
        """One token per row: feed `last_tokens [B]` at `positions [B]` (stored at `cache_index`, None: =
        positions), return next-token logits `[B, vocab]`. `adapters [B]`: each row's adapter slot (see extend)."""
        start = positions if cache_index is None else cache_index
        hidden = self.extend(cache, last_tokens[:, None], start, positions, read_len, adapters=adapters)
        return self.lm_logits(hidden[:, 0])


def _per_token(at_data, at_t, frozen: torch.Tensor):
    """Per-token adaRMS `[B, H, W]`: the frozen tokens' at t = 0, the others' at the step's t (same nesting as
    `GemmaStack.modulations`)."""
    if isinstance(at_t, torch.Tensor):
        return torch.where(frozen[..., None], at_data, at_t)
    return type(at_t)(_per_token(a, b, frozen) for a, b in zip(at_data, at_t, strict=True))

