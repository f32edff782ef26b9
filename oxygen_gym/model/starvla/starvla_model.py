"""StarVLA behind the engine's interface (core/model_contract.py): one Qwen3-VL backbone (model/qwen3_vl) whose prefill
writes the slot KV and, from the same pass, the hidden-state taps its heads read (`PrefixState.extras`), and up to
three action heads that consume it in three ways (starvla_config.py):

- `pi`: every layer's hidden state, projected per layer; the projected K/V computed once per frame;
- `groot`: the last layer's hidden state, through its own features layers; its K/V computed once per frame;
- `oft`: query tokens continuing the prefix through the backbone (its `extend`, writing past the prefix only),
  regressed from the last layer's hidden state at the queries.

"The last layer's hidden state" is what StarVLA's QwenGR00T / QwenOFT read, `outputs.hidden_states[-1]` of
`Qwen3VLForConditionalGeneration` (starVLA/model/framework/VLM4A/QwenGR00T.py, QwenOFT.py), which under the
transformers it pins (requirements.txt: 4.57.0) is the last decoder layer's output *before* the final RMSNorm
(tests/model/qwen3_vl/test_qwen3_vl_parity.py checks this on 4.57.x): real checkpoints were trained on the un-normed state.

The prefill keeps the hidden states its heads read (`PrefixState.extras`: `layers` for pi, `last` for groot); each
head turns them into its cross-attention K/V when it denoises, once per call (the Euler steps reuse them). So a head's
own work stays in its denoise: a prefill that feeds no head (a language request's in `isolated`, the baseline's
per-head prefills) costs the backbone alone, and `isolated` vs `shared` compares prefills, not taps. Taps are padded
to `max_prefix_length()` positions so the static (graph) form has fixed shapes; the eager form reads only up to the
batch's longest prefix. Language decoding continues the prefix through `extend` / `decode_step`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ...core.guidance import Guidance
from ...core.kv_view import KVCache
from ...core.model_contract import ActionHead, PrefixState
from ..flow_sampler import denoise_scope
from ..qwen3_vl import Qwen3VLBackbone
from ..qwen_backed import QwenBackedModel
from ..qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs
from .groot_head import GR00THead
from .oft_head import OFTHead
from .pi_head import PIHead
from .starvla_config import StarVLAConfig

HEAD_CLASSES = {"pi": PIHead, "groot": GR00THead, "oft": OFTHead}
StarVLAPrefixInputs = QwenPrefixInputs  # the Qwen processor's ids, pixels, grids, and the robot state


class StarVLAModel(nn.Module, QwenBackedModel):
    def __init__(self, config: StarVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vlm = Qwen3VLBackbone(config.qwen3vl_config())
        self.heads = nn.ModuleDict({name: HEAD_CLASSES[name](config) for name in config.heads})
        self.requires_grad_(False)

    @property
    def action_heads(self) -> dict[str, ActionHead]:
        c = self.config
        dims = {"pi": (c.pi.horizon, c.pi.num_steps), "groot": (c.groot.horizon, c.groot.num_steps),
                "oft": (c.oft.horizon, 1)}
        # OFT's queries take cache positions past the prefix (they run through the backbone); the flow heads read
        # their taps and write nothing.
        return {n: ActionHead(n, c.action_dim, *dims[n], writes_cache=n == "oft") for n in c.heads}

    def tap_bytes(self, positions: int | None = None) -> dict[str, int]:
        """Bytes one row's taps take per head at `positions` prefix positions (None: the padded maximum): what a
        head costs besides the shared KV (pi: every layer's hidden state; groot: the last one and the state)."""
        n = self.max_prefix_length() if positions is None else positions
        size = torch.tensor([], dtype=self.dtype).element_size()
        w, layers = self.config.backbone_width, self.config.backbone_layers
        per_head = {"pi": layers * w * n * size, "groot": w * n * size + self.config.groot.max_state_dim * size,
                    "oft": 0}  # oft reads the backbone through the cache: no tap
        return {name: per_head[name] for name in self.heads}

    # ---------------------------------------------------------------- stages
    def prefill_frame(self, cache: KVCache, inputs: QwenPrefixInputs) -> PrefixState:
        """The backbone over the prefix (KV into `cache` rows [0, B)) and, from the same pass, the hidden states the
        heads read: every layer's output for pi, the last one (before the final norm) for groot."""
        pi, groot = "pi" in self.heads, "groot" in self.heads
        pre = self.vlm.prefill(cache, inputs.input_ids, inputs.pixel_values, inputs.image_grid_thw, inputs.lengths,
                               output_hidden_states=pi or groot)
        width = self.max_prefix_length()
        t = pre.hidden.shape[1]
        if t > width:
            raise ValueError(f"prefix of {t} positions exceeds the model's max_prefix_length() = {width}")
        extras: dict[str, torch.Tensor] = {}
        with torch.inference_mode():
            if pi:
                extras["layers"] = _pad_positions(torch.stack(pre.hidden_states[1:], 1), width)  # [B, L, T, W]
            elif groot:
                extras["last"] = _pad_positions(pre.hidden_states[-1], width)  # [B, T, W]
            if groot:
                extras["state"] = self._groot_state(inputs.state)
        return PrefixState(pre.lengths, pre.next_positions, extras)

    def _head_taps(self, head: str, extras: dict[str, torch.Tensor], lengths: torch.Tensor, static: bool):
        """`head`'s cross-attention K/V from the prefill's hidden states (once per denoise call), read up to the
        batch's longest prefix (the padded width when `static`)."""
        src = extras["layers"] if "layers" in extras else extras["last"]
        read = src.shape[-2] if static else int(lengths.max())
        if head == "pi":
            layers = extras["layers"][:, :, :read]
            return self.heads["pi"].taps(list(layers.unbind(1)))
        last = extras["layers"][:, -1, :read] if "layers" in extras else extras["last"][:, :read]
        mask = torch.arange(read, device=lengths.device)[None] < lengths[:, None]
        return {**self.heads["groot"].taps(last, mask), "state": extras["state"]}

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
        with torch.inference_mode():
            taps = self._head_taps(head, state.extras, state.lengths, static)
        with denoise_scope(guidance):  # guided: a backward pass through the head, outside inference mode
            return self.heads[head].sample(taps, state.lengths, noise, num_steps, static=static, guidance=guidance)

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


def _pad_positions(x: torch.Tensor, width: int) -> torch.Tensor:
    """`[..., T, W]` zero-padded to `width` positions (static shapes for the graph form)."""
    t = x.shape[-2]
    if t == width:
        return x
    pad = torch.zeros(*x.shape[:-2], width - t, x.shape[-1], device=x.device, dtype=x.dtype)
    return torch.cat([x, pad], -2)


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
