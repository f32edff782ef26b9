"""Observation checks and conversion to model inputs. Everything here runs before the engine is touched, so a
bad observation raises (naming the field) without disturbing in-flight language requests."""
from __future__ import annotations

import numpy as np
import torch

from oxygen_gym.model.pi05.prefix_inputs import PrefixInputs
from oxygen_gym.model.pi05.prompt import missing_image, preprocess_image, tokenize_prompt

from .robots import RobotSpec


class ObservationError(ValueError):
    """An observation that does not match the robot's contract (docs/api.md)."""


def check_observation(obs, robot: RobotSpec) -> tuple[dict[str, np.ndarray], np.ndarray, str]:
    if not isinstance(obs, dict):
        raise ObservationError(f"obs must be a dict with 'images', 'state', 'prompt', got {type(obs).__name__}")
    for key in ("images", "state", "prompt"):
        if key not in obs:
            raise ObservationError(f"obs['{key}'] is missing")
    images = obs["images"]
    if not isinstance(images, dict):
        raise ObservationError(f"obs['images'] must be a dict camera -> uint8 (H, W, 3), got {type(images).__name__}")
    allowed = set(robot.cameras) | set(robot.optional_cameras)
    extra = sorted(set(images) - allowed)
    if extra:
        raise ObservationError(f"obs['images'] has unknown camera(s) {extra} for robot {robot.name!r}; expected {sorted(robot.cameras)} (optional {list(robot.optional_cameras)})")
    missing = sorted(set(robot.cameras) - set(images))
    if missing:
        raise ObservationError(f"obs['images'] is missing camera(s) {missing} for robot {robot.name!r}")
    for name, img in images.items():
        if not isinstance(img, np.ndarray):
            raise ObservationError(f"obs['images']['{name}'] must be a numpy array, got {type(img).__name__}")
        if img.dtype != np.uint8:
            raise ObservationError(f"obs['images']['{name}'] must be uint8, got {img.dtype}")
        if img.ndim != 3 or img.shape[2] != 3 or min(img.shape[:2]) == 0:
            raise ObservationError(f"obs['images']['{name}'] must have shape (H, W, 3), got {img.shape}")
    state = obs["state"]
    if not isinstance(state, np.ndarray) or state.dtype.kind != "f":
        raise ObservationError(f"obs['state'] must be a float numpy array of shape ({robot.state_dim},), got {getattr(state, 'dtype', type(state).__name__)}")
    if state.shape != (robot.state_dim,):
        raise ObservationError(f"obs['state'] must have shape ({robot.state_dim},) for robot {robot.name!r}, got {state.shape}")
    if not np.all(np.isfinite(state)):
        raise ObservationError(f"obs['state'] has non-finite values: {state}")
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
