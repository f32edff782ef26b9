"""Xiaomi-Robotics-0's observation and text conventions: the cameras as titled views in its action-mode chat prompt
(model/xr0/xr0_prompt.py), tokenised and patched by transformers' own Qwen3-VL processor (smart resize, image
pads, chat template: nothing re-implemented), the raw robot state zero-padded to the DiT's state width, and language
tasks as a chain-of-thought follow-up turn after the prefix."""
from __future__ import annotations

import numpy as np

from oxygen_gym.model.image_resize import resize_with_pad
from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer, builtin_qwen_tokenizer
from oxygen_gym.model.xr0 import xr0_prompt
from oxygen_gym.model.xr0.xr0_model import XR0Model, build_xr0
from oxygen_gym.model.qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs

from oxygen_gym.policies import normalize
from oxygen_gym.policies.inputs import ObservationError
from oxygen_gym.policies.checkpoints.family_names import FAMILY_TABLE
from oxygen_gym.policies.family_api import ModelIO, PolicyFamily, register_family
from oxygen_gym.policies.qwen_vl_processor import VIEWS, default_views, make_processor  # noqa: F401 - VIEWS re-exported
from oxygen_gym.policies.robots import RobotSpec

class XR0IO(ModelIO):
    def __init__(
        self,
        model: XR0Model,
        tokenizer: QwenTokenizer,
        *,
        robot: RobotSpec,
        camera_slots: dict[str, str] | None,
        state_normalizer: normalize.Normalizer,
        image_resize: str = "pil",
    ) -> None:
        """`camera_slots`: robot camera -> XR0 view name (`base`, `wrist_left`, `wrist_right`), in prompt order
        (None: `VIEWS`)."""
        self.model, self.tokenizer, self.robot, self.state_norm = model, tokenizer, robot, state_normalizer
        self.views = dict(camera_slots) if camera_slots is not None else default_views(robot)
        self.camera_slots = self.views
        if len(self.views) > model.config.max_images:
            raise ValueError(f"camera_slots: {len(self.views)} views, the model takes at most {model.config.max_images}")
        self.processor = make_processor(model, tokenizer)
        self.image_token_id = int(model.config.backbone["image_token_id"])

    def prefix_inputs(self, images: dict[str, np.ndarray], state: np.ndarray, prompt: str) -> QwenPrefixInputs:
        c = self.model.config
        cams = [cam for cam in self.views if cam in images]
        side = c.image_size
        frames = [resize_with_pad(images[cam], side, side) for cam in cams]
        messages = xr0_prompt.action_messages(prompt, [self.views[cam] for cam in cams])
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        out = self.processor(images=frames or None, text=[text], return_tensors="pt")
        ids = out["input_ids"]
        text_tokens = int((ids != self.image_token_id).sum())
        if text_tokens > c.max_prompt_tokens:
            raise ObservationError(
                f"obs['prompt']: the prompt takes {text_tokens} text tokens with its template; the model's slots hold "
                f"{c.max_prompt_tokens} (a shorter instruction, or a config with a larger max_prompt_tokens)"
            )
        robot_state = self.state_norm.normalize(self.robot.state_to_model(state.astype(np.float32)))
        if robot_state.shape[0] > c.state_dim:
            raise ObservationError(f"obs['state']: {robot_state.shape[0]} dims, the model's DiT takes {c.state_dim}")
        return QwenPrefixInputs.from_processor(out, robot_state, c.state_dim, self.model.device, self.model.dtype)

    def task_prompt_ids(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(xr0_prompt.language_turn(prompt))


def build_builtin(name: str, robot: RobotSpec, device, dtype, overrides, seed: int) -> tuple[XR0Model, QwenTokenizer, dict]:
    """A random-weight built-in XR0 (`xr0-tiny`, `xr0-small`, `xr0`) with the built-in byte-level Qwen tokenizer and
    no statistics (identity), unless `norm_stats` / `tokenizer` / `camera_map` are given."""
    model = build_xr0(name, seed=seed, device=device, dtype=dtype)
    tok = overrides.tokenizer if isinstance(overrides.tokenizer, QwenTokenizer) else QwenTokenizer(builtin_qwen_tokenizer())
    views = dict(overrides.camera_map) if overrides.camera_map else default_views(robot)
    return model, tok, dict(camera_slots=views)


def _detects(root) -> bool:
    from .xr0_resolve import is_xr0_folder  # when a folder is asked about: keeps importing the family light

    return is_xr0_folder(root)


def _load(*args, **kwargs):
    from .xr0_load import load_xr0

    return load_xr0(*args, **kwargs)


def _inspect(*args, **kwargs) -> str:
    from .xr0_load import inspect_xr0

    return inspect_xr0(*args, **kwargs)


register_family(PolicyFamily(
    "xr0", XR0Model, XR0IO, FAMILY_TABLE["xr0"].builtins, build_builtin,
    checkpoint_families=FAMILY_TABLE["xr0"].checkpoint_families,
    detects=_detects, load=_load, inspect=_inspect,
))
