"""Seeded random pi0.5 models: the built-in `tiny` / `small` / `pi05` have no released weights, so they start from a
reproducible random init that keeps every path alive (attention, adaRMS gates, vision tower, LM head).

The tensors are drawn on the CPU from one `torch.Generator` in a fixed order and only then moved to the device, so
the same seed gives bitwise the same weights on every device. The model is built on the meta device first, so a
full-size `pi05` in bf16 never holds an fp32 copy.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import PI05Config
from .modeling import PI05Model
from .weights import cast_for_inference

# Draw at most this many numbers at once (bounds the fp32 scratch when filling bf16 weights of the full model).
_CHUNK = 1 << 24
# adaRMS modulation weights: small, so the flow time shifts (scale, shift, gate) without swamping them.
ADARMS_WEIGHT_STD = 0.5
# Token embeddings as Gemma inits them. With the tied LM head, a larger scale lets each token's own embedding
# dominate the residual stream and a random model just repeats its input token.
EMBED_STD = 0.02
# Residual-branch outputs (o_proj, down_proj) scaled up so attention and MLP steer the next-token choice: a random
# model then produces varied text, which the mode-equivalence tests need to be meaningful.
RESIDUAL_OUT_GAIN = 4.0
# Sharper attention in the Gemma stacks: with unit-scale query/key projections a random model's attention is
# near-uniform over the ~500 image tokens, so every decode step sees the same average and repeats one token.
QK_GAIN = 2.0
# Vision position embeddings, as ViT inits them.
POSITION_STD = 0.02


def default_dtype(device: str | torch.device) -> torch.dtype:
    """docs/api.md's rule: float32 on CPU, bfloat16 on CUDA."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def empty_model(config: PI05Config, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> PI05Model:
    """An uninitialised model in the inference dtype layout (norms and vision embeddings fp32), no weight copies."""
    dtype = dtype or default_dtype(device)
    with torch.device("meta"):
        model = PI05Model(config)
    cast_for_inference(model, dtype)
    model.to_empty(device=device)
    model.requires_grad_(False)
    model.norm_stats = None  # load_pretrained attaches the checkpoint's normaliser statistics here
    return model.eval()


def build_model(
    config_or_name: PI05Config | str,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> PI05Model:
    """A randomly initialised pi0.5 model; the same `seed` gives bitwise the same weights.

    `config_or_name` is a `PI05Config` or a built-in name (`tiny`, `small`, `pi05`). `dtype=None` follows docs/api.md
    (float32 on CPU, bfloat16 on CUDA); norms and vision embeddings stay fp32 either way.
    """
    config = PI05Config.named(config_or_name) if isinstance(config_or_name, str) else config_or_name
    if not isinstance(config, PI05Config):
        raise ValueError(f"config_or_name must be a PI05Config or a built-in name, got {type(config_or_name).__name__}")
    model = empty_model(config, device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    for name, param in model.named_parameters():  # registration order: fixed for a given config
        _fill(param, _init_spec(name, param), gen)
    model.clear_caches()
    return model


def _init_spec(name: str, param: nn.Parameter) -> tuple[str, float, float]:
    """(kind, mean, std) for one parameter: kind `normal` or `gate_bias` (adaRMS bias: gate third at 1)."""
    if name.endswith(".dense.weight"):  # adaRMS modulation of the expert: small, so time matters but gently
        return "normal", 0.0, ADARMS_WEIGHT_STD / math.sqrt(param.shape[1])
    if name.endswith(".dense.bias"):  # scale and shift 0, gate 1: each layer adds its residual branch
        return "gate_bias", 0.0, 0.0
    if "layer_norm" in name or "post_layernorm" in name:  # SigLIP LayerNorm: gain 1, bias 0
        return "normal", 1.0 if name.endswith("weight") else 0.0, 0.0
    if name.endswith("layernorm.weight") or name == "vlm.norm.weight":  # Gemma RMSNorm: scale is 1 + weight
        return "normal", 0.0, 0.0
    if name == "embed_tokens.weight":
        return "normal", 0.0, EMBED_STD
    if name == "vision.position_embedding":
        return "normal", 0.0, POSITION_STD
    if name.endswith("bias"):
        return "normal", 0.0, 0.0
    fan_in = math.prod(param.shape[1:])
    gain = 1.0
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        gain = RESIDUAL_OUT_GAIN
    elif name.startswith(("vlm.", "expert.", "extra_experts.")) and name.endswith(("q_proj.weight", "k_proj.weight")):
        gain = QK_GAIN
    return "normal", 0.0, gain / math.sqrt(fan_in)


def _fill(param: torch.Tensor, spec: tuple[str, float, float], gen: torch.Generator) -> None:
    kind, mean, std = spec
    flat = param.data.view(-1)
    if kind == "gate_bias":
        third = flat.numel() // 3
        flat.zero_()
        flat[2 * third :] = 1.0
        return
    if std == 0.0:
        flat.fill_(mean)
        return
    for start in range(0, flat.numel(), _CHUNK):
        stop = min(start + _CHUNK, flat.numel())
        chunk = torch.randn(stop - start, generator=gen, dtype=torch.float32) * std + mean
        flat[start:stop] = chunk.to(device=flat.device, dtype=flat.dtype)


def count_parameters(config: PI05Config | str, include_unused: bool = False) -> int:
    """Parameters of a config, counted on the meta device (no memory). `include_unused` adds the expert LM head
    that checkpoints carry but inference never reads."""
    config = PI05Config.named(config) if isinstance(config, str) else config
    with torch.device("meta"):
        model = PI05Model(config)
    n = sum(p.numel() for p in model.parameters())
    return n + (config.vocab_size * config.expert.width if include_unused else 0)
