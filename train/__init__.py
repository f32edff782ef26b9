"""Training (`oxygen-gym train`): pi0.5's objective (oxygen_gym.model.pi05.training) on LIBERO HDF5 demonstrations or
a LeRobotDataset (lerobot_format.py), resumable; `collect/` records the scripted demonstrations it trains on (`oxygen-gym collect`).

The names below load on first use, so `oxygen-gym collect` (and its spawned workers) never import the trainer."""
from __future__ import annotations

_EXPORTS = {"DemoDataset": "dataset", "compute_norm_stats": "dataset", "TrainConfig": "trainer", "train": "trainer"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
