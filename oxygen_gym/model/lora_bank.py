"""LoRA adapters on a model's language path, many at once, S-LoRA / Punica style.

Every adapter's A and B of one projection are stacked in one tensor (`[slots, rank, in]`, `[slots, out, rank]`,
slot 0 all zeros = the base model), and a forward pass routes each batch row to a slot. A projection then costs the
base matmul once for the whole batch plus a gathered low-rank update per row (`bmm(bmm(x, A[rows]^T), B[rows]^T) *
scale[rows]`: Punica's BGMV shrink/expand), never one pass per adapter. A row routed to slot 0 adds exact zeros, so
its output is bit-identical to the base model's.

Routing is off unless a stage turns it on (`routed`): the families' `extend` / `decode_step` do, for the rows of a
task prompt and its generated tokens; the frame's prefill and the action heads never do, so they compute exactly
the base model whatever adapters are loaded. `layers.linear` applies a projection's `LoraTarget` when it has one.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

# The projections of a decoder layer an adapter may target per task (Gemma's and Qwen3's share these names).
LANGUAGE_PROJECTIONS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
)
TARGET_ATTR = "lora_target"  # where a projection's LoraTarget lives (layers.linear reads it)


class AdapterError(ValueError):
    """An adapter that cannot be used as asked; the message names the adapter and the module."""


@dataclass
class LoraWeights:
    """One adapter over modules of a model, by our module names: `A [r, in]`, `B [out, r]` and the scale of each
    (alpha / r, or alpha / sqrt(r) with rsLoRA; PEFT's rank and alpha patterns give modules their own)."""

    modules: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scales: dict[str, float]

    @property
    def rank(self) -> int:
        return max((a.shape[0] for a, _ in self.modules.values()), default=0)

    def delta(self, name: str) -> torch.Tensor:
        """The weight update `(B @ A) * scale` of one module (what merging adds; PEFT's `get_delta_weight`)."""
        a, b = self.modules[name]
        return (b @ a) * self.scales[name]


def language_modules(model: nn.Module) -> dict[str, nn.Linear]:
    """The projections a per-task adapter may target: `LANGUAGE_PROJECTIONS` of every layer under the model's
    `language_layers` (the backbone that writes and continues the KV, not its vision tower or action expert)."""
    prefix = model.language_layers
    pattern = re.compile(rf"^{re.escape(prefix)}\.\d+\.({'|'.join(map(re.escape, LANGUAGE_PROJECTIONS))})$")
    return {n: m for n, m in model.named_modules() if pattern.match(n) and isinstance(m, nn.Linear)}


class LoraTarget:
    """The stacked adapters of one projection. `A`/`B` grow (new tensors) when a bank outgrows its slots or rank."""

    def __init__(self, bank: "LoraBank", layer: nn.Linear) -> None:
        self.bank = bank
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.A = torch.zeros(0)
        self.B = torch.zeros(0)
        self.scale = torch.zeros(0)
        self.resize(bank.num_slots, bank.max_rank)

    def resize(self, slots: int, rank: int) -> None:
        dev, dt = self.bank.device, self.bank.dtype
        a = torch.zeros(slots, rank, self.in_features, device=dev, dtype=dt)
        b = torch.zeros(slots, self.out_features, rank, device=dev, dtype=dt)
        s = torch.zeros(slots, device=dev, dtype=dt)
        if self.A.numel():
            n, r = self.A.shape[0], self.A.shape[1]
            a[:n, :r], b[:n, :, :r], s[:n] = self.A, self.B, self.scale
        self.A, self.B, self.scale = a, b, s

    def write(self, slot: int, a: torch.Tensor | None, b: torch.Tensor | None, scale: float) -> None:
        """Put one adapter's A/B in `slot` (None: the adapter does not target this module: zeros)."""
        with torch.no_grad():
            self.A[slot].zero_()
            self.B[slot].zero_()
            self.scale[slot] = 0.0
            if a is not None:
                r = a.shape[0]
                self.A[slot, :r].copy_(a)
                self.B[slot, :, :r].copy_(b)
                self.scale[slot] = scale

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y` (the base output for `x [B, ..., in]`) plus each row's own adapter update."""
        rows = self.bank.rows
        if rows is None:
            return y
        b = x.shape[0]
        xs = x.reshape(b, -1, x.shape[-1]).to(self.A.dtype)
        h = torch.bmm(xs, self.A[rows].transpose(1, 2))  # shrink: [B, T, r]
        d = torch.bmm(h, self.B[rows].transpose(1, 2)) * self.scale[rows][:, None, None]  # expand: [B, T, out]
        return y + d.reshape(y.shape).to(y.dtype)


class LoraBank:
    """Named adapters of one model, in slots 1..n of every targeted projection's stacked tensors (slot 0: base).

    `version` changes whenever the stacked tensors are reallocated (more slots or a larger rank), so a CUDA graph
    captured over the old ones is known to be stale; loading into a free slot of fitting rank writes in place."""

    def __init__(self, model: nn.Module, *, slots: int = 4, max_rank: int = 8) -> None:
        self.model = model
        self.device, self.dtype = model.device, model.dtype
        self.num_slots = slots + 1
        self.max_rank = max_rank
        self.names: dict[str, int] = {}
        self.adapters: dict[str, LoraWeights] = {}
        self.targets: dict[str, LoraTarget] = {}
        self.rows: torch.Tensor | None = None
        self.version = 0
        self._modules = language_modules(model)

    # ---------------------------------------------------------------- loading
    def load(self, name: str, weights: LoraWeights) -> int:
        """Add adapter `name` (its modules must be language projections of this model) and return its slot."""
        if name in self.names:
            raise AdapterError(f"adapter {name!r} is already loaded; unload it first")
        for module, (a, b) in weights.modules.items():
            layer = self._modules.get(module)
            if layer is None:
                raise AdapterError(
                    f"adapter {name!r}: module {module!r} is not a language projection of this model's backbone "
                    f"({self.model.language_layers}.N.{{{', '.join(LANGUAGE_PROJECTIONS)}}}); a whole-model adapter "
                    "is merged into the weights instead (merge_adapter=)"
                )
            check_shapes(name, module, layer, a, b)
        used = set(self.names.values())
        slot = next((s for s in range(1, self.num_slots) if s not in used), None)
        grow_slots = self.num_slots if slot is not None else self.num_slots * 2 - 1
        grow_rank = max(self.max_rank, weights.rank)
        if slot is None:
            slot = self.num_slots
        if (grow_slots, grow_rank) != (self.num_slots, self.max_rank):
            self.num_slots, self.max_rank = grow_slots, grow_rank
            for t in self.targets.values():
                t.resize(self.num_slots, self.max_rank)
            self.version += 1
        for module in weights.modules:
            if module not in self.targets:
                self.targets[module] = LoraTarget(self, self._modules[module])
                setattr(self._modules[module], TARGET_ATTR, self.targets[module])
                self.version += 1
        for module, target in self.targets.items():
            a, b = weights.modules.get(module, (None, None))
            target.write(slot, a, b, weights.scales.get(module, 0.0))
        self.names[name] = slot
        self.adapters[name] = weights
        return slot

    def unload(self, name: str) -> None:
        slot = self.index(name)
        for target in self.targets.values():
            target.write(slot, None, None, 0.0)
        del self.names[name], self.adapters[name]

    def index(self, name: str | None) -> int:
        """The slot of adapter `name` (None: 0, the base model)."""
        if name is None:
            return 0
        if name not in self.names:
            raise AdapterError(f"adapter {name!r} is not loaded; loaded: {sorted(self.names)}")
        return self.names[name]

    # ---------------------------------------------------------------- routing
    @contextmanager
    def routed(self, rows: torch.Tensor) -> Iterator[None]:
        """Route row b of every projection call inside to slot `rows[b]`."""
        previous, self.rows = self.rows, rows.to(self.device)
        try:
            yield
        finally:
            self.rows = previous


def adapter_routing(model: nn.Module, adapters: torch.Tensor | None):
    """The context a family's `extend` / `decode_step` runs its layers in: per-row adapters, or nothing."""
    if adapters is None:
        return nullcontext()
    bank = getattr(model, "lora", None)
    if bank is None:
        raise AdapterError("adapters were given for rows but this model has no adapters loaded")
    return bank.routed(adapters)


def bank_of(model: nn.Module) -> LoraBank:
    """The model's adapter bank, made on first use."""
    bank = getattr(model, "lora", None)
    if bank is None:
        bank = LoraBank(model)
        model.lora = bank
    return bank


def check_shapes(adapter: str, module: str, layer: nn.Module, a: torch.Tensor, b: torch.Tensor) -> None:
    if not isinstance(layer, nn.Linear):
        raise AdapterError(f"adapter {adapter!r}: module {module!r} is a {type(layer).__name__}; only Linear layers take LoRA")
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
        raise AdapterError(f"adapter {adapter!r}: module {module!r} has lora_A {tuple(a.shape)} and lora_B "
                           f"{tuple(b.shape)}; expected [r, in] and [out, r]")
    if a.shape[1] != layer.in_features or b.shape[0] != layer.out_features:
        raise AdapterError(
            f"adapter {adapter!r}: module {module!r} is Linear({layer.in_features} -> {layer.out_features}) but the "
            f"adapter's lora_A is {tuple(a.shape)} and lora_B {tuple(b.shape)}"
        )


def merge_into(model: nn.Module, weights: LoraWeights, adapter: str = "merged") -> dict[str, int]:
    """Add every module's `(B @ A) * scale` to its weight (PEFT's `merge_and_unload`), for adapters over the whole
    model (vision tower, action expert): the prefill then differs from the base, so such an adapter cannot be per
    task. Returns modules merged per part (the first name component), for `inspect`."""
    modules = dict(model.named_modules())
    counts: dict[str, int] = {}
    for name, (a, b) in weights.modules.items():
        layer = modules.get(name)
        if layer is None:
            raise AdapterError(f"adapter {adapter!r}: module {name!r} does not exist in this model")
        check_shapes(adapter, name, layer, a, b)
        with torch.no_grad():
            w = layer.weight
            w.copy_((w.float() + weights.delta(name).float().to(w.device)).to(w.dtype) if w.dtype != torch.float32
                    else w + weights.delta(name).to(w.device))
        part = name.split(".")[0]
        counts[part] = counts.get(part, 0) + 1
    clear = getattr(model, "clear_caches", None)
    if clear:
        clear()
    return counts


def merged_copy(model: nn.Module, weights: Mapping[str, tuple[torch.Tensor, torch.Tensor]], scales: Mapping[str, float]):
    """A deep copy of `model` with `weights` merged (tests and the decode-cost bench compare against it)."""
    import copy

    clone = copy.deepcopy(model)
    clone.lora = None
    for layer in clone.modules():
        layer.__dict__.pop(TARGET_ATTR, None)
    merge_into(clone, LoraWeights(dict(weights), dict(scales)))
    return clone
