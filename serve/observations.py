"""openpi observations, mapped to `policy.act`'s format (docs/api.md) by each robot's wire layout
(`RobotSpec.wire`, in policies/robots/<robot>_robot.py: openpi's message keys for that robot's cameras and state).

Images are HWC or CHW; float images in [0, 1] become uint8 as openpi's `_parse_image` does. Our own format
(`images` with the robot's camera names, `state`, `prompt`) is accepted for every robot. Keys nobody reads are ignored,
as openpi's input transforms ignore them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oxygen_gym.policies.inputs import ObservationError, check_aspect, image_uint8_hwc
from oxygen_gym.policies.robots import RobotSpec


class ObservationKeyError(ValueError):
    """An openpi observation with a missing or malformed field (the message names it)."""


@dataclass(frozen=True)
class Limits:
    """What one observation may hold; checked before any costly work (tokenising, resizing)."""

    max_prompt_chars: int = 1000
    max_image_pixels: int = 1920 * 1080  # per image field (H * W)


ECHO_CHARS = 200  # the most of a client's value an error reply repeats


def short(value, limit: int = ECHO_CHARS) -> str:
    """`repr(value)`, clipped: error replies name what was wrong without echoing a client's whole message."""
    if isinstance(value, dict | np.ndarray):
        return f"a map of {len(value)} keys" if isinstance(value, dict) else f"an array of shape {value.shape}"
    text = repr(value[:limit] if isinstance(value, str | bytes | list | tuple) else value)  # never repr it all
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(key) -> str:
    return str(key)[:80]


MIN_IMAGE_SIDE = 8  # smaller images are no camera's (and degenerate for resizing)


def _image(value, field: str, limits: Limits) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ObservationKeyError(f"{field}: expected an image array (H, W, 3) or (3, H, W), got {type(value).__name__}")
    img = value
    if img.ndim != 3 or 3 not in (img.shape[0], img.shape[-1]) or min(img.shape) == 0:
        raise ObservationKeyError(f"{field}: expected shape (H, W, 3) or (3, H, W), got {short(img.shape)}")
    h, w = img.shape[:2] if img.shape[-1] == 3 else img.shape[1:]
    if h < MIN_IMAGE_SIDE or w < MIN_IMAGE_SIDE:
        raise ObservationKeyError(f"{field}: image of {h}x{w} pixels; each side must be at least {MIN_IMAGE_SIDE}")
    check_aspect(h, w, field, ObservationKeyError)
    if h * w > limits.max_image_pixels:
        raise ObservationKeyError(
            f"{field}: image of {h}x{w} = {h * w} pixels, over the limit of {limits.max_image_pixels} (--max-image-pixels)"
        )
    try:  # dtype and layout by act()'s own rule (policies/inputs.py), so both give the same actions
        return image_uint8_hwc(img, field)
    except ObservationError as e:
        raise ObservationKeyError(str(e)) from None


def _vector(value, field: str, n: int) -> np.ndarray:
    try:
        arr = np.asarray(value) if isinstance(value, list | tuple | int | float) else value
    except (ValueError, TypeError, OverflowError):  # ragged nested lists, numbers past int64
        raise ObservationKeyError(f"{field}: expected {n} numbers (a float array), got a ragged or mixed list") from None
    if not isinstance(arr, np.ndarray | np.generic) or np.asarray(arr).dtype.kind not in "fiu":
        raise ObservationKeyError(f"{field}: expected {n} numbers (a float array), got {type(value).__name__}")
    arr = np.asarray(arr, dtype=np.float32).reshape(-1) if np.ndim(arr) == 0 else np.asarray(arr, dtype=np.float32)
    if arr.shape != (n,):
        raise ObservationKeyError(f"{field}: expected shape ({n},), got {short(arr.shape)}")
    if not np.all(np.isfinite(arr)):
        raise ObservationKeyError(f"{field}: has non-finite values")
    return arr


def _prompt(obs: dict, default: str | None, limits: Limits) -> str:
    prompt = obs.get("prompt", default)
    if prompt is None:
        raise ObservationKeyError("prompt: missing (send 'prompt' or start the server with --default-prompt)")
    if isinstance(prompt, str | bytes) and len(prompt) > limits.max_prompt_chars:  # before decoding or tokenising
        raise ObservationKeyError(
            f"prompt: {len(prompt)} characters, over the limit of {limits.max_prompt_chars} (--max-prompt-chars)"
        )
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8", errors="replace")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ObservationKeyError(f"prompt: expected a non-empty string, got {short(prompt)}")
    return prompt


def _missing(obs: dict, key: str) -> ObservationKeyError:
    return ObservationKeyError(f"{key}: missing (message keys: {short(sorted(map(_key, obs)))})")


def to_policy_obs(obs, robot: RobotSpec, default_prompt: str | None = None, limits: Limits = Limits()) -> dict:
    """openpi observation -> `{"images": {camera: uint8 HWC}, "state": float32, "prompt": str}` for `robot`."""
    if not isinstance(obs, dict):
        raise ObservationKeyError(f"message: expected a map of observation keys, got {type(obs).__name__}")
    if isinstance(obs.get("images"), dict):
        return _nested(obs, robot, default_prompt, limits)
    if not robot.wire.flat_images:
        raise _missing(obs, "images")
    images = {}
    for key, cam in robot.wire.flat_images.items():
        if key in obs:
            images[cam] = _image(obs[key], key, limits)
        elif cam in robot.cameras:
            raise _missing(obs, key)
    parts = []
    for key, n in robot.wire.flat_state:
        if key not in obs:
            raise _missing(obs, key)
        parts.append(_vector(obs[key], key, n))
    return {"images": images, "state": np.concatenate(parts), "prompt": _prompt(obs, default_prompt, limits)}


def _nested(obs: dict, robot: RobotSpec, default_prompt: str | None, limits: Limits) -> dict:
    """`{"images": {...}, "state": ..., "prompt": ...}` with openpi's camera names (the robot's wire aliases, ALOHA's
    `cam_high`, ...) or the robot's own."""
    alias = robot.wire.camera_aliases
    known = set(robot.cameras) | set(robot.optional_cameras)
    images = {}
    for key, value in obs["images"].items():
        cam = alias.get(key, key) if isinstance(key, str) else None
        if cam not in known:
            expected = sorted(k for k, v in alias.items() if v in known) or sorted(known)
            raise ObservationKeyError(f"images/{_key(key)}: unknown camera for robot {robot.name!r}; expected {expected}")
        images[cam] = _image(value, f"images/{key}", limits)
    for cam in robot.cameras:
        if cam not in images:
            name = next((k for k, v in alias.items() if v == cam), cam)
            raise ObservationKeyError(f"images/{name}: missing (got cameras {short(sorted(map(_key, obs['images'])))})")
    if "state" not in obs:
        raise _missing(obs, "state")
    return {
        "images": images, "state": _vector(obs["state"], "state", robot.state_dim),
        "prompt": _prompt(obs, default_prompt, limits),
    }
