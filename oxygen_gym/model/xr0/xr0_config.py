"""XR0 dimensions: the Qwen3-VL backbone (a `transformers.Qwen3VLConfig` dict) plus the DiT action expert.

Conventions are those of the published checkpoint's code (see action_expert.py for the citations); the built-in
configs are `xr0-tiny` (tests), `xr0-small` (a CPU frame well under a second) and `xr0` (Qwen3-VL-4B-Instruct + the
16-layer, 1024-wide DiT).
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from ..qwen3_vl.backbone_config import BackboneViews, backbone_dict, builtin_specials, mrope


@dataclass(frozen=True)
class DiTDims:
    """The action expert's transformer. Its K/V heads and head_dim must equal the backbone's: its attention reads
    the backbone's cached K/V directly (XR0.py `DiTAttention`, modeling_mibot.py `Attention`)."""

    depth: int = 16
    width: int = 1024
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 128
    mlp_dim: int = 4096  # the references fix it at 4 x width (`DiTMLP` / `ActionMLP`)

    def __post_init__(self) -> None:
        if self.heads * self.head_dim != self.width:
            raise ValueError(f"DiT heads * head_dim ({self.heads} * {self.head_dim}) must equal width {self.width}")
        if self.heads % self.kv_heads:
            raise ValueError(f"DiT heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")


@dataclass(frozen=True)
class XR0Config(BackboneViews):
    """XR0 = Qwen3-VL backbone + DiT reading the raw K/V of the backbone's last `read_layers` layers.

    `window`: an action token sees the actions j with i - window <= j <= i (None: every earlier action, plain causal).
    `position_gap`: added to the RoPE positions of the action tokens (after sink and state).
    The training recipe (XR0.py) uses window 4 and gap 10, and so do the built-ins (families.md); the published
    checkpoint's inference code (modeling_mibot.py, and physical-ai-studio's port, which gates both to training) uses
    neither, so a published checkpoint loads with window None and gap 0 (xr0_checkpoint.py) unless its config says
    otherwise.
    """

    backbone: dict[str, Any]
    dit: DiTDims = field(default_factory=DiTDims)
    read_layers: int = 16
    horizon: int = 30
    num_steps: int = 5
    window: int | None = 4
    position_gap: int = 10
    action_dim: int = 32
    state_dim: int = 32
    state_len: int = 1
    freq_dim: int = 256  # t_embedder's sinusoid width (TimestepEmbedder default)
    time_scale: float = 1000.0  # t_embedder is fed t * 1000 (dit_forward)
    rms_eps: float = 1e-6
    # What the policy feeds it (sizes the KV slots before any observation): each camera resized to a square of
    # `image_size` px, at most `max_images` cameras, at most `max_prompt_tokens` text tokens around them.
    image_size: int = 224
    max_images: int = 3
    max_prompt_tokens: int = 320

    def __post_init__(self) -> None:
        text = self.text_config
        layers, kv, hd = text["num_hidden_layers"], text["num_key_value_heads"], self.backbone_head_dim
        if not 0 < self.read_layers <= layers:
            raise ValueError(f"read_layers {self.read_layers} must be in [1, backbone layers {layers}]")
        if self.dit.depth != self.read_layers:
            raise ValueError(f"DiT depth {self.dit.depth} must equal read_layers {self.read_layers}: one layer each")
        if (self.dit.kv_heads, self.dit.head_dim) != (kv, hd):
            raise ValueError(
                f"DiT kv_heads/head_dim ({self.dit.kv_heads}, {self.dit.head_dim}) must equal the backbone's "
                f"({kv}, {hd}): the DiT attends to the backbone's cached K/V as they are"
            )

    # ---------------------------------------------------------------- backbone views
    @property
    def rope_theta(self) -> float:
        return float(self.text_config.get("rope_theta", 5_000_000.0))

    @property
    def first_read_layer(self) -> int:
        """Index of the first backbone layer the DiT reads: its layer i reads backbone layer first + i (the tail,
        XR0.py `DiT.forward`: start_idx = len(past_key_values) - layer_num)."""
        return self.backbone_layers - self.read_layers

    def with_tied_head(self, tied: bool = True) -> "XR0Config":
        """The same dims with the LM head tied to the token embeddings (the published XR0) or not (built-ins)."""
        import dataclasses

        backbone = copy.deepcopy(self.backbone)
        backbone["tie_word_embeddings"] = tied
        backbone["text_config"]["tie_word_embeddings"] = tied
        return dataclasses.replace(self, backbone=backbone)

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(asdict(self))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (what bench records as the model's dims)."""
        return self.to_dict()

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "XR0Config":
        d = copy.deepcopy(d)
        d["dit"] = DiTDims(**d.get("dit", {}))
        return XR0Config(**d)

    @staticmethod
    def named(name: str) -> "XR0Config":
        if name not in _BUILTINS:
            raise KeyError(f"unknown XR0 config {name!r}; built-ins: {sorted(_BUILTINS)}")
        return _BUILTINS[name]()


# the built-in byte-level tokenizer's vision ids
BUILTIN_SPECIALS = builtin_specials()


def _tiny() -> XR0Config:
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10000.0, "max_position_embeddings": 4096,
            "rope_scaling": mrope([4, 2, 2])}
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
              "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}
    dit = DiTDims(depth=2, width=64, heads=4, kv_heads=2, head_dim=16, mlp_dim=256)
    return XR0Config(backbone_dict(text, vision, 300, BUILTIN_SPECIALS), dit, read_layers=2, action_dim=16, state_dim=16,
                     image_size=64)


def _small() -> XR0Config:
    text = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "rope_theta": 5_000_000.0, "max_position_embeddings": 8192,
            "rope_scaling": mrope([16, 8, 8])}
    vision = {"depth": 2, "hidden_size": 128, "intermediate_size": 256, "num_heads": 2, "out_hidden_size": 256,
              "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 1]}
    dit = DiTDims(depth=4, width=256, heads=4, kv_heads=2, head_dim=64, mlp_dim=1024)
    return XR0Config(backbone_dict(text, vision, 1024, BUILTIN_SPECIALS), dit, read_layers=4, action_dim=16,
                     state_dim=16, image_size=128)


def _full() -> XR0Config:
    # Qwen3-VL-4B-Instruct's config.json (dims as recalled, not read from the hub here: no network) + the DiT of
    # XR0.py / physical-ai-studio config.py (16 layers, 1024 wide, head_dim 128, 8 KV heads, 30 x 32 actions).
    text = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 5_000_000.0,
            "max_position_embeddings": 262144, "rope_scaling": mrope([24, 20, 20])}
    vision = {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16, "out_hidden_size": 2560,
              "num_position_embeddings": 2304, "deepstack_visual_indexes": [5, 11, 17]}
    # Special ids are the built-in tokenizer's (a published checkpoint's config.json carries Qwen's own).
    # Tied as published (the parameter count is the real one); its random greedy text repeats, which the full-size
    # built-in (benchmarks, GPU checks) does not test.
    return XR0Config(backbone_dict(text, vision, 151936, BUILTIN_SPECIALS, tied=True), DiTDims(), read_layers=16)


_BUILTINS = {"xr0-tiny": _tiny, "xr0-small": _small, "xr0": _full}
