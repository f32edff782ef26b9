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


def select_scenes(demos: list[Demo], scenes: Sequence[int], flag: str) -> list[Demo]:
    """The demos of `scenes` (every variant of each); a scene the data lacks is an error naming `flag`, the option
    the user gave them with."""
    wanted = {int(s) for s in scenes}
    present = {scene_index(d) for d in demos}
    missing = sorted(wanted - present)
    if missing:
        raise ValueError(f"{flag}: scenes {missing} are not in the data (it has {len(present)} scenes, "
                         f"{min(present)}-{max(present)})")
    return [d for d in demos if scene_index(d) in wanted]


def split_by_scene(demos: list[Demo], val_scenes: Sequence[int]) -> tuple[list[Demo], list[Demo]]:
    """(train, validation): the demos of the scenes `val_scenes` go to validation, all others to training."""
    if not val_scenes:
        return demos, []
    val = select_scenes(demos, val_scenes, "--val-scenes")
    if len(val) == len(demos):
        raise ValueError("--val-scenes: every scene of the data would be held out; keep some to train on")
    held = {int(s) for s in val_scenes}
    return [d for d in demos if scene_index(d) not in held], val
