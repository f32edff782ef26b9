"""CUDA-graph replay of the launch-bound stages: one decode step (per bucketed batch size) and the denoise loop.

Why: a pi0.5 decode step at small batch is ~18 layers x ~25 small kernels; launched eagerly, the launches cost more
than the weight reads on a fast GPU (the paper's 13 ms per token is ~2.6x a 4090's weight-read floor). Captured
once, a step replays as one launch. Prefill stays eager: it is a few large compute-bound kernels.

Every shape is made static, so one capture serves every frame:
- decode: the batch is padded up to a bucket (1, 2, 4, 8, ..., the pool size). Padding rows are the free slots
  just past the active range (the pool keeps live slots contiguous at [0, active)); they get token 0 at position 0,
  which no live request reads. Attention runs over the slot's full capacity under a positions mask instead of the
  longest live length, so the read length never changes. The pool is preallocated, so the view of rows [0, bucket)
  has a fixed address.
- denoise: the frame slot (a device index, not a captured address) has its prefix K/V copied once per frame into
  private per-layer buffers of capacity + horizon positions; the action tokens' K/V goes after them, and a mask
  hides the unwritten prefix tail. All Euler steps are unrolled into one graph per (steps, horizon).

Results land in buffers allocated outside the graphs' memory pool, so replaying one graph never overwrites another's
output. Logits returned by `decode_step` are a view valid until the next replay (the scheduler consumes them at
once); denoise returns a fresh tensor.

Not run on a GPU yet (the machine these were written on has none); tests/test_bench.py has @pytest.mark.gpu checks
against the eager path.
"""
from __future__ import annotations

import math

import torch

from ..model.layers import AdaRMSNorm, linear, rope_cos_sin
from ..model.pi05 import PI05Model
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


class CudaGraphRunner:
    """Captures lazily on first use of each decode bucket and each (steps, horizon) denoise shape."""

    def __init__(self, model: PI05Model, pool: SlotPool) -> None:
        if model.device.type != "cuda":
            raise ValueError(f"CUDA graphs need the model on a CUDA device, got {model.device}")
        self.model = model
        self.pool = pool
        self.buckets = decode_buckets(pool.num_slots)
        self.mempool = torch.cuda.graph_pool_handle()
        self._decode: dict[int, _DecodeGraph] = {}
        self._denoise: dict[tuple[int, int], _DenoiseGraph] = {}

    @torch.inference_mode()
    def capture(self, num_steps: int, horizon: int) -> None:
        """Capture every decode bucket and the denoise graph now, so no frame pays a capture. Needs an empty pool:
        the warm-up runs write token 0 at position 0 of rows [0, bucket), which must hold no live request."""
        if self.pool.active:
            raise RuntimeError(f"capture() needs an empty pool; {self.pool.active} slots are live")
        dev = self.model.device
        for b in self.buckets:
            zeros = torch.zeros(b, dtype=torch.long, device=dev)
            self.decode_step(b, zeros, zeros)
        length = torch.ones(1, dtype=torch.long, device=dev)
        noise = torch.zeros(1, horizon, self.model.config.action_dim, device=dev)
        self.denoise(0, length, noise, num_steps)

    def bucket(self, batch: int) -> int:
        for b in self.buckets:
            if b >= batch:
                return b
        raise ValueError(f"decode batch {batch} exceeds the pool's {self.pool.num_slots} slots")

    @torch.inference_mode()
    def decode_step(self, batch: int, last_tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits `[batch, vocab]` of one step over slots [0, batch): same contract as `PI05Model.decode_step`."""
        b = self.bucket(batch)
        graph = self._decode.get(b)
        if graph is None:
            graph = self._decode[b] = _DecodeGraph(self.model, self.pool, b)
        graph.set_inputs(last_tokens, positions, batch)
        if not graph.captured:
            graph.capture(self.mempool)
        graph.replay()
        return graph.logits[:batch]

    @torch.inference_mode()
    def denoise(self, slot: int, prefix_lengths: torch.Tensor, noise: torch.Tensor, num_steps: int) -> torch.Tensor:
        """Actions `[1, horizon, action_dim]` from the prefix in `slot`: same result as `PI05Model.denoise`."""
        key = (int(num_steps), int(noise.shape[1]))
        graph = self._denoise.get(key)
        if graph is None:
            graph = self._denoise[key] = _DenoiseGraph(self.model, self.pool, *key)
        graph.set_inputs(slot, prefix_lengths, noise)
        if not graph.captured:
            graph.capture(self.mempool)
        graph.replay()
        return graph.out.clone()


class _Graph:
    captured = False

    def run(self) -> None:  # the captured work
        raise NotImplementedError

    def capture(self, mempool) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on the real inputs: lazy inits, cuBLAS workspaces
            self.run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=mempool):
            self.run()
        self.captured = True

    def replay(self) -> None:
        self.graph.replay()


class _DecodeGraph(_Graph):
    def __init__(self, model: PI05Model, pool: SlotPool, bucket: int) -> None:
        dev = model.device
        self.model, self.bucket = model, bucket
        self.cache = pool.view(0, bucket)  # fixed address: the pool never reallocates
        self.capacity = pool.capacity
        self.tokens = torch.zeros(bucket, dtype=torch.long, device=dev)
        self.positions = torch.zeros(bucket, dtype=torch.long, device=dev)
        self.rows = torch.arange(bucket, device=dev)[:, None]
        self.key_index = torch.arange(self.capacity, device=dev)[None, None, :]
        self.logits = torch.zeros(bucket, model.config.vocab_size, dtype=torch.float32, device=dev)

    def set_inputs(self, last_tokens: torch.Tensor, positions: torch.Tensor, batch: int) -> None:
        self.tokens[:batch].copy_(last_tokens)
        self.positions[:batch].copy_(positions)
        if batch < self.bucket:  # free slots past the active range: token 0 at position 0, never read
            self.tokens[batch:].zero_()
            self.positions[batch:].zero_()

    def run(self) -> None:
        m, cfg = self.model, self.model.config
        pos = self.positions[:, None]
        cos, sin = rope_cos_sin(pos, cfg.vlm.head_dim, cfg.rope_base)
        mask = self.key_index <= pos[:, :, None]  # [bucket, 1, capacity]
        x = (m.embed_tokens(self.tokens[:, None]) * math.sqrt(cfg.vlm.width)).to(m.dtype)
        for i, layer in enumerate(m.vlm.layers):
            x = layer(x, cos, sin, self.cache.k[i], self.cache.v[i], (self.rows, pos), self.capacity, mask)
        self.logits.copy_(m.lm_logits(m.vlm.norm(x)[:, 0]))


class _DenoiseGraph(_Graph):
    def __init__(self, model: PI05Model, pool: SlotPool, num_steps: int, horizon: int) -> None:
        dev, cfg = model.device, model.config
        self.model, self.pool, self.num_steps, self.horizon = model, pool, num_steps, horizon
        self.capacity = pool.capacity
        layers, _, kv_heads, _, head_dim = pool.cache.k.shape
        shape = (layers, 1, kv_heads, self.capacity + horizon, head_dim)
        self.k = torch.zeros(shape, dtype=pool.cache.k.dtype, device=dev)
        self.v = torch.zeros(shape, dtype=pool.cache.v.dtype, device=dev)
        self.slot = torch.zeros(1, dtype=torch.long, device=dev)
        self.prefix_lengths = torch.zeros(1, dtype=torch.long, device=dev)
        self.noise = torch.zeros(1, horizon, cfg.action_dim, dtype=torch.float32, device=dev)
        self.out = torch.zeros(1, horizon, cfg.action_dim, dtype=torch.float32, device=dev)
        self.steps = torch.arange(horizon, device=dev)[None]
        self.key_index = torch.arange(self.capacity + horizon, device=dev)[None]
        model._modulations(num_steps, dev)  # cached outside the graph's memory pool

    def set_inputs(self, slot: int, prefix_lengths: torch.Tensor, noise: torch.Tensor) -> None:
        if noise.shape[0] != 1 or prefix_lengths.numel() != 1:
            raise ValueError(f"graph denoise runs one frame at a time, got noise {tuple(noise.shape)}")
        self.slot.fill_(slot)
        self.prefix_lengths.copy_(prefix_lengths)
        self.noise.copy_(noise)

    def run(self) -> None:
        m, cfg, c, h = self.model, self.model.config, self.capacity, self.horizon
        self.k[:, :, :, :c].copy_(self.pool.cache.k.index_select(1, self.slot))
        self.v[:, :, :, :c].copy_(self.pool.cache.v.index_select(1, self.slot))
        pos = self.prefix_lengths[:, None] + self.steps
        cos, sin = rope_cos_sin(pos, cfg.expert.head_dim, cfg.rope_base)
        key_ok = (self.key_index < self.prefix_lengths[:, None]) | (self.key_index >= c)
        mask = key_ok[:, None, :].expand(1, h, c + h)
        dt = -1.0 / self.num_steps
        x_t = self.noise
        for mods in m._modulations(self.num_steps, self.noise.device):
            x = linear(x_t, m.action_in_proj).to(m.dtype)
            for i, layer in enumerate(m.expert.layers):
                x = layer(x, cos, sin, self.k[i], self.v[i], slice(c, c + h), c + h, mask, mods[i])
            scale, shift, _ = mods[-1]
            x_t = x_t + dt * linear(AdaRMSNorm.apply(x, scale, shift).float(), m.action_out_proj)
        self.out.copy_(x_t)
