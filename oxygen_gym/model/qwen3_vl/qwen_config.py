"""What the Qwen3-VL modules need from a transformers `Qwen3VLConfig`, read once into plain dataclasses.

The convention checks live here so a wrong config fails at construction, naming the field, instead of producing
silently wrong RoPE (transformers/models/qwen3_vl/configuration_qwen3_vl.py defines the fields; 4.57 names the rope
dict `rope_scaling`, 5.x renames it `rope_parameters`: both are read).
"""
from __future__ import annotations

from dataclasses import dataclass

from transformers import Qwen3VLConfig


@dataclass(frozen=True)
class VisionDims:
    depth: int
    width: int
    mlp_dim: int
    num_heads: int
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    out_width: int
    num_position_embeddings: int
    deepstack_indexes: tuple[int, ...]
    act: str

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def grid_side(self) -> int:
        """Side of the learned square table of position embeddings (interpolated to each image's grid)."""
        return int(round(self.num_position_embeddings**0.5))

    @property
    def patch_dim(self) -> int:
        """Width of one `pixel_values` row: channels x temporal patch x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2


@dataclass(frozen=True)
class TextDims:
    vocab_size: int
    width: int
    mlp_dim: int
    depth: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int]
    attention_bias: bool
    act: str


@dataclass(frozen=True)
class Qwen3VLSpec:
    """Everything the backbone reads from the config: both towers, the special token ids, the head tying."""

    vision: VisionDims
    text: TextDims
    image_token_id: int
    vision_start_token_id: int
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]

    @staticmethod
    def from_hf(config: Qwen3VLConfig) -> "Qwen3VLSpec":
        return Qwen3VLSpec(
            vision=_vision_dims(config.vision_config),
            text=_text_dims(config.text_config),
            image_token_id=int(config.image_token_id),
            vision_start_token_id=int(config.vision_start_token_id),
            # transformers ties the head from the *text* config (modeling_utils: get_text_config(decoder=True)),
            # not the top-level flag; both are read from the same object here so a checkpoint loads as HF loads it.
            tie_word_embeddings=bool(config.get_text_config(decoder=True).tie_word_embeddings),
            eos_token_ids=_eos_ids(config),
        )


def _vision_dims(vc) -> VisionDims:
    side = int(round(vc.num_position_embeddings**0.5))
    if side * side != vc.num_position_embeddings:
        raise ValueError(f"vision_config.num_position_embeddings={vc.num_position_embeddings} must be a square")
    if vc.hidden_size % vc.num_heads:
        raise ValueError(f"vision_config.hidden_size={vc.hidden_size} not divisible by num_heads={vc.num_heads}")
    indexes = tuple(int(i) for i in vc.deepstack_visual_indexes)
    bad = [i for i in indexes if not 0 <= i < vc.depth]
    if bad:
        raise ValueError(f"vision_config.deepstack_visual_indexes {bad} outside [0, depth={vc.depth})")
    return VisionDims(
        depth=vc.depth, width=vc.hidden_size, mlp_dim=vc.intermediate_size, num_heads=vc.num_heads,
        in_channels=vc.in_channels, patch_size=vc.patch_size, temporal_patch_size=vc.temporal_patch_size,
        merge_size=vc.spatial_merge_size, out_width=vc.out_hidden_size, num_position_embeddings=vc.num_position_embeddings,
        deepstack_indexes=indexes, act=vc.hidden_act,
    )


def _rope_dict(tc) -> dict:
    rope = getattr(tc, "rope_scaling", None) or getattr(tc, "rope_parameters", None) or {}
    return dict(rope)


def _text_dims(tc) -> TextDims:
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    if tc.num_attention_heads % tc.num_key_value_heads:
        raise ValueError(
            f"text_config.num_attention_heads={tc.num_attention_heads} not a multiple of "
            f"num_key_value_heads={tc.num_key_value_heads}"
        )
    rope = _rope_dict(tc)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"text_config.rope_scaling.rope_type={rope_type!r}: only 'default' (plain M-RoPE) is supported")
    # transformers' Qwen3VLTextRotaryEmbedding falls back to [24, 20, 20] when the section is absent.
    section = tuple(int(s) for s in rope.get("mrope_section", (24, 20, 20)))
    if len(section) != 3 or sum(section) != head_dim // 2:
        raise ValueError(f"text_config.rope_scaling.mrope_section={list(section)} must be 3 ints summing to head_dim/2={head_dim // 2}")
    if rope.get("mrope_interleaved", True) is False:
        # transformers 4.57's Qwen3-VL interleaves whatever this flag says; a checkpoint asking for the chunked
        # (Qwen2-VL) layout is ambiguous, so refuse rather than guess which one it was trained with.
        raise ValueError("text_config.rope_scaling.mrope_interleaved=False: Qwen3-VL interleaves its M-RoPE sections")
    return TextDims(
        vocab_size=tc.vocab_size, width=tc.hidden_size, mlp_dim=tc.intermediate_size, depth=tc.num_hidden_layers,
        num_heads=tc.num_attention_heads, num_kv_heads=tc.num_key_value_heads, head_dim=head_dim,
        rms_eps=float(tc.rms_norm_eps), rope_theta=float(tc.rope_theta), mrope_section=section,  # type: ignore[arg-type]
        attention_bias=bool(tc.attention_bias), act=tc.hidden_act,
    )


def _eos_ids(config: Qwen3VLConfig) -> tuple[int, ...]:
    """eos ids a greedy `generate` stops at: the top-level config's, else the text config's (None: never stop)."""
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = getattr(config.get_text_config(decoder=True), "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
