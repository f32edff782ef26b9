"""pi0.5's observation and text conventions: images into its camera slots (absent ones masked), the normalised
state binned into the prompt (policies/inputs.py), task prompts as " prompt\n" after the prefix."""
from __future__ import annotations

import numpy as np

from oxygen_gym.model.pi05.modeling import PI05Model
from oxygen_gym.model.pi05.prefix_inputs import PrefixInputs

from oxygen_gym.policies import normalize
from oxygen_gym.policies.inputs import build_prefix_inputs
from oxygen_gym.policies.language import task_prompt_ids
from oxygen_gym.policies.checkpoints.family_names import FAMILY_TABLE
from oxygen_gym.policies.family_api import ModelIO, PolicyFamily, register_family
from oxygen_gym.policies.robots import RobotSpec


class PI05IO(ModelIO):
    def __init__(
        self,
        model: PI05Model,
        tokenizer,
        *,
        robot: RobotSpec,
        camera_slots: dict[str, str] | None,
        state_normalizer: normalize.Normalizer,
        image_resize: str = "pil",
    ) -> None:
        self.model, self.tokenizer, self.robot = model, tokenizer, robot
        # default: the robot's openpi slots
        self.camera_slots = dict(camera_slots) if camera_slots is not None else dict(robot.cameras)
        self.state_norm, self.image_resize = state_normalizer, image_resize
        self.model_slots = tuple(model.config.image_slots)

    def prefix_inputs(self, images: dict[str, np.ndarray], state: np.ndarray, prompt: str) -> PrefixInputs:
        cfg = self.model.config
        return build_prefix_inputs(
            images, state, prompt, robot=self.robot, model_slots=self.model_slots, image_size=cfg.vision.image_size,
            tokenizer=self.tokenizer, max_token_len=cfg.max_token_len, discrete_state=cfg.discrete_state,
            state_normalizer=self.state_norm, state_pad_to=cfg.state_pad_to, device=self.model.device,
            camera_slots=self.camera_slots, image_resize=self.image_resize,
        )

    def task_prompt_ids(self, prompt: str) -> list[int]:
        return task_prompt_ids(self.tokenizer, prompt)


def build_builtin(name: str, robot: RobotSpec, device, dtype, overrides, seed: int) -> tuple[PI05Model, object, dict]:
    """A random-weight built-in pi0.5 (config.BUILTIN): the robot's slots and horizon, no statistics unless given.
    Of the overrides (already validated), the ones a built-in has use for apply; asset_id, family, revision do not."""
    from pathlib import Path

    from oxygen_gym.model.pi05.config import PI05Config
    from oxygen_gym.model.pi05.init import build_model
    from oxygen_gym.model.tokenizer import find_tokenizer

    from oxygen_gym.policies.checkpoints import map_cameras
    from oxygen_gym.policies.checkpoints.resolve import _stats

    o = overrides
    cfg = PI05Config.named(name)
    if o.discrete_state is not None:
        cfg = PI05Config(**{**cfg.to_dict(), "discrete_state": bool(o.discrete_state)})
    slots = map_cameras(robot, cfg.image_slots, o.camera_map)[0] if o.camera_map is not None else None
    stats = _stats(Path("."), "ours", o.norm_stats, None)[0] if o.norm_stats is not None else None
    tok = _builtin_tokenizer(cfg.vocab_size, o.tokenizer)
    model = build_model(cfg, seed=seed, device=device, dtype=dtype)
    return model, tok, dict(norm_stats=stats, camera_slots=slots, image_resize=o.image_resize or "pil")


def _builtin_tokenizer(vocab_size: int, requested):
    """The tokenizer of a random-weight built-in: the one asked for, else the one matching its vocabulary, else (a
    PaliGemma-vocab model such as `pi05` where no PaliGemma tokenizer is installed) the built-in one, whose ids fit any
    vocabulary: random weights decode no meaningful text, so the choice only sets how prompts split into tokens (ids
    past its pieces decode as `<id N>`: model/tokenizer.py, StandInTokenizer)."""
    import warnings

    from oxygen_gym.model.tokenizer import StandInTokenizer, TokenizerNotFoundError, find_tokenizer

    if requested is not None:
        return find_tokenizer(vocab_size, None, requested)[0]
    try:
        return find_tokenizer(vocab_size)[0]
    except TokenizerNotFoundError:
        tok = StandInTokenizer(vocab_size)
        if tok.vocab_size > vocab_size:
            raise
        warnings.warn(f"random-weight built-in of vocab {vocab_size}: no PaliGemma tokenizer installed, so prompts are "
                      f"split by the built-in tokenizer (vocab {tok.vocab_size}); pass --tokenizer for PaliGemma's")
        return tok


def _builtin_names() -> tuple[str, ...]:
    from oxygen_gym.model.pi05.config import BUILTIN

    return tuple(BUILTIN)


def _load(*args, **kwargs):
    from .pi05_load import load_pi05  # when a folder is loaded: loading imports torch-heavy checkpoint code

    return load_pi05(*args, **kwargs)


def _inspect(*args, **kwargs) -> str:
    from .pi05_load import inspect_pi05

    return inspect_pi05(*args, **kwargs)


register_family(PolicyFamily(
    "pi05", PI05Model, PI05IO, _builtin_names(), build_builtin,
    checkpoint_families=FAMILY_TABLE["pi05"].checkpoint_families,
    detects=None, load=_load, inspect=_inspect,
))
