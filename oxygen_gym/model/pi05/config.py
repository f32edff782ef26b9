"""Model dimensions: the reference-compatible seam (docs/api.md) plus the built-in configs."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class GemmaDims:
    """One Gemma stack (the VLM backbone or the action expert)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")


@dataclass(frozen=True)
class VisionDims:
    """SigLIP vision tower (no pooling head)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch_size: int = 14
    image_size: int = 224

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class ExtraHead:
    """An action expert beyond pi0.5's own, of the same dims, reading the same prefix with its own horizon and
    steps (multi-expert models: several experts fan out from one prefill)."""

    name: str
    horizon: int
    num_steps: int


@dataclass(frozen=True)
class PI05Config:
    """pi0.5 = SigLIP + Gemma backbone + Gemma action expert with adaRMS time conditioning."""

    vlm: GemmaDims
    expert: GemmaDims
    vision: VisionDims
    vocab_size: int = 257152
    action_dim: int = 32
    action_horizon: int = 50
    max_token_len: int = 200
    num_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0
    rope_base: float = 10000.0
    discrete_state: bool = True
    # State dims binned into the prompt: lerobot <= 0.4.4 zero-pads to 32 first; openpi and lerobot >= 0.5 bin the
    # unpadded robot state (None).
    state_pad_to: int | None = 32
    image_slots: tuple[str, ...] = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    extra_heads: tuple[ExtraHead, ...] = ()
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        names = ["actions", *(h.name for h in self.extra_heads)]
        if len(set(names)) != len(names):
            raise ValueError(f"extra_heads: head names must be unique and not 'actions', got {names}")
        if self.vlm.depth != self.expert.depth:
            raise ValueError("backbone and expert must have the same depth (joint attention per layer)")
        if (self.vlm.num_heads, self.vlm.num_kv_heads, self.vlm.head_dim) != (
            self.expert.num_heads,
            self.expert.num_kv_heads,
            self.expert.head_dim,
        ):
            raise ValueError("backbone and expert must share heads and head_dim (joint attention)")

    @staticmethod
    def named(name: str, vocab_size: int | None = None) -> "PI05Config":
        """The built-in configs: `tiny` (tests), `small` (CPU benchmarks), `pi05` (the real 3.35 B dims)."""
        if name not in BUILTIN:
            raise ValueError(f"unknown model config {name!r}; expected one of {sorted(BUILTIN)}")
        cfg = BUILTIN[name]
        if vocab_size is not None:
            cfg = PI05Config(**{**cfg.to_dict(), "vocab_size": vocab_size})
        return cfg

    def to_dict(self) -> dict:
        d = asdict(self)
        d["vlm"] = GemmaDims(**d["vlm"])
        d["expert"] = GemmaDims(**d["expert"])
        d["vision"] = VisionDims(**d["vision"])
        d["image_slots"] = tuple(d["image_slots"])
        d["extra_heads"] = tuple(ExtraHead(**h) for h in d["extra_heads"])
        return d

    def to_json(self) -> dict:
        d = asdict(self)
        d["image_slots"] = list(d["image_slots"])
        d["extra_heads"] = [dict(h) for h in d["extra_heads"]]
        return d

    @staticmethod
    def from_json(d: dict) -> "PI05Config":
        d = dict(d)
        d["vlm"] = GemmaDims(**d["vlm"])
        d["expert"] = GemmaDims(**d["expert"])
        d["vision"] = VisionDims(**d["vision"])
        if "image_slots" in d:
            d["image_slots"] = tuple(d["image_slots"])
        d["extra_heads"] = tuple(ExtraHead(**h) for h in d.get("extra_heads", ()))
        return PI05Config(**d)


# Built-in tokenizer vocabulary (oxygen_gym/assets/builtin_tokenizer.model) is 1024 pieces.
BUILTIN_VOCAB = 1024

BUILTIN: dict[str, PI05Config] = {
    # The dims of the lerobot fixture: a full act() in a few tens of ms on a 2-core CPU.
    "tiny": PI05Config(
        vlm=GemmaDims(width=128, depth=2, mlp_dim=256, num_heads=8, num_kv_heads=1, head_dim=32),
        expert=GemmaDims(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=32),
        vision=VisionDims(width=64, depth=2, mlp_dim=128, num_heads=2),
        vocab_size=BUILTIN_VOCAB,
    ),
    # CPU benchmark model: pi0.5's depth (18), heads (8), KV heads (1) and width ratios at 1/8 width (backbone 256,
    # expert 128 with mlp 512, head_dim 32), the backbone MLP trimmed to 6x width (1536) so prefill : denoise
    # lands near the paper's 44 : 20, and a 4-layer SigLIP at 1/8 width (head_dim 72 as So400m). One decode step
    # stays ~1-2 : 44 of prefill on a CPU, not 13 : 44: a CPU does ~5 FLOP per byte of weights read where a GPU
    # does ~150, so prefill is relatively far dearer here. Measured numbers: tools/measure_model_stages.py.
    "small": PI05Config(
        vlm=GemmaDims(width=256, depth=18, mlp_dim=1536, num_heads=8, num_kv_heads=1, head_dim=32),
        expert=GemmaDims(width=128, depth=18, mlp_dim=512, num_heads=8, num_kv_heads=1, head_dim=32),
        vision=VisionDims(width=144, depth=4, mlp_dim=576, num_heads=2),
        vocab_size=BUILTIN_VOCAB,
    ),
    # The trainable built-in (train/, the shipped `libero-spatial` model): pi0.5's structure at a size a 2-core
    # CPU trains in under an hour. Token count drives the cost, so 96 px images in 16 px patches (36 tokens per
    # camera), two cameras, and the unpadded state in the prompt (openpi's convention, ~56 prompt tokens).
    "compact": PI05Config(
        vlm=GemmaDims(width=128, depth=4, mlp_dim=384, num_heads=4, num_kv_heads=1, head_dim=32),
        expert=GemmaDims(width=64, depth=4, mlp_dim=192, num_heads=4, num_kv_heads=1, head_dim=32),
        vision=VisionDims(width=96, depth=3, mlp_dim=288, num_heads=3, patch_size=16, image_size=96),
        vocab_size=BUILTIN_VOCAB, action_horizon=10, max_token_len=96, state_pad_to=None,
        image_slots=("base_0_rgb", "left_wrist_0_rgb"),
    ),
    "pi05": PI05Config(
        vlm=GemmaDims(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
        expert=GemmaDims(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
        vision=VisionDims(width=1152, depth=27, mlp_dim=4304, num_heads=16),
        vocab_size=257152,
    ),
}

# Multi-expert models: pi0.5's backbone with more action experts fanning out from its one prefill (the shape of
# StarVLA's multi-expert runs, paper Table 4). `multi-tiny` gives its heads different horizons and steps (tests);
# `multi-small`'s three experts are alike, so a sweep over 1-3 of them measures the prefill each one shares.
BUILTIN["multi-tiny"] = PI05Config(
    **{**BUILTIN["tiny"].to_dict(), "extra_heads": (ExtraHead("fast", 10, 4), ExtraHead("long", 50, 6))}
)
BUILTIN["multi-small"] = PI05Config(
    **{**BUILTIN["small"].to_dict(), "extra_heads": (ExtraHead("expert_2", 50, 10), ExtraHead("expert_3", 50, 10))}
)

# `compact` at 128 px (64 tokens per camera instead of 36; a model pixel is 2 px of the 256 px render, not 2.7): the
# release must see where the bowl is over the plate (experiments/libero-spatial-log.md, "Chunk labels past a
# dropped bowl"). Same weights' shapes but the vision tower's position embedding.
BUILTIN["compact-128"] = replace(BUILTIN["compact"], vision=replace(BUILTIN["compact"].vision, image_size=128))

# `compact` half again as wide in the backbone and the action expert (backbone 192 / MLP 576, expert 96 / MLP 288;
# 2.88 M parameters): the shipped model's open-loop error on its own training frames stays near its validation error
# (0.063 against 0.086), a sign of too little capacity rather than too little data. Same vision tower and token layout
# as `compact`. Trained on the shipped data it is no better (experiments/libero-spatial-log.md, "A wider model").
BUILTIN["compact-wide"] = replace(
    BUILTIN["compact"],
    vlm=replace(BUILTIN["compact"].vlm, width=192, mlp_dim=576),
    expert=replace(BUILTIN["compact"].expert, width=96, mlp_dim=288),
)
