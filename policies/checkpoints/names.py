"""Which checkpoint names are worth trying, decided before any work: a built-in model, a shipped trained model, an
existing file or folder, or a Hugging Face hub id (`owner/name`, the only form with a '/' that is not a path). Anything
else is a typo, refused with the built-in names and the closest of them (difflib), before an output folder is made,
a simulator built or a policy loaded: a typo in `--checkpoint` must not cost an evaluation's worth of error records.

Light on purpose (no torch, no numpy): every `oxygen-gym` parser uses `checkpoint_arg` as its `--checkpoint` type,
and `--help` must stay fast (oxygen_gym/cli.py). The names here mirror the family registry (policies/model_io.py
`builtin_names`) and model/trained.py `TRAINED_MODELS`; tests/project/test_cli.py fails when they drift apart.
"""
from __future__ import annotations

import argparse
import difflib
import re
from pathlib import Path

from .family_names import FAMILY_TABLE

# family -> its built-in models with random weights, from the family table (each family registers the same tuple)
RANDOM_WEIGHT_MODELS: dict[str, tuple[str, ...]] = {name: line.builtins for name, line in FAMILY_TABLE.items()}
# trained models shipped inside the package (model/trained.py), loaded like any checkpoint folder
TRAINED_MODEL_NAMES: tuple[str, ...] = ("libero-spatial",)
# an `owner/name` hub id, as model/pi05/loading.py `resolve_checkpoint` accepts it
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def random_weight_model_names() -> tuple[str, ...]:
    return tuple(n for names in RANDOM_WEIGHT_MODELS.values() for n in names)


def builtin_model_names() -> tuple[str, ...]:
    """Every name that needs no file: the shipped trained models first, then the random-weight ones."""
    return TRAINED_MODEL_NAMES + random_weight_model_names()


def checkpoint_name_problem(name: str | Path) -> str | None:
    """None when `name` may be a checkpoint (a built-in name, an existing path, or an owner/name hub id); otherwise
    one line saying why not, with the names that were probably meant and the built-in ones."""
    text = str(name)
    if text in builtin_model_names() or Path(text).expanduser().exists() or HUB_ID.fullmatch(text):
        return None
    why = "no such file or folder" if "/" in text or text.startswith((".", "~")) else \
        "not a built-in model, an existing file or folder, or a Hugging Face hub id (owner/name)"
    close = difflib.get_close_matches(text, builtin_model_names(), n=3, cutoff=0.6) or \
        difflib.get_close_matches(text.lower(), builtin_model_names(), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    return (f"unknown checkpoint {text!r}: {why}{hint} Built-in models: {', '.join(TRAINED_MODEL_NAMES)} (trained); "
            f"{', '.join(random_weight_model_names())} (random weights)")


def check_checkpoint_name(name: str | Path) -> str | Path:
    """`name` unchanged, or a ValueError with `checkpoint_name_problem`'s line."""
    problem = checkpoint_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


def checkpoint_arg(text: str) -> str:
    """`check_checkpoint_name` as an argparse type: a typo is refused while the arguments are parsed, as one line
    naming the flag, exit status 2, before the command does anything."""
    problem = checkpoint_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text
