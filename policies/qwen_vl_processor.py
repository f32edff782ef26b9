"""The Qwen3-VL processor at a model's square input size, and Xiaomi-Robotics-0's camera view names: shared by the
XR0 and StarVLA families (their IO, checkpoint resolvers and inspect reports), so it lives below both and neither
family imports the other."""
from __future__ import annotations

from oxygen_gym.model.qwen3_vl.qwen_inputs import ImageOnlyQwen3VLProcessor
from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer

from .robots import RobotSpec

# robot camera -> XR0 view (deploy/server.py's view names, as physical-ai-studio records them)
VIEWS = {
    "libero": {"base": "base", "wrist": "wrist_left"},
    "droid": {"exterior": "base", "wrist": "wrist_left"},
    "aloha": {"high": "base", "left_wrist": "wrist_left", "right_wrist": "wrist_right"},
}


def default_views(robot: RobotSpec) -> dict[str, str]:
    return dict(VIEWS.get(robot.name, {cam: cam for cam in robot.cameras}))


def make_processor(model, tokenizer: QwenTokenizer) -> ImageOnlyQwen3VLProcessor:
    """Qwen's processor at this model's square input size (min = max pixels: a square camera image keeps its size);
    `model` is XR0's or StarVLA's (both carry `config.backbone` and `config.image_size`)."""
    from transformers import Qwen2VLImageProcessor

    v = model.config.backbone["vision_config"]
    side = model.config.image_size
    images = Qwen2VLImageProcessor(
        patch_size=v["patch_size"], temporal_patch_size=v["temporal_patch_size"], merge_size=v["spatial_merge_size"],
        min_pixels=side * side, max_pixels=side * side, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    return ImageOnlyQwen3VLProcessor(images, tokenizer.hf, chat_template=tokenizer.hf.chat_template)
