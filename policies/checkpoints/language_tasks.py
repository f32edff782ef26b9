"""A checkpoint's own language tasks: config.json `language_tasks`, the prompts its language path was trained to
answer (written by `save_pretrained(language_tasks=)`, `oxygen-gym train`'s export; the rule:
oxygen_gym/model/language_task_rule.py).

A trained model answers only the prompt it was trained on, with about the tokens it was trained to produce, so a
generic "Describe what the robot is doing." with 30 tokens is the wrong question for it.
`MultiTaskPolicy.declared_tasks` holds these; `oxygen-gym serve --task narrate` uses the declared prompt and token
cap unless told otherwise. A task answered through a per-task LoRA adapter names it (`"adapter": "memory"`), and that
adapter must be the checkpoint's own `adapters/<name>/`; using the task needs `from_pretrained(..., adapters=[name])`.
"""
from __future__ import annotations

from pathlib import Path

from oxygen_gym.model.language_task_rule import check_language_tasks
from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError

from ..language import LanguageTask
from ..task_adapters import ADAPTERS_DIR
from .declared import declared_value

KEY = "language_tasks"


def declared_language_tasks(name_or_path: str | Path, revision: str | None = None) -> tuple[LanguageTask, ...]:
    """The checkpoint's declared language tasks, () where it declares none (every built-in model, lerobot and openpi
    checkpoints). A bad declaration, or an adapter task whose adapter folder is missing, is a CheckpointError naming
    the file and the field."""
    found = declared_value(name_or_path, KEY, revision)
    if found is None:
        return ()
    root, cfg = found
    field = f"{root / CONFIG_FILE}: {KEY!r}"
    try:
        tasks = check_language_tasks(cfg[KEY], field)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    for i, task in enumerate(tasks):
        adapter = task.get("adapter")
        if adapter is not None and not (root / ADAPTERS_DIR / adapter).is_dir():
            raise CheckpointError(f"{field}[{i}] ({task['name']!r}) is answered through adapter {adapter!r}, but "
                                  f"{root / ADAPTERS_DIR / adapter} is not there")
    return tuple(LanguageTask(**task) for task in tasks)
