"""How each stage runs: eagerly, or by replaying a CUDA graph captured from the model's own call.

The scheduler decides what runs (which rows, which requests); this runner decides how. Every stage calls the
model's interface (core/model_contract.py); with graphs on, the launch-bound stages (a decode step, a head's denoise
loop) are captured once per static shape, nano-vllm style, and replayed, so there is one copy of every piece of math.

Why graphs: a pi0.5 decode step at small batch is ~18 layers x ~25 small kernels; launched eagerly, the launches
cost more than the weight reads on a fast GPU. Prefill and prompt extension stay eager: a few large kernels.

Static shapes:
- decode: the batch is padded up to a bucket (1, 2, 4, 8, ..., the pool size). Padding rows are the free slots just
  past the active range (the pool keeps live slots contiguous at [0, active)); they feed token 0 at index 0, which no
  live request reads. The model attends over the slot's full capacity under a cache-index mask
  (`decode_step(read_len=capacity)`); the pool never reallocates, so the view of rows [0, bucket) has a fixed address.
- denoise: one graph per (head, steps, horizon), captured over the pool's first scratch row (a fixed address). A
  frame whose prefix is in another row has it copied there first (the prefix positions only); the model writes the
  action tokens at the row's end and masks the rest (`denoise_head(static=True)`).
Inputs are copied into buffers the graph reads; outputs land in buffers allocated outside the graphs' memory pool,
so one replay never overwrites another graph's result. Decode logits are a view valid until the next replay.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.guidance import Guidance
from ..core.model_contract import EngineModel, PrefixState
from .slots import SlotPool


def use_cuda_graphs(flag: bool | None, device: torch.device | str) -> bool:
    """None = on for CUDA devices (the fallback is `cuda_graphs=False`); True on a CPU device is an error."""
    cuda = torch.device(device).type == "cuda"
    if flag is None:
        return cuda
    if flag and not cuda:
        raise ValueError(f"cuda_graphs=True needs a CUDA device, got {device}")
    return bool(flag)


def decode_buckets(num_slots: int) -> list[int]:
    """Powers of two below the pool size, then the pool size itself."""
    out, b = [], 1
    while b < num_slots:
        out.append(b)
        b *= 2
    return out + [num_slots]


class StaticCall:
    """`fn(*inputs)` with shape-static inputs, run from fixed buffers: eagerly (`run`, the CPU-testable body) or
    captured as a CUDA graph (`capture`, then `replay`). `fn` must return one tensor."""

    def __init__(self, fn: Callable[..., torch.Tensor], example: Sequence[torch.Tensor]) -> None:
        self.fn = fn
        self.inputs = [x.detach().clone() for x in example]
        self.out: torch.Tensor | None = None
        self.graph = None

    def load(self, inputs: Sequence[torch.Tensor]) -> None:
        """Copy `inputs` into the buffers; an input shorter than its buffer (a decode batch below its bucket) fills
        the front rows and the rest are zeroed."""
        for buf, x in zip(self.inputs, inputs, strict=True):
            n = x.shape[0]
            buf[:n].copy_(x)
            if n < buf.shape[0]:
                buf[n:].zero_()

    def run(self) -> torch.Tensor:
        result = self.fn(*self.inputs)
        if self.out is None:
            self.out = torch.empty_like(result)
        self.out.copy_(result)
        return self.out

    def capture(self, mempool) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up: lazy inits, cuBLAS workspaces, the output buffer (outside the pool)
            self.run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=mempool):
            self.out.copy_(self.fn(*self.inputs))

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.out


class ModelRunner:
    """Runs the model's stages over rows of the slot pool. `cuda_graphs`: None = on for CUDA, False = eager."""

    def __init__(self, model: EngineModel, pool: SlotPool, *, cuda_graphs: bool | None = None) -> None:
        self.model = model
        self.pool = pool
        self.graphs = use_cuda_graphs(cuda_graphs, model.device)
        self.buckets = decode_buckets(pool.num_slots)
        self._mempool = torch.cuda.graph_pool_handle() if self.graphs else None
        self._decode: dict[int, StaticCall] = {}
        self._decode_routed: dict[tuple[int, int], StaticCall] = {}  # (bucket, model.adapter_version)
        self._denoise: dict[tuple[str, int, int], StaticCall] = {}

    @property
    def device(self) -> torch.device:
        return self.model.device

    # ------------------------------------------------------------------ eager stages
    @torch.inference_mode()
    def prefill(self, row: int, rows: int, inputs: Any) -> PrefixState:
        """Prefill the `rows` rows of the bundle `inputs` into pool rows [row, row + rows)."""
        return self.model.prefill_frame(self.pool.view(row, row + rows), inputs)

    @torch.inference_mode()
    def extend(self, row: int, tokens: list[int], cache_index: int, position: int, *, adapter: int = 0) -> None:
        """Write `tokens` after row `row`'s sequence (a task prompt), through LoRA adapter slot `adapter` (0: base)."""
        dev = self.device
        t = torch.tensor([tokens], dtype=torch.long, device=dev)
        kw = {"adapters": torch.tensor([adapter], device=dev)} if adapter else {}
        self.model.extend(
            self.pool.view(row, row + 1), t, torch.tensor([cache_index], device=dev), torch.tensor([position], device=dev),
            **kw,
        )

    # ------------------------------------------------------------------ graph-capable stages
    @torch.inference_mode()
    def denoise(
        self, head: str, row: int, state: PrefixState, noise: torch.Tensor, num_steps: int, guidance: Guidance | None = None
    ) -> torch.Tensor:
        """Actions of `head` for the prefixes in pool rows [row, row + B). A guided (RTC) denoise runs eagerly: its
        backward pass is not captured."""
        b = noise.shape[0]
        if guidance is not None:
            return self.model.denoise_head(head, self.pool.view(row, row + b), state, noise, num_steps, guidance=guidance)
        if not self.graphs or b != 1:
            return self.model.denoise_head(head, self.pool.view(row, row + b), state, noise, num_steps)
        staging = self.pool.scratch
        if row != staging:
            self.pool.copy(row, staging, self.pool.lengths[row])
        call = self._denoise_call(head, num_steps, state, noise)
        return self._replay(call, [noise, *state.tensors()]).clone()

    @torch.inference_mode()
    def decode_step(
        self, size: int, last_tokens: torch.Tensor, cache_index: torch.Tensor, positions: torch.Tensor, *,
        adapters: torch.Tensor | None = None,
    ):
        """Next-token logits `[size, vocab]` of pool rows [0, size). Graphs pad to a bucket with the rows after the
        batch, which must be free: a batch that is not the whole active range runs eagerly. `adapters [size]`: each
        row's LoRA adapter slot (None: all base), one batch whatever the mix (model/lora_bank.py)."""
        if not self.graphs or size != self.pool.active:
            kw = {} if adapters is None else {"adapters": adapters}
            return self.model.decode_step(self.pool.view(0, size), last_tokens, positions, cache_index, **kw)
        inputs = [last_tokens, cache_index, positions] + ([] if adapters is None else [adapters])
        call = self._decode_call(self.bucket(size), adapters is not None)  # padding rows: token 0 at index 0, base
        return self._replay(call, inputs)[:size]

    def bucket(self, batch: int) -> int:
        for b in self.buckets:
            if b >= batch:
                return b
        raise ValueError(f"decode batch {batch} exceeds the pool's {self.pool.num_slots} slots")

    @torch.inference_mode()
    def capture(self, num_steps: int, horizons: dict[str, int]) -> None:
        """Capture every decode bucket and each head's denoise now, so no frame pays a capture. Needs an empty pool:
        the warm-ups write rows [0, bucket) and the staging row, which must hold no live request."""
        if not self.graphs:
            return
        if self.pool.active:
            raise RuntimeError(f"capture() needs an empty pool; {self.pool.active} slots are live")
        for b in self.buckets:
            zeros = torch.zeros(b, dtype=torch.long, device=self.device)
            self._replay(self._decode_call(b), [zeros, zeros, zeros])
        one = torch.ones(1, dtype=torch.long, device=self.device)
        state = PrefixState(one, one.clone())
        for head, horizon in horizons.items():
            noise = torch.zeros(1, horizon, self.model.action_heads[head].action_dim, device=self.device)
            self._replay(self._denoise_call(head, num_steps, state, noise), [noise, *state.tensors()])

    # ------------------------------------------------------------------ the static bodies
    def decode_body(self, bucket: int, routed: bool = False) -> StaticCall:
        """The decode step over rows [0, bucket) as a static call (run it eagerly to test it on a CPU). `routed`:
        it takes a fourth input, each row's adapter slot."""
        view, capacity = self.pool.view(0, bucket), self.pool.capacity
        zeros = torch.zeros(bucket, dtype=torch.long, device=self.device)

        def step(tokens, index, positions, adapters=None):
            kw = {} if adapters is None else {"adapters": adapters}
            return self.model.decode_step(view, tokens, positions, index, read_len=capacity, **kw)

        return StaticCall(step, [zeros] * (4 if routed else 3))

    def denoise_body(self, head: str, num_steps: int, state: PrefixState, noise: torch.Tensor) -> StaticCall:
        """A head's denoise over the staging row as a static call (example `state` / `noise` fix the shapes)."""
        view = self.pool.view(self.pool.scratch, self.pool.scratch + 1)

        def run(noise_buf, *state_bufs):
            return self.model.denoise_head(head, view, state.with_tensors(state_bufs), noise_buf, num_steps, static=True)

        return StaticCall(run, [noise, *state.tensors()])

    def _replay(self, call: StaticCall, inputs: list[torch.Tensor]) -> torch.Tensor:
        """Load this call's real inputs, capture on first use (the warm-up then runs the real step, which replaying
        repeats identically: it writes the same K/V at the same indices), replay."""
        call.load(inputs)
        if call.graph is None:
            call.capture(self._mempool)
        return call.replay()

    def _decode_call(self, bucket: int, routed: bool = False) -> StaticCall:
        if not routed:
            if bucket not in self._decode:
                self._decode[bucket] = self.decode_body(bucket)
            return self._decode[bucket]
        key = (bucket, self.model.adapter_version)  # it reads the adapters' tensors: recaptured when they move
        if key not in self._decode_routed:
            self._decode_routed[key] = self.decode_body(bucket, routed=True)
        return self._decode_routed[key]

    def _denoise_call(self, head: str, num_steps: int, state: PrefixState, noise: torch.Tensor) -> StaticCall:
        key = (head, int(num_steps), int(noise.shape[1]))
        if key not in self._denoise:
            self._denoise[key] = self.denoise_body(head, num_steps, state, noise)
        return self._denoise[key]
