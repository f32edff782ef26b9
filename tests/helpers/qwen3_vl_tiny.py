"""Tiny random Qwen3-VL configs and prompts, built offline, with transformers' own model as the reference."""
from __future__ import annotations

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from oxygen_gym.model.qwen3_vl import Qwen3VLBackbone

IMAGE, VIDEO, START, END = 3, 4, 5, 6  # special ids; text tokens are drawn from [FIRST_TEXT, vocab)
FIRST_TEXT = 7
VOCAB = 97

# name -> (text kwargs, vision kwargs, tied). GQA 4:1, 2:1, 1:1; tied and untied heads; DeepStack on and off.
CONFIGS = {
    "gqa4_untied_ds2": (
        dict(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=16, mrope_section=[2, 3, 3]),
        dict(depth=3, num_position_embeddings=16, deepstack_visual_indexes=[0, 1]),
        False,
    ),
    "gqa2_tied_ds1": (
        dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16, mrope_section=[4, 2, 2]),
        dict(depth=2, num_position_embeddings=64, deepstack_visual_indexes=[1]),
        True,
    ),
    "mha_untied_nods": (
        dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=8, mrope_section=[2, 1, 1]),
        dict(depth=2, num_position_embeddings=16, deepstack_visual_indexes=[]),
        False,
    ),
}


def tiny_config(name: str, eos: int | None = None) -> Qwen3VLConfig:
    text, vision, tied = CONFIGS[name]
    text = dict(text)
    section = text.pop("mrope_section")
    cfg = Qwen3VLConfig(
        text_config=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, rope_theta=10000.0, max_position_embeddings=1024,
            rope_scaling={"rope_type": "default", "mrope_section": section, "mrope_interleaved": True},
            tie_word_embeddings=tied, eos_token_id=eos, **text,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64, patch_size=16, spatial_merge_size=2,
            temporal_patch_size=2, in_channels=3, **vision,
        ),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
        tie_word_embeddings=tied, eos_token_id=eos,
    )
    cfg._attn_implementation = "eager"
    return cfg


def make_pair(name: str, seed: int = 0, eos: int | None = None):
    """(transformers reference, our backbone with the reference's weights)."""
    torch.manual_seed(seed)
    cfg = tiny_config(name, eos)
    ref = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # random norm weights too, so a skipped norm or a swapped scale shows
        for n, p in ref.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.add_(0.3 * torch.randn_like(p))
    ours = Qwen3VLBackbone.from_config(cfg)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref, ours


def prompt(gen: torch.Generator, grids: list[tuple[int, int, int]], text_lens: list[int]) -> torch.Tensor:
    """Text runs of `text_lens` with one image (start, pads, end) between consecutive runs: `[L]`."""
    parts = []
    for i, n in enumerate(text_lens):
        parts.append(torch.randint(FIRST_TEXT, VOCAB, (n,), generator=gen))
        if i < len(grids):
            t, h, w = grids[i]
            parts.append(torch.tensor([START] + [IMAGE] * (t * h * w // 4) + [END]))
    return torch.cat(parts)


def pixels(gen: torch.Generator, grids: list[tuple[int, int, int]]) -> torch.Tensor:
    n = sum(t * h * w for t, h, w in grids)
    return torch.randn(n, 3 * 2 * 16 * 16, generator=gen)


def right_pad(rows: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, torch.tensor([len(r) for r in rows])


def grid_tensor(grids) -> torch.Tensor | None:
    return torch.tensor(grids, dtype=torch.long) if grids else None
