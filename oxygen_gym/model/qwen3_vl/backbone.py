"""Qwen3-VL over the engine's KV slots: prefill a batch of right-padded prompts with images into cache rows, then
extend / decode text after them (oxygen_gym/core/model_contract.py describes the cache and the static forms).

A token's cache index and its RoPE position differ here: an image of n merged tokens advances the M-RoPE position
by max(t, h, w) of its grid, not by n (mrope.py). `prefill` returns each row's next position; continuations pass
it as `positions` and their cache indices as `start` / `cache_index`, never one for the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3VLConfig

from ...core.kv_view import KVCache
from ...core.model_contract import KVLayout, PrefixState
from ..lora_bank import adapter_routing
from .input_checks import check_images, row_lengths
from .mrope import frequency_axes, mrope_cos_sin, mrope_positions, rope_inv_freq, text_positions
from .qwen_config import Qwen3VLSpec
from .text_decoder import Qwen3VLTextDecoder
from .vision_tower import Qwen3VLVisionTower


@dataclass
class Qwen3VLPrefill:
    """What `prefill` leaves besides the KV in cache rows [0, B).

    `hidden [B, L, W]`: final-normed (row b valid up to `lengths[b]`); `next_positions [B]`: M-RoPE position of the
    first token after the prompt (max position + 1); `hidden_states`: when asked, transformers'
    `output_hidden_states` of `Qwen3VLForConditionalGeneration` (text_decoder.py: `run`), depth + 1 tensors.
    """

    hidden: torch.Tensor
    lengths: torch.Tensor
    next_positions: torch.Tensor
    hidden_states: list[torch.Tensor] | None = None

    def prefix_state(self) -> PrefixState:
        """The engine's view: lengths and the M-RoPE position a continuation starts at (a family adds its extras)."""
        return PrefixState(self.lengths, self.next_positions)


class _Qwen3VLModel(nn.Module):
    """Holds the two towers under transformers' names (`model.visual`, `model.language_model`)."""

    def __init__(self, spec: Qwen3VLSpec) -> None:
        super().__init__()
        self.visual = Qwen3VLVisionTower(spec.vision)
        self.language_model = Qwen3VLTextDecoder(spec.text)


class Qwen3VLBackbone(nn.Module):
    """Vision tower, text decoder and LM head; the state dict is `Qwen3VLForConditionalGeneration`'s (a tied head
    shares the embedding's Parameter, so `lm_head.weight` appears as it does in transformers' state dict)."""

    language_layers = "model.language_model.layers"  # what per-task adapters may target (model/lora_bank.py)

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        self.hf_config = config
        self.spec = Qwen3VLSpec.from_hf(config)
        t = self.spec.text
        self.model = _Qwen3VLModel(self.spec)
        self.lm_head = nn.Linear(t.width, t.vocab_size, bias=False)
        self.tie_weights()
        self._rope: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.requires_grad_(False)  # inference only

    # ---------------------------------------------------------------- construction
    @staticmethod
    def from_config(config: Qwen3VLConfig, device=None, dtype: torch.dtype | None = None) -> "Qwen3VLBackbone":
        """Randomly initialised (tests build tiny configs offline)."""
        return Qwen3VLBackbone(config).to(device=device, dtype=dtype).eval()

    @staticmethod
    def from_pretrained(
        path: str | Path, device="cpu", dtype: torch.dtype | None = None, *, prefix: str = "",
        config: Qwen3VLConfig | None = None,
    ) -> "Qwen3VLBackbone":
        """A transformers Qwen3-VL folder (config.json + safetensors, single or sharded). `prefix`: the backbone's
        keys sit under it (Xiaomi-Robotics-0: "vlm."), other keys are the family's own; `config`: when the folder's
        config.json is the family's, not Qwen3-VL's. `dtype` None keeps the stored dtype."""
        from .qwen_weights import load_backbone

        return load_backbone(Qwen3VLBackbone, Path(path), device, dtype, prefix, config)

    def tie_weights(self) -> None:
        """Share the embedding with the head when the (text) config ties them, as transformers does."""
        if self.spec.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight

    # ---------------------------------------------------------------- what callers allocate
    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def kv_layout(self) -> KVLayout:
        t = self.spec.text
        return KVLayout(t.depth, t.num_kv_heads, t.head_dim)

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return self.kv_layout.empty_cache(rows, capacity, device=self.device, dtype=self.dtype)

    # ---------------------------------------------------------------- helpers
    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for M-RoPE positions `[3, B, T]`; the tables are made once per device (eagerly, before any
        graph capture) so the captured calls only index them."""
        key = str(positions.device)
        if key not in self._rope:
            t = self.spec.text
            self._rope[key] = (
                rope_inv_freq(t.head_dim, t.rope_theta, positions.device),
                frequency_axes(t.mrope_section, True, positions.device),
            )
        return mrope_cos_sin(positions, *self._rope[key])

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 next-token logits from final-normed hidden states."""
        return F.linear(hidden.to(self.dtype), self.lm_head.weight).float()

    def embed_prompt(
        self, input_ids: torch.Tensor, lengths: torch.Tensor, pixel_values: torch.Tensor | None,
        image_grid_thw: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor] | None]:
        """Token embeddings with the image tokens replaced by the tower's merged features, in row-major order over
        the valid image tokens (transformers' masked_scatter order). Returns (embeddings, image mask, DeepStack)."""
        valid = torch.arange(input_ids.shape[1], device=input_ids.device)[None] < lengths[:, None]
        image_mask = (input_ids == self.spec.image_token_id) & valid
        check_images(self.spec, image_mask, pixel_values, image_grid_thw)
        x = self.model.language_model.embed_tokens(input_ids)
        if pixel_values is None:
            return x, image_mask, None
        feats, deepstack = self.model.visual(pixel_values.to(self.device), image_grid_thw)
        x[image_mask] = feats.to(x.dtype)
        return x, image_mask, deepstack

    # ---------------------------------------------------------------- stages
    @torch.inference_mode()
    def prefill(
        self,
        cache: KVCache,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> Qwen3VLPrefill:
        """Run the prompts `input_ids [B, L]` (right-padded: row b valid up to `lengths[b]`, or a right-padded
        `attention_mask`), writing row b's K/V at cache indices [0, lengths[b]) of cache rows [0, B).
        `pixel_values` / `image_grid_thw`: every image of every row, rows in order (the processor's layout)."""
        input_ids = input_ids.to(self.device)
        lengths = row_lengths(input_ids, lengths, attention_mask)
        b, length = input_ids.shape
        if cache.num_rows < b or cache.capacity < length:
            raise ValueError(f"cache of {cache.num_rows} rows x {cache.capacity} positions < prompts {b} x {length}")
        x, image_mask, deepstack = self.embed_prompt(input_ids, lengths, pixel_values, image_grid_thw)
        positions, next_positions = mrope_positions(
            input_ids, lengths, image_grid_thw, self.spec.image_token_id, self.spec.vision.merge_size
        )
        cos, sin = self.rope(positions)
        j = torch.arange(length, device=self.device)
        mask = (j[None, None, :] <= j[None, :, None]) & (j[None, None, :] < lengths[:, None, None])
        record: list[torch.Tensor] | None = [] if output_hidden_states else None
        hidden = self.model.language_model.run(
            x, cos, sin, cache.k[:, :b], cache.v[:, :b], slice(0, length), length, mask, image_mask, deepstack, record
        )
        return Qwen3VLPrefill(hidden, lengths, next_positions, record)

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
        normed: bool = True,
    ) -> torch.Tensor:
        """Append text `tokens [B, T]` causally: token t of row b goes to cache index `start[b] + t` with M-RoPE
        position `positions[b] + t` on all three axes (None: = start, right only for text-only rows). Row b attends
        to its cache indices [0, start[b] + t]. Returns final-normed hidden `[B, T, W]` (`normed=False`: the last
        layer's output before the final norm, `hidden_states[-1]` of transformers 4.57). `read_len`: attend over
        exactly that many cache positions under the mask (shape-static, no host reads: for graph capture).
        `adapters [B]`: each row's LoRA adapter slot (0 = base; None: none anywhere; model/lora_bank.py)."""
        b, t = tokens.shape
        index = start[:, None] + torch.arange(t, device=tokens.device)[None]
        if read_len is None:
            read_len = int(index.max()) + 1
            if read_len > cache.capacity:
                raise ValueError(f"sequence of {read_len} tokens exceeds cache capacity {cache.capacity}")
        cos, sin = self.rope(text_positions(start if positions is None else positions, t))
        mask = torch.arange(read_len, device=tokens.device)[None, None, :] <= index[:, :, None]
        rows = torch.arange(b, device=tokens.device)[:, None]
        x = self.model.language_model.embed_tokens(tokens)
        with adapter_routing(self, adapters):
            return self.model.language_model.run(x, cos, sin, cache.k, cache.v, (rows, index), read_len, mask,
                                                 final_norm=normed)

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
        """Feed one token per row (`last_tokens [B]` at M-RoPE `positions [B]`, stored at `cache_index [B]`; None:
        = positions, which holds only for text-only rows) and return next-token logits `[B, vocab]` in fp32."""
        start = positions if cache_index is None else cache_index
        hidden = self.extend(cache, last_tokens[:, None], start, positions, read_len, adapters=adapters)
        return self.lm_logits(hidden[:, 0])

    @torch.inference_mode()
    def generate(
        self,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
        max_new_tokens: int = 16,
    ) -> list[int]:
        """Greedy new tokens of one prompt (`input_ids [1, L]` or `[L]`), stopping after an eos id of the config:
        `Qwen3VLForConditionalGeneration.generate(do_sample=False)`'s continuation, over our cache."""
        ids = input_ids.reshape(1, -1)
        length = ids.shape[1]
        cache = self.new_cache(1, length + max_new_tokens)
        pre = self.prefill(cache, ids, pixel_values, image_grid_thw)
        logits = self.lm_logits(pre.hidden[:, -1])
        out: list[int] = []
        for step in range(max_new_tokens):
            token = logits.argmax(-1)
            out.append(int(token))
            if out[-1] in self.spec.eos_token_ids or step == max_new_tokens - 1:
                break
            index = torch.tensor([length + step], device=self.device)
            logits = self.decode_step(cache, token, pre.next_positions + step, index)
        return out
