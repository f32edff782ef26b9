"""Robot camera -> checkpoint image slot, by the names each family gives the same camera.

openpi's policies (`libero_policy.py`, `droid_policy.py`, `aloha_policy.py`) feed `base_0_rgb`, `left_wrist_0_rgb`,
`right_wrist_0_rgb`; lerobot checkpoints keep their dataset's feature names (`observation.images.image` /
`image2` for LIBERO, lerobot `envs/libero.py`), plus `empty_camera_N` placeholders that are never fed (lerobot
`configuration_pi05.validate_features`). A slot no camera feeds is masked, as the references mask it.
"""
from __future__ import annotations

import re

from ..robots import MODEL_SLOTS, ROBOTS, RobotSpec

IMAGE_PREFIX = "observation.images."
EMPTY_CAMERA = re.compile(r"^empty_camera_\d+$")

# robot -> camera -> names a checkpoint may give it (after the robot's own openpi slot, which always comes first);
# each robot's file holds its own (`RobotSpec.checkpoint_aliases`, policies/robots/<robot>_robot.py)
ALIASES: dict[str, dict[str, tuple[str, ...]]] = {name: spec.checkpoint_aliases for name, spec in ROBOTS.items()}
OPENPI_SLOTS = MODEL_SLOTS


def feature_name(name: str) -> str:
    """`observation.images.image` -> `image` (names are accepted with or without lerobot's prefix)."""
    return name[len(IMAGE_PREFIX):] if name.startswith(IMAGE_PREFIX) else name


def aliases(robot: RobotSpec, camera: str) -> tuple[str, ...]:
    own = (robot.cameras[camera],) if camera in robot.cameras else ()
    return own + robot.checkpoint_aliases.get(camera, (camera,))


def map_cameras(
    robot: RobotSpec, slots: tuple[str, ...], camera_map: dict | None = None
) -> tuple[dict[str, str], list[str]]:
    """(robot camera -> slot, warnings). `camera_map` (robot camera -> checkpoint image feature) wins over aliases.
    Raises when no robot camera lands in any slot."""
    cameras = list(robot.cameras) + [c for c in robot.optional_cameras if c not in robot.cameras]
    out: dict[str, str] = {}
    warnings: list[str] = []
    if camera_map is not None:
        if not isinstance(camera_map, dict):
            raise ValueError(f"camera_map must be a dict robot camera -> checkpoint image feature, got {type(camera_map).__name__}")
        for cam, feat in camera_map.items():
            if cam not in cameras:
                raise ValueError(f"camera_map: {cam!r} is not a camera of robot {robot.name!r}; expected one of {cameras}")
            slot = feature_name(str(feat))
            if slot not in slots:
                raise ValueError(f"camera_map: {cam!r} -> {feat!r}, but the checkpoint's image features are {list(slots)}")
            if slot in out.values():
                raise ValueError(f"camera_map: two cameras map to {slot!r}")
            out[cam] = slot
    for cam in cameras:
        if cam in out:
            continue
        slot = next((a for a in aliases(robot, cam) if a in slots and a not in out.values()
                     and not EMPTY_CAMERA.match(a)), None)
        if slot is not None:
            out[cam] = slot
        elif cam in robot.cameras:
            warnings.append(f"robot camera {cam!r} feeds no checkpoint image (features {list(slots)}): it is "
                            f"ignored; pass camera_map={{{cam!r}: FEATURE}} to feed it")
    if not out:
        raise ValueError(
            f"no camera of robot {robot.name!r} ({cameras}) matches any image feature of the checkpoint "
            f"{list(slots)}: every image would be masked. Pass camera_map, e.g. "
            f"camera_map={{{cameras[0]!r}: {slots[0]!r}}}" if slots else
            f"the checkpoint declares no image features; a pi0.5 policy needs at least one camera"
        )
    used = set(out.values())
    for slot in slots:
        if slot in used or EMPTY_CAMERA.match(slot):
            continue
        if slot in OPENPI_SLOTS:  # openpi's transforms mask an unused standard slot too (e.g. right wrist on LIBERO)
            continue
        warnings.append(f"checkpoint image feature {slot!r} gets no robot camera and is masked; pass "
                        f"camera_map={{CAMERA: {slot!r}}} if one of {cameras} is that view")
    return out, warnings
