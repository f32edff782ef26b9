"""Policies: MultiTaskPolicy and its language tasks, robot transforms and execution modes.

The names below load on first use, so a light submodule (a command's parser, `checkpoints.names`, `task_args`) can be
imported without torch: `oxygen-gym <cmd> --help` stays fast (oxygen_gym/cli.py)."""
from __future__ import annotations

import importlib

_EXPORTS = {
    "LanguageTask": "language", "LanguageUpdate": "language", "MultiTaskPolicy": "multitask", "ROBOTS": "robots",
    "RobotSpec": "robots", "RTCConfig": "oxygen_gym.engine.rtc",
}
__all__ = ["LanguageTask", "LanguageUpdate", "MultiTaskPolicy", "ROBOTS", "RobotSpec", "RTCConfig"]


def __getattr__(name: str):
    if name in _EXPORTS:
        module = _EXPORTS[name]
        return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
