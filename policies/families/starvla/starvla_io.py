"""StarVLA's observation and text conventions: every camera in one user turn before the instruction, the robot state
binned into the instruction (QwenPI_v3 / QwenOFT) and given raw, zero-padded, to the GR00T head, tokenised and
patched by transformers' own Qwen3-VL processor; language tasks as a follow-up user turn after the prefix."""
from __future__ import annotations

import numpy as np

from oxygen_gym.model.image_resize import resize_with_pad
from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer, builtin_qwen_tokenizer
from oxygen_gym.model.starvla import starvla_prompt
from oxygen_gym.model.starvla.starvla_model import StarVLAModel, build_starvla
from oxygen_gym.model.qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs

from oxygen_gym.policies import normalize
from oxygen_gym.policies.inputs import ObservationError
from oxygen_gym.policies.checkpoints.family_names import FAMILY_TABLE
from oxygen_gym.policies.family_api import ModelIO, PolicyFamily, register_family
from oxygen_gym.policies.robots import RobotSpec
from oxygen_gym.policies.qwen_vl_processor import make_processor


class StarVLAIO(ModelIO):
    def __init__(self, model: StarVLAModel, tokenizer: QwenTokenizer, *, robot: RobotSpec,
                 camera_slots: dict[str, str] | None, state_normalizer: normalize.Normalizer,
                 image_resize: str = "pil") -> None:
        """`camera_slots`: robot camera -> view name, in prompt order (None: the robot's cameras)."""
        self.model, self.tokenizer, self.robot, self.state_norm = model, tokenizer, robot, state_normalizer
        self.camera_slots = dict(camera_slots) if camera_slots is not None else {c: c for c in robot.cameras}
        if len(self.camera_slots) > model.config.max_images:
            raise ValueError(f"camera_slots: {len(self.camera_slots)} cameras, the model takes at most "
                             f"{model.config.max_images}")
        self.processor = make_processor(model, tokenizer)
        self.image_token_id = int(model.config.backbone["image_token_id"])

    def prefix_inputs(self, images: dict[str, np.ndarray], state: np.ndarray, prompt: str) -> QwenPrefixInputs:
        c = self.model.config
        cams = [cam for cam in self.camera_slots if cam in images]
        frames = [resize_with_pad(images[cam], c.image_size, c.image_size) for cam in cams]
        robot_state = self.state_norm.normalize(self.robot.state_to_model(state.astype(np.float32)))
        if robot_state.shape[0] > c.state_dim:
            raise ObservationError(f"obs['state']: {robot_state.shape[0]} dims, the model takes {c.state_dim}")
        text_in = starvla_prompt.instruction_with_state(prompt.strip(), robot_state, c.state_bins)
        text = self.processor.apply_chat_template(starvla_prompt.messages(text_in, None, len(frames)), tokenize=False,
                                                  add_generation_prompt=True)
        out = self.processor(images=frames or None, text=[text], return_tensors="pt")
        ids = out["input_ids"]
        text_tokens = int((ids != self.image_token_id).sum())
        if text_tokens > c.max_prompt_tokens:
            raise ObservationError(f"obs['prompt']: the prompt takes {text_tokens} text tokens with its template and "
                                   f"state bins; the model's slots hold {c.max_prompt_tokens}")
        return QwenPrefixInputs.from_processor(out, robot_state, c.state_dim, self.model.device, self.model.dtype)

    def task_prompt_ids(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(starvla_prompt.language_turn(prompt))


def build_builtin(name: str, robot: RobotSpec, device, dtype, overrides, seed: int):
    """A random-weight built-in (`starvla-tiny`, `-small`, `-4b`) holding all three heads, the built-in byte-level
    Qwen tokenizer and identity statistics unless overridden; `heads=` on the policy picks which ones run."""
    model = build_starvla(name, seed=seed, device=device, dtype=dtype)
    tok = overrides.tokenizer if isinstance(overrides.tokenizer, QwenTokenizer) else QwenTokenizer(builtin_qwen_tokenizer())
    cams = dict(overrides.camera_map) if overrides.camera_map else {c: c for c in robot.cameras}
    return model, tok, dict(camera_slots=cams)


def _load(*args):
    from .starvla_load import load_starvla

    return load_starvla(*args)


def _inspect(*args):
    from .starvla_load import inspect_starvla

    return inspect_starvla(*args)


def _detects(root) -> bool:
    from oxygen_gym.model.starvla.starvla_checkpoint import is_starvla_run

    return is_starvla_run(root)


register_family(PolicyFamily("starvla", StarVLAModel, StarVLAIO, FAMILY_TABLE["starvla"].builtins, build_builtin,
                             checkpoint_families=FAMILY_TABLE["starvla"].checkpoint_families, detects=_detects,
                             load=_load, inspect=_inspect))
