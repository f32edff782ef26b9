"""A value a checkpoint declares for its own evaluation, top-level in config.json (our family's `replan_steps`,
`noise_scale`): read before any weight, so an evaluation can record it among its result-deciding fields."""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.pi05.loading import CheckpointNotFoundError, read_config_json


def declared_value(name_or_path: str | Path, key: str, revision: str | None = None) -> tuple[Path, dict] | None:
    """(checkpoint folder, its config.json) where it declares `key`, else None (every built-in model's name, a
    folder without config.json or without the key). A folder or hub id that is not there is the same
    CheckpointNotFoundError loading the policy would give."""
    from .resolve import checkpoint_root

    try:
        root = checkpoint_root(name_or_path, revision)
    except CheckpointNotFoundError:
        if "/" in str(name_or_path):
            raise
        return None  # a built-in model's name ("tiny", "starvla-small", ...): no files, nothing declared
    if not root.is_dir():
        return None
    cfg = read_config_json(root)
    return (root, cfg) if key in cfg else None
