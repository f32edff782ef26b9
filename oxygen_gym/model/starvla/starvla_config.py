"""StarVLA dimensions: a Qwen3-VL backbone (a `transformers.Qwen3VLConfig` dict) and up to three action heads that
read it in three ways (StarVLA `starVLA/model/framework/VLM4A/{QwenPI_v3,QwenGR00T,QwenOFT}.py`, commit 0ed0aad):

- `pi` (QwenPI_v3): a layer-wise cross-attention DiT, block i cross-attending to backbone layer i's hidden state
  through that layer's own LayerNorm + Linear (`project_layers`); flow matching; the state enters the prompt as bins.
- `groot` (GR00T N1.5's action head, lerobot 0.4.4 `policies/groot/action_head/flow_matching_action_head.py`): a
  DiT alternating self- and cross-attention over the final normed hidden state, embodiment-specific encoders.
- `oft` (QwenOFT): `horizon` query tokens after the prompt through the backbone's own layers, an MLP-ResNet on their
  final normed hidden states regresses the chunk in one pass.

Built-ins: `starvla-tiny` (tests), `starvla-small` (a CPU frame well under a second), `starvla-4b` (Qwen3-VL-4B dims
with the heads' published sizes; never instantiated in tests).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from ..qwen3_vl.backbone_config import BackboneViews, backbone_dict, builtin_specials, mrope

HEAD_NAMES = ("pi", "groot", "oft")


@dataclass(frozen=True)
class PIDims:
    """QwenPI_v3's LayerwiseFM head. `width` = `action_dit_hidden_dim` (the projectors map the backbone width to
    it); `heads` x `head_dim` = width; one DiT block per backbone layer; `interleave_self_attention` False is
    QwenPI_v3's default (every block cross-attends)."""

    width: int = 1024
    head_dim: int = 64
    horizon: int = 16
    num_steps: int = 4
    future_tokens: int = 32  # num_target_vision_tokens
    max_seq_len: int = 1024  # position_embedding rows
    decoder_hidden: int = 1024  # action_decoder MLP hidden (fixed in LayerwiseFM_ActionHeader.py)
    output_dim: int = 26  # DiT proj_out_2 (its default; unused: the head decodes the pre-output)
    interleave_self_attention: bool = False
    timestep_buckets: int = 1000

    @property
    def heads(self) -> int:
        return self.width // self.head_dim

    def __post_init__(self) -> None:
        if self.width % self.head_dim:
            raise ValueError(f"pi: width {self.width} must be a multiple of head_dim {self.head_dim}")


@dataclass(frozen=True)
class GR00TDims:
    """GR00T N1.5's flow-matching head (lerobot 0.4.4). `width` = input_embedding_dim (DiT-B: 768 = 12 x 64);
    `hidden` = hidden_size (state encoder / decoder MLPs, and the DiT's output_dim); `vl_layers`: the
    SelfAttentionTransformer over the LayerNorm'ed backbone features (`use_vlln`), 0 = neither (StarVLA's QwenGR00T)."""

    width: int = 768
    head_dim: int = 64
    depth: int = 16
    hidden: int = 1024
    horizon: int = 8
    num_steps: int = 4
    future_tokens: int = 32
    max_seq_len: int = 1024
    max_state_dim: int = 64
    num_embodiments: int = 32
    embodiment_id: int = 0
    vl_layers: int = 4
    vl_head_dim: int = 64
    timestep_buckets: int = 1000

    @property
    def heads(self) -> int:
        return self.width // self.head_dim

    def __post_init__(self) -> None:
        if self.width % self.head_dim:
            raise ValueError(f"groot: width {self.width} must be a multiple of head_dim {self.head_dim}")
        if not 0 <= self.embodiment_id < self.num_embodiments:
            raise ValueError(f"groot: embodiment_id {self.embodiment_id} outside [0, {self.num_embodiments})")


@dataclass(frozen=True)
class OFTDims:
    """QwenOFT's L1 regression head: MLPResNet(2 blocks, backbone width -> 2 x width -> action_dim) on the final
    normed hidden states of `horizon` query tokens (`query_token`: StarVLA's placeholder is "🔍"'s id)."""

    horizon: int = 8
    num_blocks: int = 2
    query_token: int = 0


@dataclass(frozen=True)
class StarVLAConfig(BackboneViews):
    """A Qwen3-VL backbone and the heads named in `heads` (any non-empty subset of `HEAD_NAMES`, in that order).
    `action_dim`: every head's action width (model space); `state_dim`: the robot state the prompt bins (and GR00T
    reads, zero-padded to its max_state_dim)."""

    backbone: dict[str, Any]
    heads: tuple[str, ...] = HEAD_NAMES
    pi: PIDims = field(default_factory=PIDims)
    groot: GR00TDims = field(default_factory=GR00TDims)
    oft: OFTDims = field(default_factory=OFTDims)
    action_dim: int = 7
    state_dim: int = 8
    state_bins: int = 256
    image_size: int = 224
    max_images: int = 2
    max_prompt_tokens: int = 160

    def __post_init__(self) -> None:
        heads = tuple(self.heads)
        unknown = [h for h in heads if h not in HEAD_NAMES]
        if not heads or unknown or len(set(heads)) != len(heads):
            raise ValueError(f"heads: expected a non-empty subset of {HEAD_NAMES} without repeats, got {list(heads)}")
        if self.state_dim > self.groot.max_state_dim:
            raise ValueError(f"state_dim {self.state_dim} exceeds groot.max_state_dim {self.groot.max_state_dim}")

    def with_heads(self, heads) -> "StarVLAConfig":
        """The same dims keeping only `heads` (in the order given)."""
        return dataclasses.replace(self, heads=tuple(heads))

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        d = copy.deepcopy(asdict(self))
        d["heads"] = list(self.heads)
        return d

    def to_json(self) -> dict[str, Any]:
        return self.to_dict()

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "StarVLAConfig":
        d = copy.deepcopy(d)
        d["pi"] = PIDims(**d.get("pi", {}))
        d["groot"] = GR00TDims(**d.get("groot", {}))
        d["oft"] = OFTDims(**d.get("oft", {}))
        d["heads"] = tuple(d.get("heads", HEAD_NAMES))
        return StarVLAConfig(**d)

    @staticmethod
    def named(name: str) -> "StarVLAConfig":
        if name not in _BUILTINS:
            raise KeyError(f"unknown StarVLA config {name!r}; built-ins: {sorted(_BUILTINS)}")
        return _BUILTINS[name]()


def _backbone(text: dict[str, Any], vision: dict[str, Any], vocab: int, tied: bool) -> dict[str, Any]:
    return backbone_dict(text, vision, vocab, builtin_specials(), tied)


def _query_token() -> int:
    """The built-in tokenizer's id for StarVLA's OFT placeholder "🔍" (its first byte-level token)."""
    from ..qwen3_vl.qwen_tokenizer import builtin_qwen_tokenizer

    return int(builtin_qwen_tokenizer().encode("🔍", add_special_tokens=False)[0])


def _tiny() -> StarVLAConfig:
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10000.0, "max_position_embeddings": 4096,
            "rope_scaling": mrope([4, 2, 2])}
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
              "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}
    return StarVLAConfig(
        _backbone(text, vision, 300, False),
        pi=PIDims(width=32, head_dim=16, horizon=6, num_steps=3, future_tokens=4, max_seq_len=64),
        groot=GR00TDims(width=32, head_dim=16, depth=4, hidden=48, horizon=5, num_steps=3, future_tokens=4,
                        max_seq_len=64, max_state_dim=16, num_embodiments=3, embodiment_id=1, vl_layers=1,
                        vl_head_dim=16),
        oft=OFTDims(horizon=4, query_token=_query_token()),
        image_size=64, max_prompt_tokens=200,
    )


def _small() -> StarVLAConfig:
    text = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "rope_theta": 5_000_000.0, "max_position_embeddings": 8192,
            "rope_scaling": mrope([16, 8, 8])}
    vision = {"depth": 2, "hidden_size": 128, "intermediate_size": 256, "num_heads": 2, "out_hidden_size": 256,
              "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 1]}
    return StarVLAConfig(
        _backbone(text, vision, 1024, False),
        pi=PIDims(width=128, head_dim=32, horizon=16, num_steps=4, future_tokens=8, max_seq_len=256),
        groot=GR00TDims(width=128, head_dim=32, depth=4, hidden=256, horizon=8, num_steps=4, future_tokens=8,
                        max_seq_len=256, max_state_dim=32, num_embodiments=4, vl_layers=1, vl_head_dim=32),
        oft=OFTDims(horizon=8, query_token=_query_token()),
        image_size=128, max_prompt_tokens=200,
    )


def _full() -> StarVLAConfig:
    # Qwen3-VL-4B-Instruct's dims (as xr0_config's `_full`), QwenPI_v3's defaults (1024-wide DiT, head_dim 64,
    # horizon 16, 4 steps), QwenGR00T's DiT-B (768, 12 x 64, 16 layers, horizon 8, 4 steps), QwenOFT (chunk 8).
    text = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 5_000_000.0,
            "max_position_embeddings": 262144, "rope_scaling": mrope([24, 20, 20])}
    vision = {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16, "out_hidden_size": 2560,
              "num_position_embeddings": 2304, "deepstack_visual_indexes": [5, 11, 17]}
    return StarVLAConfig(_backbone(text, vision, 151936, True), oft=OFTDims(horizon=8, query_token=_query_token()),
                         max_prompt_tokens=200)


_BUILTINS = {"starvla-tiny": _tiny, "starvla-small": _small, "starvla-4b": _full}
