"""Checkpoint conventions: one place that says how a checkpoint wants its inputs (family, cameras, normalisation,
chunk, prompt, tokenizer), resolved before any weight is read. `resolve_conventions` is the entry point; a caller's
`ConventionOverrides` win over what the files say; `report` prints the result (`oxygen-gym inspect`).

The names below load on first use, so the command-line parsers can import `overrides` and `names` without the model
code (oxygen_gym/cli.py)."""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ALIASES": "cameras", "map_cameras": "cameras",
    "FAMILIES": "family", "CheckpointGuessWarning": "family", "UnsupportedCheckpointError": "family",
    "detect_family": "family",
    "ConventionOverrides": "overrides",
    "Conventions": "resolve", "checkpoint_root": "resolve", "resolve_conventions": "resolve",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
