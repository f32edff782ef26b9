"""Which demonstrations a training run holds out for choosing checkpoints: whole scenes (every variant of them),
never single frames (frames of one episode are near-duplicates, so a frame-level split would measure memorisation).
The scenes are named explicitly, so a run's split does not move when more scenes are collected later."""
from __future__ import annotations

from collections.abc import Sequence

from .collect.libero_hdf5 import Demo


def scene_index(demo: Demo) -> int:
    """The demo's fresh scene index, or its official init state when it was collected on one."""
    for key in ("scene", "init_state"):
        if key in demo.attrs:
            return int(demo.attrs[key])
    raise ValueError(f"demo {demo.attrs.get('episode', '?')}: records neither 'scene' nor 'init_state'")


def split_by_scene(demos: list[Demo], val_scenes: Sequence[int]) -> tuple[list[Demo], list[Demo]]:
    """(train, validation): the demos of the scenes `val_scenes` go to validation, all others to training."""
    held = {int(s) for s in val_scenes}
    if not held:
        return demos, []
    present = {scene_index(d) for d in demos}
    missing = sorted(held - present)
    if missing:
        raise ValueError(f"--val-scenes: scenes {missing} are not in the data (it has {len(present)} scenes, "
                         f"{min(present)}-{max(present)})")
    if present <= held:
        raise ValueError("--val-scenes: every scene of the data would be held out; keep some to train on")
    return [d for d in demos if scene_index(d) not in held], [d for d in demos if scene_index(d) in held]
