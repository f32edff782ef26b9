"""A checkpoint's own execution horizon: how many actions of each chunk its evaluation executes per policy call.

openpi leaves this to the client (`examples/libero/main.py`, `replan_steps=5`) and lerobot to `n_action_steps`
(select_action's queue), so neither checkpoint layout can say "run me every N actions" under the openpi protocol.
Our checkpoints may: a top-level `replan_steps` in config.json (written by `save_pretrained(replan_steps=)`), read
before any weight so an evaluation records it among its result-deciding fields. `--replan` still wins over it.
"""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError

from .declared import declared_value

KEY = "replan_steps"


def declared_replan_steps(name_or_path: str | Path, revision: str | None = None) -> int | None:
    """The checkpoint's `replan_steps`, or None where it declares none (every built-in model, lerobot and openpi
    checkpoints, StarVLA run files). A bad value is a CheckpointError naming the file and the field."""
    found = declared_value(name_or_path, KEY, revision)
    if found is None:
        return None
    root, cfg = found
    value = cfg[KEY]
    returned = cfg.get("n_action_steps")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{root / CONFIG_FILE}: {KEY!r} must be an integer >= 1 (actions executed per policy "
                              f"call), got {value!r}")
    if isinstance(returned, int) and value > returned:
        raise CheckpointError(f"{root / CONFIG_FILE}: {KEY!r} is {value} but the policy returns only "
                              f"n_action_steps={returned} actions per call")
    return value
