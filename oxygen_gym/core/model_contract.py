"""The one interface between the engine and a model family: the engine calls these methods and nothing else.
It lives in `oxygen_gym/core/`, below both: the engine imports it, every family implements it, neither imports the
other (oxygen_gym/engine/model_api.py re-exports it).

A family is a folder under `oxygen_gym/model/` whose model class derives from `EngineModel`. What the engine needs
to know of a model, and nothing more:

- the KV layout of its backbone, which the slot pool allocates (`kv_layout`);
- its prefix inputs, a bundle the model defines for one frame's observation: the engine never looks inside, it only
  asks how many cache positions the prefill will write (`prefix_length`) and how to batch rows of several frames
  (`batch_prefix_inputs`);
- `prefill_frame`: the backbone over the prefix, writing each row's KV at cache indices [0, length) and returning a
  `PrefixState` (lengths, the RoPE position a continuation starts at, and whatever the heads read besides the KV);
- named action heads (`action_heads`), each denoised from a frame's prefix with its own noise, horizon and steps
  (`denoise_head`), optionally guided by real-time chunking (rtc.py);
- language: `extend` (a task prompt after the prefix) and `decode_step` (one token per row). A token's cache index
  (where its K/V is stored) and its position (what RoPE sees) are passed apart: they coincide for pi0.5, not for
  M-RoPE backbones, whose image tokens advance the position by less than their count.

Static shapes, so the runner can capture the model's own calls as CUDA graphs (engine/runner.py):
`denoise_head(static=True)` and `decode_step(read_len=capacity)` must run without reading tensor values on the host
(no `.item()`, no data-dependent shapes), under masks built from lengths and cache indices. Their results equal the
eager calls'.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .kv_view import KVCache
from .guidance import Guidance


@dataclass(frozen=True)
class KVLayout:
    """Per-layer keys/values of the backbone: what one cache row holds at each position."""

    layers: int
    kv_heads: int
    head_dim: int

    def row_bytes(self, capacity: int, dtype: torch.dtype) -> int:
        """Bytes of one cache row (K and V) of `capacity` positions."""
        return 2 * self.layers * self.kv_heads * capacity * self.head_dim * torch.tensor([], dtype=dtype).element_size()

    def empty_cache(self, rows: int, capacity: int, *, device=None, dtype=torch.float32) -> KVCache:
        """A zeroed cache of `rows` x `capacity` positions in this layout."""
        return KVCache.empty(self.layers, rows, self.kv_heads, capacity, self.head_dim, device=device, dtype=dtype)


@dataclass(frozen=True)
class ActionHead:
    """One action expert. `horizon` and `num_steps` are its defaults (a frame's noise sets the horizon it denoises);
    `writes_cache`: its own tokens' K/V goes into the row after the prefix (pi0.5's joint attention), so a row must
    have `horizon` free positions past the prefix."""

    name: str
    action_dim: int
    horizon: int
    num_steps: int
    writes_cache: bool = False

    def cache_positions(self, horizon: int) -> int:
        return horizon if self.writes_cache else 0


@dataclass
class PrefixState:
    """What a prefill leaves besides the KV, for rows [0, B) of the cache it wrote.

    `lengths [B]`: cache positions written (the row's valid prefix); `next_positions [B]`: the RoPE position of the
    first token after the prefix; `extras`: model-defined batch-first tensors its heads read (hidden-state taps).
    """

    lengths: torch.Tensor
    next_positions: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    _host: tuple[list[int], list[int]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def host_lengths(self) -> list[int]:
        """`lengths` as ints, read from the device once (the scheduler's bookkeeping needs them on the host)."""
        return self._read_host()[0]

    @property
    def host_positions(self) -> list[int]:
        return self._read_host()[1]

    def _read_host(self) -> tuple[list[int], list[int]]:
        if self._host is None:
            self._host = (self.lengths.tolist(), self.next_positions.tolist())
        return self._host

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor, in a fixed order (the runner copies them into a graph's static buffers)."""
        return [self.lengths, self.next_positions, *(self.extras[k] for k in sorted(self.extras))]

    def with_tensors(self, tensors: Sequence[torch.Tensor]) -> "PrefixState":
        """The same structure over `tensors` (the order of `tensors()`)."""
        keys = sorted(self.extras)
        return PrefixState(tensors[0], tensors[1], dict(zip(keys, tensors[2:], strict=True)))

    @staticmethod
    def cat(states: Sequence["PrefixState"]) -> "PrefixState":
        if len(states) == 1:
            return states[0]
        keys = sorted(states[0].extras)
        return PrefixState(
            torch.cat([s.lengths for s in states]),
            torch.cat([s.next_positions for s in states]),
            {k: torch.cat([s.extras[k] for s in states]) for k in keys},
        )


class EngineModel(ABC):
    """What a model family implements for the engine (see the module docstring). Subclass it beside `nn.Module`."""

    # ---------------------------------------------------------------- what the engine allocates and checks
    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @property
    @abstractmethod
    def dtype(self) -> torch.dtype: ...

    @property
    @abstractmethod
    def kv_layout(self) -> KVLayout: ...

    @property
    @abstractmethod
    def action_heads(self) -> dict[str, ActionHead]:
        """Named action heads in a fixed order; the first is the one a one-array `act()` returns."""

    @abstractmethod
    def max_prefix_length(self) -> int:
        """The most cache positions a prefill can write (every image slot present, the longest prompt)."""

    @abstractmethod
    def prefix_length(self, inputs: Any) -> int:
        """Cache positions the prefill of `inputs` (one frame, batch 1) will write, known before running it."""

    @abstractmethod
    def batch_prefix_inputs(self, inputs: Sequence[Any]) -> Any:
        """One bundle whose row i is `inputs[i]` (frames of several robots prefilled together)."""

    # ---------------------------------------------------------------- stages
    @abstractmethod
    def prefill_frame(self, cache: KVCache, inputs: Any) -> PrefixState:
        """Run the backbone over the prefix of each row of `inputs`, writing its KV into `cache` rows [0, B)."""

    @abstractmethod
    def denoise_head(
        self, head: str, cache: KVCache, state: PrefixState, noise: torch.Tensor, num_steps: int, *, static: bool = False,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        """Actions `[B, horizon, action_dim]` (model space) of `head` from `noise [B, horizon, action_dim]` over the
        prefixes in `cache` rows [0, B). `static`: shape-static form (no host reads), for graph capture.
        `guidance`: real-time chunking per row (rtc.py): the family maps its flow time onto rtc.py's convention and
        integrates with `model/flow_sampler.py` (`guided_velocity` at each step), with the prefix KV held constant
        (the `guided` method differentiates the head alone, outside inference mode: `flow_sampler.guided_scope`)."""

    @abstractmethod
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
        """Append `tokens [B, T]` causally after each row's sequence: token t of row b is stored at cache index
        `start[b] + t` with position `positions[b] + t` (None: = start). Returns final-normed hidden `[B, T, W]`.
        `read_len`: attend over a fixed number of cache positions under a mask (static shapes). `adapters [B]`:
        each row's LoRA adapter slot (0: base weights; None: no adapter in the batch; model/lora_bank.py)."""

    @abstractmethod
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
        """Feed one token per row (`last_tokens [B]` at `positions [B]`, stored at `cache_index [B]`, None: =
        positions) and return next-token logits `[B, vocab]` in fp32. `adapters [B]`: as in `extend`, the rows of
        one batch may each name another adapter."""

    @property
    def adapter_version(self) -> int:
        """Changes whenever the adapters' stacked weights move in memory (a graph captured over them is stale)."""
        bank = getattr(self, "lora", None)
        return bank.version if bank is not None else 0

    # ---------------------------------------------------------------- shared
    def new_cache(self, rows: int, capacity: int) -> KVCache:
        """A private cache in this model's layout, device and dtype."""
        return self.kv_layout.empty_cache(rows, capacity, device=self.device, dtype=self.dtype)
