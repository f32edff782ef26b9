"""Qwen3VLBackbone against transformers on configs drawn at random (seeded), not chosen by hand: layer counts, head
counts and GQA ratio, head_dim and its M-RoPE split, DeepStack layers, merge grid, tied or untied head, image sizes
and prompt layout all vary. Greedy generation must match exactly, the prompt's logits within tolerance.

Tolerance: the hand-picked configs measured 5.7e-7 on logits (test_qwen3_vl_parity.py); these drawn ones measured
3.1e-7 to 1.1e-6 over seeds 101-707 (CPU fp32, |logits| <= 1.5), so 5e-6."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from oxygen_gym.model.qwen3_vl import Qwen3VLBackbone

LOGITS_TOL = 5e-6
IMAGE, VIDEO, START, END, FIRST_TEXT = 3, 4, 5, 6, 7


def drawn_config(seed: int) -> tuple[Qwen3VLConfig, list[tuple[int, int, int]]]:
    rng = np.random.default_rng(seed)
    kv = int(rng.choice([1, 2, 4]))
    heads = kv * int(rng.choice([1, 2, 4]))
    head_dim = int(rng.choice([8, 16, 32]))
    half = head_dim // 2
    t = int(rng.integers(1, half - 1))
    h = int(rng.integers(1, half - t))
    section = [t, h, half - t - h]
    depth_v = int(rng.integers(1, 4))
    deepstack = sorted(rng.choice(depth_v, size=int(rng.integers(0, depth_v + 1)), replace=False).tolist())
    layers = max(int(rng.integers(1, 5)), len(deepstack))
    tied = bool(rng.integers(0, 2))
    side = int(rng.choice([4, 8]))  # learned position table side (num_position_embeddings = side^2)
    width = heads * head_dim if rng.random() < 0.5 else 48  # the hidden size need not be heads * head_dim
    cfg = Qwen3VLConfig(
        text_config=dict(
            vocab_size=int(rng.integers(40, 120)), hidden_size=width,
            intermediate_size=int(rng.choice([64, 96])), num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=kv, head_dim=head_dim, rope_theta=float(rng.choice([1e4, 1e6])),
            max_position_embeddings=2048, tie_word_embeddings=tied,
            rope_scaling={"rope_type": "default", "mrope_section": section, "mrope_interleaved": True},
        ),
        vision_config=dict(
            depth=depth_v, hidden_size=32, intermediate_size=48, num_heads=int(rng.choice([2, 4])), out_hidden_size=width,
            patch_size=16, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
            num_position_embeddings=side * side, deepstack_visual_indexes=deepstack,
        ),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
        tie_word_embeddings=tied,
    )
    cfg._attn_implementation = "eager"
    grids = [(1, 2 * int(rng.integers(1, 4)), 2 * int(rng.integers(1, 4))) for _ in range(int(rng.integers(1, 3)))]
    return cfg, grids


@pytest.mark.parametrize("seed", [101, 202, 303, 404, 505, 606])
def test_drawn_config_matches_transformers(seed):
    cfg, grids = drawn_config(seed)
    torch.manual_seed(seed)
    ref = Qwen3VLForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # norms away from 1, so a skipped or misplaced norm shows
        for n, p in ref.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.add_(0.3 * torch.randn_like(p))
    ours = Qwen3VLBackbone.from_config(cfg)
    ours.load_state_dict(ref.state_dict(), strict=True)
    gen = torch.Generator().manual_seed(seed)
    vocab = cfg.text_config.vocab_size
    parts = [torch.randint(FIRST_TEXT, vocab, (3,), generator=gen)]
    for t, h, w in grids:
        parts += [torch.tensor([START] + [IMAGE] * (t * h * w // 4) + [END]), torch.randint(FIRST_TEXT, vocab, (2,), generator=gen)]
    ids = torch.cat(parts)[None]
    n_patches = sum(t * h * w for t, h, w in grids)
    pix = torch.randn(n_patches, 3 * 2 * 16 * 16, generator=gen)
    grid = torch.tensor(grids)
    with torch.no_grad():
        want = ref(input_ids=ids, pixel_values=pix, image_grid_thw=grid, use_cache=True).logits[0].float()
        want_ids = ref.generate(input_ids=ids, pixel_values=pix, image_grid_thw=grid, max_new_tokens=6, do_sample=False)
    cache = ours.new_cache(1, ids.shape[1] + 8)
    pre = ours.prefill(cache, ids, pix, grid)
    got = ours.lm_logits(pre.hidden)[0]
    torch.testing.assert_close(got, want, atol=LOGITS_TOL, rtol=0)
    assert ours.generate(ids, pix, grid, max_new_tokens=6) == want_ids[0, ids.shape[1]:].tolist()
