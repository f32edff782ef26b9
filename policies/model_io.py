"""What a policy needs of a model family besides the engine seam (engine/model_api.py): how a checked observation
becomes the family's prefix bundle, how a language task's prompt becomes the tokens that continue that prefix, and
the tokenizer that decodes the text. Each family registers one `PolicyFamily` (its IO and its built-in models);
`io_for` finds a model's by its class, so the policy holds no family-specific branch."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


class ModelIO(ABC):
    """A family's observation and text conventions, bound to one model, tokenizer, robot and its normalisers."""

    tokenizer: Any  # encode(text) -> ids, decode(ids) -> str, eos_id

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
    extra MultiTaskPolicy keyword arguments)."""

    name: str
    model_class: type
    make_io: Callable[..., ModelIO]
    builtins: tuple[str, ...] = ()
    build_builtin: Callable[..., tuple[Any, Any, dict]] | None = None


FAMILIES: dict[str, PolicyFamily] = {}


def register_family(family: PolicyFamily) -> None:
    taken = {n: f.name for f in FAMILIES.values() for n in f.builtins if f.name != family.name}
    clash = sorted(set(family.builtins) & set(taken))
    if clash:
        raise ValueError(f"built-in model name(s) {clash} are already {taken[clash[0]]!r}'s")
    FAMILIES[family.name] = family


def builtin_names() -> list[str]:
    """Every built-in model name of every registered family."""
    return [n for f in FAMILIES.values() for n in f.builtins]


def family_of_builtin(name: str) -> PolicyFamily:
    for f in FAMILIES.values():
        if name in f.builtins:
            return f
    raise ValueError(f"unknown built-in model {name!r}; expected one of {builtin_names()}")


def io_for(model, tokenizer, **kwargs) -> ModelIO:
    """The IO of `model`'s family (the nearest registered base class)."""
    by_class = {f.model_class: f for f in FAMILIES.values()}
    for cls in type(model).__mro__:
        if cls in by_class:
            return by_class[cls].make_io(model, tokenizer, **kwargs)
    raise ValueError(f"model: no policy family is registered for {type(model).__name__} (policies/model_io.py)")
