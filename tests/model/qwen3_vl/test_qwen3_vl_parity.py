"""Qwen3VLBackbone against transformers' Qwen3VLForConditionalGeneration (4.57, eager attention, fp32) on tiny
random configs: GQA 4:1 / 2:1 / 1:1, tied and untied heads, DeepStack on two layers / one / off, images of two grid
sizes, and a right-padded batch of prompts of different lengths (the reference runs each prompt alone).

The reference is called with use_cache=True: without a cache or an attention mask, transformers 4.57 reads the
M-RoPE text positions as packed sequences (masking_utils.find_packed_sequence_indices) and masks across each image.
"""
from __future__ import annotations

import pytest
import torch
from qwen3_vl_tiny import CONFIGS, IMAGE, grid_tensor, make_pair, pixels, prompt, right_pad

from oxygen_gym.model.qwen3_vl.mrope import mrope_positions

# Tolerances (max abs error): ~5x what CPU fp32 measured on these configs (torch 2.13, transformers 4.57.6):
LOGITS_TOL = 3e-6  # measured 5.7e-7 (|logits| <= 1.1)
K_TOL = 4e-5  # measured 8.3e-6: keys are per-head RMS-normed (|k| <= 4.5), which amplifies upstream rounding
V_TOL = 3e-6  # measured 6.3e-7
HIDDEN_TOL = 1e-6  # measured 1.7e-7, every recorded hidden state
NORMED_TOL = 2e-5  # measured 5.0e-6: the final norm divides by an RMS of ~0.03 (random weights), ~30x amplification
VISION_TOL = 5e-7  # measured 8.4e-8, merged tokens and DeepStack features

G1, G2 = (1, 4, 6), (1, 2, 2)  # two image sizes: 6 and 1 merged tokens
# per row: (images, text runs between them); row 1 is text only, row 2 has two images
BATCH = [([G1], [3, 4]), ([], [6]), ([G2, G1], [2, 3, 5])]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    return make_pair(request.param)


def batch_inputs(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    rows = [prompt(gen, grids, lens) for grids, lens in BATCH]
    pvs = [pixels(gen, grids) for grids, _ in BATCH]
    return rows, pvs


def reference(ref, row, grids, pv):
    with torch.no_grad():
        return ref(
            input_ids=row[None], pixel_values=pv if grids else None, image_grid_thw=grid_tensor(grids),
            output_hidden_states=True, use_cache=True,
        )


@pytest.fixture(scope="module")
def prefilled(pair):
    ref, ours = pair
    rows, pvs = batch_inputs()
    ids, lengths = right_pad(rows)
    grids = grid_tensor([g for grids, _ in BATCH for g in grids])
    cache = ours.new_cache(len(rows), 48)
    pre = ours.prefill(cache, ids, torch.cat(pvs), grids, lengths=lengths, output_hidden_states=True)
    refs = [reference(ref, row, gr, pv) for row, (gr, _), pv in zip(rows, BATCH, pvs)]
    return rows, pvs, cache, pre, refs


def test_vision_tower_matches(pair):
    ref, ours = pair
    gen = torch.Generator().manual_seed(2)
    for grids in ([G1], [G2, G1], [(1, 6, 4)]):
        pv, thw = pixels(gen, grids), grid_tensor(grids)
        with torch.no_grad():
            want, want_ds = ref.model.visual(pv, grid_thw=thw)
        got, got_ds = ours.model.visual(pv, thw)
        assert got.shape == want.shape and len(got_ds) == len(want_ds) == len(ref.config.vision_config.deepstack_visual_indexes)
        assert (got - want).abs().max() <= VISION_TOL
        for g, w in zip(got_ds, want_ds, strict=True):
            assert (g - w).abs().max() <= VISION_TOL


def test_positions_equal_get_rope_index_of_a_left_padded_batch(pair):
    """Our right-padded rows against transformers' left-padded batch with an attention mask: equal on valid tokens."""
    ref, ours = pair
    rows, _ = batch_inputs()
    ids, lengths = right_pad(rows)
    left = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for b, row in enumerate(rows):
        left[b, ids.shape[1] - len(row):], mask[b, ids.shape[1] - len(row):] = row, 1
    grids = grid_tensor([g for grids, _ in BATCH for g in grids])
    want, deltas = ref.model.get_rope_index(left, grids, attention_mask=mask)
    got, nxt = mrope_positions(ids, lengths, grids, IMAGE, 2)
    assert got.shape == want.shape == (3, len(rows), ids.shape[1])
    for b, row in enumerate(rows):
        n = len(row)
        assert torch.equal(got[:, b, :n], want[:, b, ids.shape[1] - n:])
        assert int(nxt[b]) == int(want[:, b].max()) + 1 == ids.shape[1] + int(deltas[b, 0])


def test_prefill_logits_and_next_positions(pair, prefilled):
    ref, ours = pair
    rows, _, _, pre, refs = prefilled
    for b, (row, out) in enumerate(zip(rows, refs)):
        n = len(row)
        assert int(pre.lengths[b]) == n
        err = (ours.lm_logits(pre.hidden[b, :n]) - out.logits[0]).abs().max()
        assert err <= LOGITS_TOL, f"row {b}: {err:.2e}"
        # transformers continues at cache_position + rope_deltas = n + (max position + 1 - n)
        assert int(pre.next_positions[b]) == n + int(out.rope_deltas[0, 0])
    assert pre.next_positions.tolist() != pre.lengths.tolist()  # image rows: position != cache index


def test_prefill_kv_matches_past_key_values(pair, prefilled):
    rows, _, cache, _, refs = prefilled
    for b, (row, out) in enumerate(zip(rows, refs)):
        n = len(row)
        assert len(out.past_key_values.layers) == cache.k.shape[0]
        for i, layer in enumerate(out.past_key_values.layers):
            assert (cache.k[i, b, :, :n] - layer.keys[0]).abs().max() <= K_TOL, f"row {b} layer {i} keys"
            assert (cache.v[i, b, :, :n] - layer.values[0]).abs().max() <= V_TOL, f"row {b} layer {i} values"


def test_hidden_states_match_output_hidden_states(pair, prefilled):
    """transformers records the embeddings, then each layer's output after DeepStack's in-place add, the last
    un-normed (Qwen3VLForConditionalGeneration; Qwen3VLModel swaps the last for the normed state)."""
    ref, _ = pair
    rows, _, _, pre, refs = prefilled
    assert len(pre.hidden_states) == ref.config.text_config.num_hidden_layers + 1
    for b, (row, out) in enumerate(zip(rows, refs)):
        n = len(row)
        assert len(out.hidden_states) == len(pre.hidden_states)
        for i, (got, want) in enumerate(zip(pre.hidden_states, out.hidden_states)):
            assert (got[b, :n] - want[0]).abs().max() <= HIDDEN_TOL, f"row {b} hidden state {i}"
        with torch.no_grad():
            normed = ref.model.language_model.norm(out.hidden_states[-1][0])
        assert (pre.hidden[b, :n] - normed).abs().max() <= NORMED_TOL


def test_deepstack_changes_image_tokens_only_when_configured(pair, prefilled):
    """Guards the test itself: with DeepStack on, the first layers' image-token states carry the visual features."""
    ref, ours = pair
    rows, pvs, _, _, _ = prefilled
    row, pv = rows[0], pvs[0]
    cache = ours.new_cache(1, 48)
    full = ours.prefill(cache, row[None], pv, grid_tensor([G1]), output_hidden_states=True)
    deepstack = ours.model.visual.forward
    try:  # the same tower with its DeepStack features zeroed
        ours.model.visual.forward = lambda p, g: (lambda e, d: (e, [x * 0 for x in d]))(*deepstack(p, g))
        plain = ours.prefill(cache, row[None], pv, grid_tensor([G1]), output_hidden_states=True)
    finally:
        del ours.model.visual.forward
    image = row == IMAGE
    diff = (full.hidden_states[1][0] - plain.hidden_states[1][0]).abs().amax(-1)
    if ref.config.vision_config.deepstack_visual_indexes:
        assert bool((diff[image] > 1e-3).all()) and float(diff[~image].max()) == 0.0
    else:
        assert float(diff.max()) == 0.0


@pytest.mark.parametrize("grids", [[G1], [G2, (1, 6, 4)]])
def test_generate_matches_hf_greedy(pair, grids):
    ref, ours = pair
    gen = torch.Generator().manual_seed(3)
    row = prompt(gen, grids, [2] * (len(grids) + 1))
    pv, thw = pixels(gen, grids), grid_tensor(grids)
    with torch.no_grad():
        want = ref.generate(input_ids=row[None], pixel_values=pv, image_grid_thw=thw, max_new_tokens=12, do_sample=False)
    assert ours.generate(row[None], pv, thw, max_new_tokens=12) == want[0, len(row):].tolist()


def test_generate_stops_at_eos():
    ref, ours = make_pair("gqa2_tied_ds1")
    gen = torch.Generator().manual_seed(4)
    row, pv, thw = prompt(gen, [G1], [3, 3]), pixels(gen, [G1]), grid_tensor([G1])
    free = ours.generate(row[None], pv, thw, max_new_tokens=10)
    eos = free[3]
    ref_eos, ours_eos = make_pair("gqa2_tied_ds1", eos=eos)
    with torch.no_grad():
        want = ref_eos.generate(input_ids=row[None], pixel_values=pv, image_grid_thw=thw, max_new_tokens=10, do_sample=False)
    got = ours_eos.generate(row[None], pv, thw, max_new_tokens=10)
    assert got == want[0, len(row):].tolist() == free[: free.index(eos) + 1]


def test_bf16_stays_within_bf16_noise_of_transformers():
    """bf16 weights and cache (fp32 pixels in): within bf16 rounding of transformers' own bf16 run. Measured max abs
    logit error 5.9e-3 ours vs transformers bf16 (transformers bf16 vs fp32: 6.8e-3): bound 2.5e-2, ~4x."""
    ref, ours = make_pair("gqa4_untied_ds2")
    ref, ours = ref.to(torch.bfloat16), ours.to(torch.bfloat16)
    gen = torch.Generator().manual_seed(3)
    row, pv, thw = prompt(gen, [G1], [3, 4]), pixels(gen, [G1]), grid_tensor([G1])
    with torch.no_grad():
        want = ref(input_ids=row[None], pixel_values=pv, image_grid_thw=thw, use_cache=True).logits[0].float()
    cache = ours.new_cache(1, 32)
    pre = ours.prefill(cache, row[None], pv, thw)
    assert cache.k.dtype == torch.bfloat16 and pre.hidden.dtype == torch.bfloat16
    assert (ours.lm_logits(pre.hidden[0]) - want).abs().max() <= 2.5e-2
    logits = ours.decode_step(cache, row[-1:], pre.next_positions, pre.lengths, read_len=32)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
