"""The types a model family gives the policy layer (its IO and its `PolicyFamily` record) and the table they are
registered in. A leaf: each family's module imports it to register itself, and policies/model_io.py (the lookups)
imports the families, so no family imports the registry's lookups and the registry never imports back."""
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


REGISTERED: dict[str, PolicyFamily] = {}


def register_family(family: PolicyFamily) -> None:
    taken = {n: f.name for f in REGISTERED.values() for n in f.builtins if f.name != family.name}
    clash = sorted(set(family.builtins) & set(taken))
    if clash:
        raise ValueError(f"built-in model name(s) {clash} are already {taken[clash[0]]!r}'s")
    REGISTERED[family.name] = family
