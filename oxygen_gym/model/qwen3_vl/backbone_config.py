"""What every family config over a Qwen3-VL backbone shares (XR0, StarVLA): the backbone held as a transformers
`Qwen3VLConfig` dict, the views of it the engine sizes slots from, and the builders of built-in backbone dicts."""
from __future__ import annotations

import copy
from typing import Any


class BackboneViews:
    """Mixed into a family's config dataclass with fields `backbone` (a Qwen3VLConfig dict), `image_size`,
    `max_images` and `max_prompt_tokens`."""

    @property
    def text_config(self) -> dict[str, Any]:
        return self.backbone["text_config"]

    @property
    def backbone_layers(self) -> int:
        return self.text_config["num_hidden_layers"]

    @property
    def backbone_width(self) -> int:
        return self.text_config["hidden_size"]

    @property
    def backbone_head_dim(self) -> int:
        t = self.text_config
        return t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]

    @property
    def tokens_per_image(self) -> int:
        """Merged vision tokens of one `image_size` square camera image."""
        v = self.backbone["vision_config"]
        side = self.image_size // (v["patch_size"] * v["spatial_merge_size"])
        return side * side

    def max_prefix_length(self) -> int:
        return self.max_images * self.tokens_per_image + self.max_prompt_tokens

    def qwen3vl_config(self):
        """The backbone as a `transformers.Qwen3VLConfig`."""
        from transformers import Qwen3VLConfig

        return Qwen3VLConfig(**copy.deepcopy(self.backbone))


def builtin_specials() -> tuple[int, int, int, int]:
    """(image pad, video pad, vision start, vision end) ids of the built-in byte-level Qwen tokenizer."""
    from .qwen_tokenizer import SPECIAL_IDS as ids

    return ids["<|image_pad|>"], ids["<|video_pad|>"], ids["<|vision_start|>"], ids["<|vision_end|>"]


def backbone_dict(text: dict[str, Any], vision: dict[str, Any], vocab: int, specials: tuple[int, int, int, int],
                  tied: bool = False) -> dict[str, Any]:
    """A Qwen3VLConfig dict for a built-in. Random-weight built-ins leave the LM head untied (a random tied head
    mostly repeats its input token, so the text would be degenerate and language tests vacuous); the published XR0
    ties it."""
    image, video, start, end = specials
    text = {"vocab_size": vocab, "tie_word_embeddings": tied, "rms_norm_eps": 1e-6, "hidden_act": "silu", **text}
    return {
        "text_config": text,
        "vision_config": {"in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "hidden_act": "gelu_pytorch_tanh", **vision},
        "image_token_id": image, "video_token_id": video, "vision_start_token_id": start,
        "vision_end_token_id": end, "tie_word_embeddings": tied,
    }


def mrope(sections: list[int]) -> dict[str, Any]:
    # transformers 4.57 spelling (5.x: rope_parameters); the sections sum to head_dim / 2
    return {"rope_type": "default", "mrope_section": sections, "mrope_interleaved": True}
