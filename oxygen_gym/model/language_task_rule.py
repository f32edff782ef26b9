"""The rule for a checkpoint's declared language tasks: config.json `language_tasks`, the prompts (and token caps) the
model was trained to answer, e.g. `[{"name": "narrate", "prompt": "What is the robot doing?", "max_new_tokens": 12}]`.

It lives beside the model so `save_pretrained` (which writes the declaration) and the policies
(policies/checkpoints/language_tasks.py, which read it into `LanguageTask`s) check one rule. A task answered only
through a per-task LoRA adapter states it (`"adapter": "memory"`: the checkpoint's `adapters/memory/`).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

REQUIRED = ("name", "prompt", "max_new_tokens")
DEFAULTS = {"every": 1, "temperature": 0.0, "adapter": None}  # LanguageTask's; written only where they differ
FIELDS = (*REQUIRED, *DEFAULTS)


def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an int >= 1, got {value!r}")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def check_language_tasks(value: object, field: str = "language_tasks") -> list[dict]:
    """`value` (a list of maps with `name`, `prompt`, `max_new_tokens` and optionally `adapter`, `every`,
    `temperature`, or of `LanguageTask`s) as the plain maps config.json holds, or a ValueError naming `field`, the
    entry and what was expected."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{field} must be a list of language tasks, each {{'name', 'prompt', 'max_new_tokens'"
                         f"[, 'adapter', 'every', 'temperature']}}, got {value!r}")
    out: list[dict] = []
    for i, task in enumerate(value):
        where = f"{field}[{i}]"
        if dataclasses.is_dataclass(task) and not isinstance(task, type):
            task = dataclasses.asdict(task)  # a LanguageTask
        if not isinstance(task, Mapping):
            raise ValueError(f"{where} must be a map with {', '.join(REQUIRED)}, got {task!r}")
        unknown = sorted(str(k) for k in task if k not in FIELDS)
        if unknown:
            raise ValueError(f"{where} has unknown field(s) {unknown}; expected {list(FIELDS)}")
        missing = [k for k in REQUIRED if k not in task]
        if missing:
            raise ValueError(f"{where} is missing {missing}")
        entry = {"name": _text(task["name"], f"{where}.name"), "prompt": _text(task["prompt"], f"{where}.prompt"),
                 "max_new_tokens": _positive_int(task["max_new_tokens"], f"{where}.max_new_tokens")}
        every = _positive_int(task.get("every", 1), f"{where}.every")
        temperature = task.get("temperature", 0.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
                math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"{where}.temperature must be a number >= 0, got {temperature!r}")
        adapter = task.get("adapter")
        if adapter is not None:
            adapter = _text(adapter, f"{where}.adapter")
        for key, v in (("every", every), ("temperature", float(temperature)), ("adapter", adapter)):
            if v != DEFAULTS[key]:
                entry[key] = v
        out.append(entry)
    names = [t["name"] for t in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{field}: task names must be unique, got {names}")
    return out
