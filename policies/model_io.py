"""Finding a model family: `io_for` finds a model's IO by its class, `checkpoint_family` a folder's family by its
files, `family_of_builtin` a built-in name's, so the policy holds no family-specific branch. The families register
themselves (policies/family_api.py) when their modules are imported, which `registered_families` does here."""
from __future__ import annotations

import importlib
from pathlib import Path

from .checkpoints.family_names import FAMILY_TABLE
from .family_api import REGISTERED, ModelIO, PolicyFamily, register_family  # noqa: F401 - importable from here too


def registered_families() -> dict[str, PolicyFamily]:
    """Every family of the family table (checkpoints/family_names.py), each registered by importing its module, in
    the table's order; then any family registered outside the table (a test's own)."""
    for name, line in FAMILY_TABLE.items():
        if name not in REGISTERED:
            importlib.import_module(line.module)
        family = REGISTERED.get(name)
        if family is None or (tuple(family.checkpoint_families), tuple(family.builtins)) != line[1:]:
            raise RuntimeError(f"policy families: {line.module} must register family {name!r} with "
                               f"checkpoint_families={line.checkpoint_families} and builtins={line.builtins} (the "
                               "family table, policies/checkpoints/family_names.py)")
    return {**{name: REGISTERED[name] for name in FAMILY_TABLE}, **REGISTERED}


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
