"""Continuations over the prefilled cache: extend and decode_step equal transformers run on the whole sequence,
their static form (read_len = capacity, no host reads) equals the eager one, and positions are M-RoPE positions,
not cache indices."""
from __future__ import annotations

import pytest
import torch
from qwen3_vl_tiny import FIRST_TEXT, VOCAB, grid_tensor, make_pair, pixels, prompt, right_pad
from torch.overrides import TorchFunctionMode

from oxygen_gym.engine.kv_cache import KVCache

# Tolerances: ~5x the max abs errors measured on CPU fp32 over three configs (torch 2.13, transformers 4.57.6).
LOGITS_TOL = 2e-6  # continuation logits vs transformers over prompt + continuation: measured 3.7e-7
# static vs eager: only the count of masked-out keys differs (SDPA sums in other blocks), then layers carry it on
STATIC_HIDDEN_TOL = 5e-6  # measured 1.2e-6 (final-normed, |h| <= 4.5)
STATIC_LOGITS_TOL = 1e-6  # measured 1.8e-7
STATIC_K_TOL = 7e-6  # measured 1.7e-6 (per-head normed keys of the continuation tokens)
STATIC_V_TOL = 1e-6  # measured 1.5e-7

G1, G2 = (1, 4, 6), (1, 2, 2)
BATCH = [([G1], [3, 4]), ([], [6]), ([G2, G1], [2, 3, 5])]
CAPACITY = 40
T = 3  # continuation tokens


class NoHostReads(TorchFunctionMode):
    """Fails on any read of tensor values into Python (what a CUDA graph capture cannot contain)."""

    BANNED = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
              torch.Tensor.__index__, torch.Tensor.__float__, torch.Tensor.nonzero, torch.nonzero}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.BANNED:
            raise AssertionError(f"host read {func} in the static form")
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module", params=["gqa4_untied_ds2", "mha_untied_nods"])
def setup(request):
    ref, ours = make_pair(request.param)
    gen = torch.Generator().manual_seed(5)
    rows = [prompt(gen, grids, lens) for grids, lens in BATCH]
    pvs = [pixels(gen, grids) for grids, _ in BATCH]
    cont = torch.randint(FIRST_TEXT, VOCAB, (len(rows), T + 1), generator=gen)
    ids, lengths = right_pad(rows)
    cache = ours.new_cache(len(rows), CAPACITY)
    pre = ours.prefill(cache, ids, torch.cat(pvs), grid_tensor([g for gr, _ in BATCH for g in gr]), lengths=lengths)
    return ref, ours, rows, pvs, cont, cache, pre


def clone(cache: KVCache) -> KVCache:
    return KVCache(cache.k.clone(), cache.v.clone())


def reference_logits(ref, row, grids, pv, cont):
    """transformers over prompt + continuation, alone: the continuation's logits."""
    with torch.no_grad():
        out = ref(input_ids=torch.cat([row, cont])[None], pixel_values=pv if grids else None,
                  image_grid_thw=grid_tensor(grids), use_cache=True)
    return out.logits[0, len(row):]


def test_extend_then_decode_match_transformers(setup):
    ref, ours, rows, pvs, cont, cache, pre = setup
    cache = clone(cache)
    hidden = ours.extend(cache, cont[:, :T], pre.lengths, pre.next_positions)
    logits = ours.decode_step(cache, cont[:, T], pre.next_positions + T, pre.lengths + T)
    for b, (row, (grids, _), pv) in enumerate(zip(rows, BATCH, pvs)):
        want = reference_logits(ref, row, grids, pv, cont[b])
        assert (ours.lm_logits(hidden[b]) - want[:T]).abs().max() <= LOGITS_TOL, f"extend row {b}"
        assert (logits[b] - want[T]).abs().max() <= LOGITS_TOL, f"decode row {b}"


def test_static_forms_equal_eager(setup):
    _, ours, _, _, cont, cache, pre = setup
    eager, static = clone(cache), clone(cache)
    h_eager = ours.extend(eager, cont[:, :T], pre.lengths, pre.next_positions)
    l_eager = ours.decode_step(eager, cont[:, T], pre.next_positions + T, pre.lengths + T)
    ours.rope(pre.next_positions[None].expand(3, -1)[..., None])  # the rope tables are made eagerly, before capture
    with NoHostReads():
        h_static = ours.extend(static, cont[:, :T], pre.lengths, pre.next_positions, read_len=CAPACITY)
        l_static = ours.decode_step(static, cont[:, T], pre.next_positions + T, pre.lengths + T, read_len=CAPACITY)
    assert (h_static - h_eager).abs().max() <= STATIC_HIDDEN_TOL
    assert (l_static - l_eager).abs().max() <= STATIC_LOGITS_TOL
    assert (static.k - eager.k).abs().max() <= STATIC_K_TOL
    assert (static.v - eager.v).abs().max() <= STATIC_V_TOL


def test_static_form_ignores_stale_entries(setup):
    """Entries past a row's sequence (another request's leftovers) must not leak into the static form."""
    _, ours, _, _, cont, cache, pre = setup
    clean, dirty = clone(cache), clone(cache)
    for b, n in enumerate(pre.lengths.tolist()):
        dirty.k[:, b, :, n:] = 7.0
        dirty.v[:, b, :, n:] = -7.0
    a = ours.decode_step(clean, cont[:, 0], pre.next_positions, pre.lengths, read_len=CAPACITY)
    b = ours.decode_step(dirty, cont[:, 0], pre.next_positions, pre.lengths, read_len=CAPACITY)
    assert torch.equal(a, b)  # masked keys get exactly zero weight


def test_position_is_not_the_cache_index(setup):
    """Image rows continue at max position + 1, below their cache length; the text-only row has both equal."""
    ref, ours, rows, pvs, cont, cache, pre = setup
    assert pre.next_positions.tolist()[1] == pre.lengths.tolist()[1]
    assert all(p < n for p, n in zip(pre.next_positions.tolist()[::2], pre.lengths.tolist()[::2]))
    wrong = ours.decode_step(clone(cache), cont[:, 0], pre.lengths, pre.lengths)  # position = cache index
    right = ours.decode_step(clone(cache), cont[:, 0], pre.next_positions, pre.lengths)
    want = reference_logits(ref, rows[0], BATCH[0][0], pvs[0], cont[0, :1])[0]
    assert (right[0] - want).abs().max() <= LOGITS_TOL
    assert (wrong[0] - want).abs().max() > 100 * LOGITS_TOL
