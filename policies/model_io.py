"""What a policy needs of a model family besides the engine seam (core/model_contract.py): how a checked observation
becomes the family's prefix bundle, how a language task's prompt becomes the tokens that continue that prefix, and
the tokenizer that decodes the text. Each family registers one `PolicyFamily` (its IO, its built-in models, and how it
tells and loads its checkpoint folders); `io_for` finds a model's by its class and `checkpoint_family` a folder's by
its files, so the policy holds no family-specific branch."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class ModelIO(ABC):
    """A family's observation and text conventions, bound to one model, tokenizer, robot and its normalisers."""

    tokenizer: Any  # encode(text) -> ids, decode(ids) -> str, eos_id
    camera_slots: dict[str, str]  # robot camera -> the model's image slot or view (the family's default if not given)

    @abstractmethod
    def prefix_inputs(self, images: dict[str, np.ndarray], state: np.ndarray, prompt: str) -> Any:
        """The model's prefix bundle (batch 1, on the model's device) for one checked observation in robot units."""

    @abstractmethod
    def task_prompt_ids(self, prompt: str) -> list[int]:
        """Token ids of a language task's prompt as it continues the shared prefix (the last one is fed by the first
        decode step)."""

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_id)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


@dataclass(frozen=True)
class PolicyFamily:
    """One model family as the policy layer sees it: its model class, how to bind its IO, and its built-in
    random-weight models. `build_builtin(name, robot, device, dtype, overrides, seed)` returns (model, tokenizer,
    extra MultiTaskPolicy keyword arguments).

    Checkpoint folders: `checkpoint_families` are the names `family=` accepts for this family's folders;
    `detects(root)` says from the files alone whether a folder is this family's (None: the family takes every folder
    no other family detects: pi0.5, whose own sub-families are told apart by its resolver); `load(root, robot,
    overrides, device, dtype)` returns (model, tokenizer, extra MultiTaskPolicy keyword arguments, conventions with
    `.warnings`); `inspect(root, robot, overrides, prompt)` returns the `oxygen-gym inspect` text without loading
    weights."""

    name: str
    model_class: type
    make_io: Callable[..., ModelIO]
    builtins: tuple[str, ...] = ()
    build_builtin: Callable[..., tuple[Any, Any, dict]] | None = None
    checkpoint_families: tuple[str, ...] = ()
    detects: Callable[[Path], bool] | None = None
    load: Callable[..., tuple[Any, Any, dict, Any]] | None = None
    inspect: Callable[..., str] | None = None


FAMILIES: dict[str, PolicyFamily] = {}


def register_family(family: PolicyFamily) -> None:
    taken = {n: f.name for f in FAMILIES.values() for n in f.builtins if f.name != family.name}
    clash = sorted(set(family.builtins) & set(taken))
    if clash:
        raise ValueError(f"built-in model name(s) {clash} are already {taken[clash[0]]!r}'s")
    FAMILIES[family.name] = family


def registered_families() -> dict[str, PolicyFamily]:
    """Every family (each family's module registers it on import: import them here, so a caller that only needs the
    registry, such as the override checks, sees all of them)."""
    from . import pi05_io, starvla_io, xr0_io  # noqa: F401

    return FAMILIES


def checkpoint_family_names() -> tuple[str, ...]:
    """Every name `family=` accepts, over all families."""
    return tuple(n for f in registered_families().values() for n in f.checkpoint_families)


def checkpoint_family(root: Path, family: str | None = None) -> PolicyFamily:
    """The family that loads checkpoint folder `root`: the one whose `checkpoint_families` holds `family` when it is
    given, else the first whose `detects(root)` is true, else the one family that takes every other folder."""
    families = [f for f in registered_families().values() if f.load is not None]
    if family is not None:
        for f in families:
            if family in f.checkpoint_families:
                return f
        raise ValueError(f"family must be one of {checkpoint_family_names()}, got {family!r}")
    for f in families:
        if f.detects is not None and f.detects(root):
            return f
    fallback = [f for f in families if f.detects is None]
    if len(fallback) != 1:
        raise RuntimeError(f"policy families: exactly one may take undetected folders, found {[f.name for f in fallback]}")
    return fallback[0]


def builtin_names() -> list[str]:
    """Every built-in model name of every registered family."""
    return [n for f in registered_families().values() for n in f.builtins]


def family_of_builtin(name: str) -> PolicyFamily:
    for f in registered_families().values():
        if name in f.builtins:
            return f
    raise ValueError(f"unknown built-in model {name!r}; expected one of {builtin_names()}")


def io_for(model, tokenizer, **kwargs) -> ModelIO:
    """The IO of `model`'s family (the nearest registered base class)."""
    by_class = {f.model_class: f for f in registered_families().values()}
    for cls in type(model).__mro__:
        if cls in by_class:
            return by_class[cls].make_io(model, tokenizer, **kwargs)
    raise ValueError(f"model: no policy family is registered for {type(model).__name__} (policies/model_io.py)")
