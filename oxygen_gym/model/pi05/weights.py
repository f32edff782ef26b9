"""Checkpoint keys: lerobot's pi0.5 safetensors layout (and openpi's converter layout, same keys without
`model.`) mapped onto our module names, strictly: unknown, missing or mis-shaped keys are errors naming the key."""
from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from .modeling import PI05Model

P = "paligemma_with_expert."
# (checkpoint key pattern, our parameter name); the first match wins.
_RULES: list[tuple[str, str]] = [
    (r"^(action_in_proj|action_out_proj|time_mlp_in|time_mlp_out)\.(weight|bias)$", r"\1.\2"),
    (rf"^{P}paligemma\.lm_head\.weight$", "embed_tokens.weight"),
    (rf"^{P}paligemma\.model\.language_model\.embed_tokens\.weight$", "embed_tokens.weight"),
    (rf"^{P}paligemma\.model\.language_model\.layers\.(\d+)\.(.+)$", r"vlm.layers.\1.\2"),
    (rf"^{P}paligemma\.model\.language_model\.norm\.weight$", "vlm.norm.weight"),
    (rf"^{P}paligemma\.model\.multi_modal_projector\.linear\.(weight|bias)$", r"vision.projector.\1"),
    (rf"^{P}paligemma\.model\.vision_tower\.vision_model\.embeddings\.patch_embedding\.(weight|bias)$", r"vision.patch_embedding.\1"),
    (rf"^{P}paligemma\.model\.vision_tower\.vision_model\.embeddings\.position_embedding\.weight$", "vision.position_embedding"),
    (rf"^{P}paligemma\.model\.vision_tower\.vision_model\.encoder\.layers\.(\d+)\.(.+)$", r"vision.layers.\1.\2"),
    (rf"^{P}paligemma\.model\.vision_tower\.vision_model\.post_layernorm\.(weight|bias)$", r"vision.post_layernorm.\1"),
    (rf"^{P}gemma_expert\.model\.layers\.(\d+)\.(.+)$", r"expert.layers.\1.\2"),
    (rf"^{P}gemma_expert\.model\.norm\.dense\.(weight|bias)$", r"expert.norm.dense.\1"),
    # Multi-expert models (ours only, config.extra_heads): every further expert under its head's name.
    (r"^extra_experts\.(.+)$", r"extra_experts.\1"),
]
# Present in real checkpoints, not used by inference (the expert never predicts tokens).
UNUSED_KEYS = {f"{P}gemma_expert.lm_head.weight"}
# Parameters kept in fp32 when the rest is bf16, as the references keep them.
FP32_PATTERNS = ("patch_embedding", "position_embedding", "input_layernorm", "post_attention_layernorm", "vlm.norm", "expert.norm")


class CheckpointError(ValueError):
    """A checkpoint that does not fit the model; the message names the key."""


def our_name(key: str) -> str | None:
    """Our parameter name for a checkpoint key (with or without the leading `model.`), None if unused."""
    k = key[len("model.") :] if key.startswith("model.") else key
    if k in UNUSED_KEYS:
        return None
    for pattern, repl in _RULES:
        if re.match(pattern, k):
            return re.sub(pattern, repl, k)
    raise CheckpointError(f"unexpected key in checkpoint: {key!r}")


def checkpoint_keys(model: PI05Model) -> dict[str, tuple[int, ...]]:
    """Every key a lerobot pi0.5 checkpoint of this model's dims holds, with its shape (the layout we write)."""
    inverse = {v: k for k, v in _inverse_table(model).items()}
    out = {inverse[name]: tuple(p.shape) for name, p in model.state_dict().items()}
    out[f"model.{P}gemma_expert.lm_head.weight"] = (model.config.vocab_size, model.config.expert.width)
    return dict(sorted(out.items()))


def _inverse_table(model: PI05Model) -> dict[str, str]:
    """checkpoint key -> our name, for every parameter of `model` (tied embedding written as lm_head)."""
    table = {}
    for name in model.state_dict():
        table[_to_checkpoint_key(name)] = name
    return table


def _to_checkpoint_key(name: str) -> str:
    pg = f"model.{P}paligemma.model."
    fixed = {
        "embed_tokens.weight": f"model.{P}paligemma.lm_head.weight",
        "vlm.norm.weight": f"{pg}language_model.norm.weight",
        "vision.position_embedding": f"{pg}vision_tower.vision_model.embeddings.position_embedding.weight",
    }
    if name in fixed:
        return fixed[name]
    for prefix, target in (
        ("vlm.layers.", f"{pg}language_model.layers."),
        ("vision.layers.", f"{pg}vision_tower.vision_model.encoder.layers."),
        ("vision.patch_embedding.", f"{pg}vision_tower.vision_model.embeddings.patch_embedding."),
        ("vision.post_layernorm.", f"{pg}vision_tower.vision_model.post_layernorm."),
        ("vision.projector.", f"{pg}multi_modal_projector.linear."),
        ("expert.layers.", f"model.{P}gemma_expert.model.layers."),
        ("expert.norm.", f"model.{P}gemma_expert.model.norm."),
    ):
        if name.startswith(prefix):
            return target + name[len(prefix) :]
    return f"model.{name}"


def to_checkpoint(model: PI05Model) -> dict[str, torch.Tensor]:
    """State dict in lerobot's key layout (tied embedding stored once, as `lm_head`)."""
    out = {_to_checkpoint_key(n): t.detach().contiguous() for n, t in model.state_dict().items()}
    out[f"model.{P}gemma_expert.lm_head.weight"] = torch.zeros(model.config.vocab_size, model.config.expert.width, dtype=model.dtype)
    return out


def load_state(model: PI05Model, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy checkpoint tensors into `model`, strictly. Dtypes follow the model (fp32 norms stay fp32)."""
    params = model.state_dict()
    seen: dict[str, str] = {}
    for key, tensor in tensors.items():
        name = our_name(key)
        if name is None:
            continue
        if name not in params:
            raise CheckpointError(f"unexpected key in checkpoint: {key!r} (no parameter {name!r} in this config)")
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise CheckpointError(
                f"shape mismatch for {key!r}: checkpoint {tuple(tensor.shape)}, model expects {tuple(params[name].shape)}"
            )
        if name in seen:
            if name == "embed_tokens.weight":  # tied weight stored under both names: they must agree
                if not torch.equal(params[name], tensor.to(params[name].dtype)):
                    raise CheckpointError(f"{key!r} and {seen[name]!r} are tied but differ")
                continue
            raise CheckpointError(f"duplicate key for parameter {name!r}: {seen[name]!r} and {key!r}")
        with torch.no_grad():
            params[name].copy_(tensor.to(params[name].dtype))
        seen[name] = key
    missing = sorted(set(params) - set(seen))
    if missing:
        raise CheckpointError(f"missing key in checkpoint: {_to_checkpoint_key(missing[0])!r} ({len(missing)} missing)")
    model.clear_caches()


def cast_for_inference(model: PI05Model, dtype: torch.dtype) -> PI05Model:
    """Cast to `dtype`, keeping vision embeddings and norms in fp32 as the reference checkpoints store them."""
    model.to(dtype)
    if dtype != torch.float32:
        for name, p in model.named_parameters():
            if any(s in name for s in FP32_PATTERNS):
                p.data = p.data.float()
    model.clear_caches()
    return model
