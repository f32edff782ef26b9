"""Checkpoint conventions: one place that says how a checkpoint wants its inputs (family, cameras, normalisation,
chunk, prompt, tokenizer), resolved before any weight is read. `resolve_conventions` is the entry point; a caller's
`ConventionOverrides` win over what the files say; `report` prints the result (`oxygen-gym inspect`)."""
from .cameras import ALIASES, map_cameras
from .family import FAMILIES, CheckpointGuessWarning, UnsupportedCheckpointError, detect_family
from .overrides import ConventionOverrides
from .resolve import Conventions, checkpoint_root, resolve_conventions

__all__ = [
    "ALIASES",
    "CheckpointGuessWarning",
    "ConventionOverrides",
    "FAMILIES",
    "Conventions",
    "UnsupportedCheckpointError",
    "checkpoint_root",
    "detect_family",
    "map_cameras",
    "resolve_conventions",
]
