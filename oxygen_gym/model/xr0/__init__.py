"""Xiaomi-Robotics-0: a Qwen3-VL backbone with a DiT action expert reading the KV of its last layers."""
from .action_expert import XR0ActionExpert
from .xr0_checkpoint import CheckpointKeyError, XR0Checkpoint, load_xr0_checkpoint, save_xr0_checkpoint, split_state
from .xr0_config import DiTDims, XR0Config
from .xr0_stats import XR0Stats, load_stats, stats_from_preprocessor

__all__ = [
    "CheckpointKeyError", "DiTDims", "XR0ActionExpert", "XR0Checkpoint", "XR0Config", "XR0Stats", "load_stats",
    "load_xr0_checkpoint", "save_xr0_checkpoint", "split_state", "stats_from_preprocessor",
]
