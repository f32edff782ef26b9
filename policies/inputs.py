"""Observation checks and conversion to model inputs. Everything here runs before the engine is touched, so a
bad observation raises (naming the field) without disturbing in-flight language requests."""
from __future__ import annotations

import numpy as np
import torch

from oxygen_gym.model.pi05.prefix_inputs import PrefixInputs
from oxygen_gym.model.pi05.prompt import missing_image, preprocess_image, tokenize_prompt

from .numeric_range import check_robot_units
from .robots import RobotSpec


class ObservationError(ValueError):
    """An observation that does not match the robot's contract (docs/api.md)."""


MAX_IMAGE_ASPECT = 20  # longest side / shortest side: no camera comes near it; the resizers fail far beyond it


def check_aspect(height: int, width: int, field: str, error: type[ValueError]) -> None:
    """An image every family's resizer can scale to its square input (pi0.5's resize-with-pad would shrink an
    8 x 259200 image's short side to 0 pixels; Qwen3-VL's processor refuses beyond 200:1)."""
    if max(height, width) > MAX_IMAGE_ASPECT * min(height, width):
        raise error(f"{field}: image of {height}x{width} pixels is too elongated (sides at most {MAX_IMAGE_ASPECT}:1)")


def image_uint8_hwc(img: object, field: str) -> np.ndarray:
    """One camera image as uint8 (H, W, 3), the form every family's resizer takes. Accepted as openpi's clients send
    it (openpi `_parse_image`): uint8 or float in [0, 1] (becomes `(255 * img).astype(uint8)`), HWC or CHW (a last
    axis of 3 is read as HWC). One rule for `act()` and the server (serve/observations.py), so both give the same
    actions for the same image. A bad image is an ObservationError naming `field`."""
    if not isinstance(img, np.ndarray):
        raise ObservationError(f"{field}: expected an image array (H, W, 3) or (3, H, W), got {type(img).__name__}")
    if img.ndim != 3 or 3 not in (img.shape[0], img.shape[-1]) or min(img.shape) == 0:
        raise ObservationError(f"{field}: expected shape (H, W, 3) or (3, H, W), got {img.shape}")
    if img.dtype.kind == "f":
        if not np.all(np.isfinite(img)) or img.min() < 0 or img.max() > 1:
            raise ObservationError(f"{field}: float images must hold values in [0, 1]")
        img = (255 * img).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ObservationError(f"{field}: expected dtype uint8 (or float in [0, 1]), got {img.dtype}")
    if img.shape[-1] != 3:  # CHW -> HWC
        img = np.transpose(img, (1, 2, 0))
    return np.ascontiguousarray(img)


def check_observation(obs, robot: RobotSpec) -> tuple[dict[str, np.ndarray], np.ndarray, str]:
    if not isinstance(obs, dict):
        raise ObservationError(f"obs must be a dict with 'images', 'state', 'prompt', got {type(obs).__name__}")
    for key in ("images", "state", "prompt"):
        if key not in obs:
            raise ObservationError(f"obs['{key}'] is missing")
    images = obs["images"]
    if not isinstance(images, dict):
        raise ObservationError(f"obs['images'] must be a dict camera -> image (H, W, 3), got {type(images).__name__}")
    allowed = set(robot.cameras) | set(robot.optional_cameras)
    extra = sorted(set(images) - allowed)
    if extra:
        raise ObservationError(f"obs['images'] has unknown camera(s) {extra} for robot {robot.name!r}; expected {sorted(robot.cameras)} (optional {list(robot.optional_cameras)})")
    missing = sorted(set(robot.cameras) - set(images))
    if missing:
        raise ObservationError(f"obs['images'] is missing camera(s) {missing} for robot {robot.name!r}")
    images = {name: image_uint8_hwc(img, f"obs['images']['{name}']") for name, img in images.items()}
    for name, img in images.items():
        check_aspect(img.shape[0], img.shape[1], f"obs['images']['{name}']", ObservationError)
    state = obs["state"]
    if not isinstance(state, np.ndarray) or state.dtype.kind != "f":
        raise ObservationError(f"obs['state'] must be a float numpy array of shape ({robot.state_dim},), got {getattr(state, 'dtype', type(state).__name__)}")
    if state.shape != (robot.state_dim,):
        raise ObservationError(f"obs['state'] must have shape ({robot.state_dim},) for robot {robot.name!r}, got {state.shape}")
    try:
        check_robot_units(state, "obs['state']")
    except ValueError as e:
        raise ObservationError(str(e)) from None
    prompt = obs["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ObservationError(f"obs['prompt'] must be a non-empty str, got {prompt!r}")
    return images, state, prompt


def build_prefix_inputs(
    images: dict[str, np.ndarray],
    state: np.ndarray,
    prompt: str,
    *,
    robot: RobotSpec,
    model_slots: tuple[str, ...],
    image_size: int,
    tokenizer,
    max_token_len: int,
    discrete_state: bool,
    state_normalizer,
    state_pad_to: int | None = 32,
    device: torch.device,
    camera_slots: dict[str, str] | None = None,
    image_resize: str = "pil",
) -> PrefixInputs:
    """Camera images into the model's slots (absent slots masked), normalised state into the prompt.
    `camera_slots`: robot camera -> model slot (default the robot's own); `image_resize`: "pil" | "torch"."""
    camera_slots = robot.cameras if camera_slots is None else camera_slots
    by_slot = {camera_slots[name]: img for name, img in images.items() if name in camera_slots}
    tensors, masks = [], []
    for slot in model_slots:
        present = slot in by_slot
        x = preprocess_image(by_slot[slot], image_size, image_resize) if present else missing_image(image_size)
        tensors.append(x[None].to(device))
        masks.append(torch.tensor([present], device=device))
    norm_state = state_normalizer.normalize(robot.state_to_model(state.astype(np.float32))) if discrete_state else None
    try:
        tokens, mask = tokenize_prompt(
            tokenizer, prompt, norm_state if discrete_state else None, max_token_len, discrete_state, state_pad_to
        )
    except ValueError as e:
        raise ObservationError(f"obs['prompt']: {e}") from None
    return PrefixInputs(
        tensors,
        masks,
        torch.from_numpy(tokens)[None].to(device),
        torch.from_numpy(mask)[None].to(device),
    )
