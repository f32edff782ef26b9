"""Scripted demonstrations: `oxygen-gym collect libero` runs a privileged-state expert and writes successful
episodes, with a subtask label per step, in LIBERO's own HDF5 demo layout (libero_hdf5.py). Two variants keep
failures too, since the state expert labels every state they visit: DAgger rollouts (dagger.py, a trained policy
drives) and perturbed demonstrations (perturb.py, pushes and gripper flips the expert recovers from)."""
from .libero_hdf5 import Demo, read_demos, write_demo
from .collector import CollectConfig, EpisodeKey, collect

__all__ = ["CollectConfig", "Demo", "EpisodeKey", "collect", "read_demos", "write_demo"]
