"""A checkpoint's own execution horizon: how many actions of each chunk its evaluation executes per policy call.

openpi leaves this to the client (`examples/libero/main.py`, `replan_steps=5`) and lerobot to `n_action_steps`
(select_action's queue), so neither checkpoint layout can say "run me every N actions" under the openpi protocol.
Our checkpoints may: a top-level `replan_steps` in config.json (written by `save_pretrained(replan_steps=)`), read
before any weight so an evaluation records it among its result-deciding fields. `--replan` still wins over it.
"""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError, CheckpointNotFoundError, read_config_json

KEY = "replan_steps"


def declared_replan_steps(name_or_path: str | Path, revision: str | None = None) -> int | None:
    """The checkpoint's `replan_steps`, or None where it declares none (every built-in model, lerobot and openpi
    checkpoints, StarVLA run files). A bad value is a CheckpointError naming the file and the field."""
    from .resolve import checkpoint_root

    try:
        root = checkpoint_root(name_or_path, revision)
    except CheckpointNotFoundError:
        if "/" in str(name_or_path):
            raise  # a folder or hub id that is not there: the same error loading the policy would give
        return None  # a built-in model's name ("tiny", "starvla-small", ...): no files, nothing declared
    if not root.is_dir():
        return None
    cfg = read_config_json(root)
    if KEY not in cfg:
        return None
    value = cfg[KEY]
    returned = cfg.get("n_action_steps")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{root / CONFIG_FILE}: {KEY!r} must be an integer >= 1 (actions executed per policy "
                              f"call), got {value!r}")
    if isinstance(returned, int) and value > returned:
        raise CheckpointError(f"{root / CONFIG_FILE}: {KEY!r} is {value} but the policy returns only "
                              f"n_action_steps={returned} actions per call")
    return value
