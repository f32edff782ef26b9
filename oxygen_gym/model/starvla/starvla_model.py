"""StarVLA behind the engine's interface (engine/model_api.py): one Qwen3-VL backbone (model/qwen3_vl) whose prefill
writes the slot KV and, from the same pass, the hidden-state taps its heads read (`PrefixState.extras`), and up to
three action heads that consume it in three ways (starvla_config.py):

- `pi`: every layer's hidden state, projected per layer; the projected K/V are computed in the prefill, once;
- `groot`: the last layer's hidden state, through its own features layers; its K/V computed in the prefill, once;
- `oft`: query tokens continuing the prefix through the backbone (its `extend`, writing past the prefix only),
  regressed from the last layer's hidden state at the queries.

"The last layer's hidden state" is what StarVLA's QwenGR00T / QwenOFT read, `outputs.hidden_states[-1]` of
`Qwen3VLForConditionalGeneration` (starVLA/model/framework/VLM4A/QwenGR00T.py, QwenOFT.py), which under the
transformers it pins (requirements.txt: 4.57.0) is the last decoder layer's output *before* the final RMSNorm
(tests/test_qwen3_vl_parity.py checks this on 4.57.x): real checkpoints were trained on the un-normed state.

Taps are padded to `max_prefix_length()` positions so the static (graph) form has fixed shapes; the eager form reads
only up to the batch's longest prefix. Language decoding continues the prefix through `extend` / `decode_step`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ...engine.kv_cache import KVCache
from ...engine.model_api import ActionHead, EngineModel, KVLayout, PrefixState
from ...engine.rtc import Guidance
from ..qwen3_vl import Qwen3VLBackbone
from ..xr0.xr0_prefix import XR0PrefixInputs
from .groot_head import GR00THead
from .oft_head import OFTHead
from .pi_head import PIHead
from .starvla_config import StarVLAConfig

HEAD_CLASSES = {"pi": PIHead, "groot": GR00THead, "oft": OFTHead}
StarVLAPrefixInputs = XR0PrefixInputs  # the Qwen processor's ids, pixels, grids, and the robot state


class StarVLAModel(nn.Module, EngineModel):
    def __init__(self, config: StarVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vlm = Qwen3VLBackbone(config.qwen3vl_config())
        self.heads = nn.ModuleDict({name: HEAD_CLASSES[name](config) for name in config.heads})
        self.requires_grad_(False)

    # ---------------------------------------------------------------- what the engine allocates and checks
    @property
    def device(self) -> torch.device:
        return self.vlm.device

    @property
    def dtype(self) -> torch.dtype:
        return self.vlm.dtype

    @property
    def kv_layout(self) -> KVLayout:
        return self.vlm.kv_layout

    @property
    def image_size(self) -> int:
        return self.config.image_size

    @property
    def action_heads(self) -> dict[str, ActionHead]:
        c = self.config
        dims = {"pi": (c.pi.horizon, c.pi.num_steps), "groot": (c.groot.horizon, c.groot.num_steps),
                "oft": (c.oft.horizon, 1)}
        # OFT's queries take cache positions past the prefix (they run through the backbone); the flow heads read
        # their taps and write nothing.
        return {n: ActionHead(n, c.action_dim, *dims[n], writes_cache=n == "oft") for n in c.heads}

    def max_prefix_length(self) -> int:
        return self.config.max_prefix_length()

    def prefix_length(self, inputs: XR0PrefixInputs) -> int:
        return int(inputs.lengths[0])

    def batch_prefix_inputs(self, inputs: Sequence[XR0PrefixInputs]) -> XR0PrefixInputs:
        return XR0PrefixInputs.cat(inputs)

    def tap_bytes(self, positions: int | None = None) -> dict[str, int]:
        """Bytes one row's taps take per head at `positions` prefix positions (None: the padded maximum): what a
        head costs besides the shared KV."""
        n = self.max_prefix_length() if positions is None else positions
        size = torch.tensor([], dtype=self.dtype).element_size()
        out = {}
        for name, head in self.heads.items():
            if name == "oft":
                out[name] = 0  # reads the backbone through the cache: no tap
                continue
            d = head.dims
            out[name] = 2 * len(head.model.cross_blocks) * d.width * n * size + (
                d.max_state_dim * 4 if name == "groot" else 0)
        return out

    # ---------------------------------------------------------------- stages
    def prefill_frame(self, cache: KVCache, inputs: XR0PrefixInputs) -> PrefixState:
        """The backbone over the prefix (KV into `cache` rows [0, B)) and, from the same pass, each head's taps."""
        pi = "pi" in self.heads
        layers = pi or "groot" in self.heads  # groot reads the last layer's output before the final norm
        pre = self.vlm.prefill(cache, inputs.input_ids, inputs.pixel_values, inputs.image_grid_thw, inputs.lengths,
                               output_hidden_states=layers)
        width = self.max_prefix_length()
        t = pre.hidden.shape[1]
        if t > width:
            raise ValueError(f"prefix of {t} positions exceeds the model's max_prefix_length() = {width}")
        extras: dict[str, torch.Tensor] = {}
        with torch.inference_mode():
            mask = torch.arange(t, device=self.device)[None] < pre.lengths[:, None]
            if pi:
                extras.update(self.heads["pi"].taps(pre.hidden_states[1:]))
            if "groot" in self.heads:
                extras.update(self.heads["groot"].taps(pre.hidden_states[-1], mask))
                extras["state"] = self._groot_state(inputs.state)
            extras = {k: _pad_positions(v, width) if k != "state" else v for k, v in extras.items()}
        return PrefixState(pre.lengths, pre.next_positions, extras)

    def _groot_state(self, state: torch.Tensor) -> torch.Tensor:
        d = self.config.groot.max_state_dim
        out = torch.zeros(state.shape[0], d, device=self.device, dtype=self.dtype)
        out[:, : state.shape[1]] = state.to(self.dtype)
        return out

    def denoise_head(
        self, head: str, cache: KVCache, state: PrefixState, noise: torch.Tensor, num_steps: int, *, static: bool = False,
        guidance: Guidance | None = None,
    ) -> torch.Tensor:
        if head not in self.heads:
            raise ValueError(f"head: this StarVLA model has heads {list(self.heads)}, got {head!r}")
        if head == "oft":
            if guidance is not None:
                raise ValueError("guidance: head 'oft' regresses its chunk in one pass (no flow loop), so real-time "
                                 "chunking cannot guide it; pass guidance for the flow heads only ('pi', 'groot')")
            return self._oft_actions(cache, state, noise.shape[1], static)
        if guidance is not None and guidance.method == "guided":  # a backward pass: autograd, outside inference mode
            with torch.inference_mode(False), torch.no_grad():
                return self.heads[head].sample(state.extras, state.lengths, noise, num_steps, static=static,
                                               guidance=guidance)
        with torch.inference_mode():
            return self.heads[head].sample(state.extras, state.lengths, noise, num_steps, static=static,
                                           guidance=guidance)

    def _oft_actions(self, cache: KVCache, state: PrefixState, horizon: int, static: bool) -> torch.Tensor:
        """The queries after each row's prefix (cache indices from `lengths`, positions from `next_positions`):
        written past the prefix, never into it."""
        oft: OFTHead = self.heads["oft"]
        b = state.lengths.shape[0]
        tokens = oft.query_tokens(b, horizon, self.device)
        hidden = self.vlm.extend(cache.rows(0, b), tokens, state.lengths,
                                 state.next_positions, read_len=cache.capacity if static else None, normed=False)
        with torch.inference_mode():
            return oft.regress(hidden)

    def extend(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, positions: torch.Tensor | None = None,
               read_len: int | None = None) -> torch.Tensor:
        return self.vlm.extend(cache, tokens, start, positions, read_len)

    def decode_step(self, cache: KVCache, last_tokens: torch.Tensor, positions: torch.Tensor,
                    cache_index: torch.Tensor | None = None, read_len: int | None = None) -> torch.Tensor:
        return self.vlm.decode_step(cache, last_tokens, positions, cache_index, read_len)


def _pad_positions(x: torch.Tensor, width: int) -> torch.Tensor:
    """`[B, blocks, heads, T, D]` zero-padded to `width` positions (static shapes for the graph form)."""
    t = x.shape[3]
    if t == width:
        return x
    pad = torch.zeros(*x.shape[:3], width - t, x.shape[4], device=x.device, dtype=x.dtype)
    return torch.cat([x, pad], 3)


# Random-weight backbones as the XR0 built-ins draw them (xr0_model.py: RESIDUAL_OUT_GAIN), so greedy text depends
# on the observation; the heads keep torch's default init, with their embeddings at N(0, 0.02) as the sources do.
RESIDUAL_OUT_GAIN = 3.0


def build_starvla(config: StarVLAConfig | str, *, seed: int = 0, device="cpu", dtype: torch.dtype | None = None,
                  heads: Sequence[str] | None = None) -> StarVLAModel:
    """Random weights from `seed` (under a private RNG state). `heads`: keep only these (the others' weights are
    still drawn first, so a subset's heads equal the full model's)."""
    config = StarVLAConfig.named(config) if isinstance(config, str) else config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = StarVLAModel(config)
        gen = torch.Generator().manual_seed(int(seed) + 1)
        for name, p in model.vlm.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.data.normal_(0.0, 1.0, generator=gen)
            elif p.dim() == 2 and name.startswith("model.language_model."):
                gain = RESIDUAL_OUT_GAIN if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                p.data.normal_(0.0, gain / math.sqrt(p.shape[1]), generator=gen)
            elif name == "lm_head.weight" and not config.backbone.get("tie_word_embeddings", True):
                p.data.normal_(0.0, 1.0 / math.sqrt(p.shape[1]), generator=gen)
        for name, p in model.heads.named_parameters():
            if name.endswith(("future_tokens.weight", "position_embedding.weight")):
                p.data.normal_(0.0, 0.02, generator=gen)
            elif name.endswith((".W", ".b")):  # embodiment linears (lerobot draws W at 0.02; b too, so it matters)
                p.data.normal_(0.0, 0.02, generator=gen)
    model.vlm.tie_weights()
    if heads is not None:
        keep = list(heads)
        bad = [h for h in keep if h not in model.heads]
        if bad:
            raise ValueError(f"heads: unknown action head(s) {bad}; this model has {list(model.heads)}")
        model.heads = nn.ModuleDict({h: model.heads[h] for h in keep})
        model.config = config.with_heads(keep)
    return model.to(device=device, dtype=dtype or torch.float32).eval()
