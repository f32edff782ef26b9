"""Scripted demonstrations: `oxygen-gym collect libero` runs a privileged-state expert and writes successful
episodes, with a subtask label per step, in LIBERO's own HDF5 demo layout (libero_hdf5.py). Two variants keep
failures too, since the state expert labels every state they visit: DAgger rollouts (dagger.py, a trained policy
drives) and perturbed demonstrations (perturb.py, pushes and gripper flips the expert recovers from).

The names below load on first use, so `oxygen-gym collect --help` does not import the simulator (oxygen_gym/cli.py)."""
from __future__ import annotations

import importlib

_EXPORTS = {"Demo": "libero_hdf5", "read_demos": "libero_hdf5", "write_demo": "libero_hdf5",
            "CollectConfig": "collector", "EpisodeKey": "collector", "collect": "collector"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
