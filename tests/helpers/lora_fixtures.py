"""Random LoRA adapters written as PEFT folders, and a request decoded alone through a merged model: the reference
the per-task adapter tests compare the engine's batched decoding against."""
from __future__ import annotations

from pathlib import Path

import torch

from oxygen_gym.model.lora_bank import LoraWeights, language_modules
from oxygen_gym.model.peft_adapter import write_peft


def random_lora(model, projections: tuple[str, ...], rank: int, alpha: float, seed: int, gain: float = 1.0) -> LoraWeights:
    """A (non-zero A and B, unlike PEFT's init) on every layer's `projections`, scale alpha / rank."""
    gen = torch.Generator().manual_seed(seed)
    modules = {}
    for name, layer in language_modules(model).items():
        if any(name.endswith("." + p) for p in projections):
            a = torch.randn(rank, layer.in_features, generator=gen) / layer.in_features ** 0.5
            b = torch.randn(layer.out_features, rank, generator=gen) * gain / rank ** 0.5
            modules[name] = (a, b)
    return LoraWeights(modules, {m: alpha / rank for m in modules})


def write_random_adapter(folder: Path, model, projections, rank: int, alpha: float, seed: int, gain: float = 1.0):
    """(folder, the weights) of a random adapter in PEFT's format."""
    w = random_lora(model, projections, rank, alpha, seed, gain)
    write_peft(folder, w, rank=rank, alpha=alpha, target_modules=sorted({p.split(".")[-1] for p in projections}))
    return folder, w


def merged_reference(model, weights: LoraWeights | None):
    """A copy of `model` with `weights` merged by hand: W + (alpha / r) * B @ A, scale recomputed from the tensors'
    rank, not read from the adapter code."""
    import copy

    clone = copy.deepcopy(model)
    clone.lora = None
    for m in clone.modules():
        m.__dict__.pop("lora_target", None)
    if weights is not None:
        mods = dict(clone.named_modules())
        with torch.no_grad():
            for name, (a, b) in weights.modules.items():
                mods[name].weight += weights.scales[name] * (b @ a)
    return clone


@torch.inference_mode()
def decode_alone(base, merged, prefix_inputs, prompt_ids: list[int], max_new_tokens: int, eos: int, capacity: int):
    """Greedy tokens of one request: the base model prefills, `merged` writes the prompt and decodes."""
    cache = base.new_cache(1, capacity)
    state = base.prefill_frame(cache, prefix_inputs)
    index, pos = state.host_lengths[0], state.host_positions[0]
    head = prompt_ids[:-1]
    if head:
        merged.extend(cache, torch.tensor([head]), torch.tensor([index]), torch.tensor([pos]))
    index, pos, token, out = index + len(head), pos + len(head), prompt_ids[-1], []
    for _ in range(max_new_tokens):
        logits = merged.decode_step(cache, torch.tensor([token]), torch.tensor([pos]), torch.tensor([index]))
        token = int(logits.argmax(-1))
        out.append(token)
        index, pos = index + 1, pos + 1
        if token == eos:
            break
    return out, cache, state
