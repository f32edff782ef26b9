"""Wrong configs and wrong prompts fail before any compute, naming the field."""
from __future__ import annotations

import pytest
import torch
from qwen3_vl_tiny import IMAGE, grid_tensor, make_pair, pixels, prompt, tiny_config

from oxygen_gym.model.qwen3_vl import Qwen3VLBackbone, Qwen3VLSpec

G = (1, 4, 6)


@pytest.fixture(scope="module")
def model():
    return make_pair("mha_untied_nods")[1]


def inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return prompt(gen, [G], [2, 3])[None], pixels(gen, [G]), grid_tensor([G])


def test_spec_reads_the_config():
    spec = Qwen3VLSpec.from_hf(tiny_config("gqa2_tied_ds1", eos=9))
    assert spec.tie_word_embeddings and spec.eos_token_ids == (9,)
    assert spec.text.mrope_section == (4, 2, 2) and spec.vision.deepstack_indexes == (1,)
    assert spec.vision.grid_side == 8 and spec.vision.patch_dim == 1536
    assert not Qwen3VLSpec.from_hf(tiny_config("gqa4_untied_ds2")).tie_word_embeddings


@pytest.mark.parametrize("edit,match", [
    (lambda c: c.text_config.rope_scaling.update(mrope_section=[2, 2, 2]), "mrope_section"),
    (lambda c: c.text_config.rope_scaling.update(mrope_interleaved=False), "mrope_interleaved"),
    (lambda c: c.text_config.rope_scaling.update(rope_type="yarn"), "rope_type"),
    (lambda c: setattr(c.vision_config, "num_position_embeddings", 20), "num_position_embeddings"),
    (lambda c: setattr(c.vision_config, "deepstack_visual_indexes", [5]), "deepstack_visual_indexes"),
    (lambda c: setattr(c.text_config, "num_key_value_heads", 3), "num_key_value_heads"),
])
def test_bad_configs(edit, match):
    cfg = tiny_config("gqa4_untied_ds2")
    edit(cfg)
    with pytest.raises(ValueError, match=match):
        Qwen3VLBackbone(cfg)


def test_wrong_number_of_image_tokens(model):
    ids, pv, thw = inputs()
    short = ids[:, torch.arange(ids.shape[1]) != int((ids[0] == IMAGE).nonzero()[0])]
    with pytest.raises(ValueError, match=r"input_ids hold 5 image tokens .* image_grid_thw \[\[1, 4, 6\]\] needs 6"):
        model.prefill(model.new_cache(1, 32), short, pv, thw)


def test_pixel_rows_and_width(model):
    ids, pv, thw = inputs()
    with pytest.raises(ValueError, match=r"pixel_values has 20 rows but image_grid_thw \[\[1, 4, 6\]\] needs 24"):
        model.prefill(model.new_cache(1, 32), ids, pv[:20], thw)
    with pytest.raises(ValueError, match=r"pixel_values must be \[patches, 1536\]"):
        model.prefill(model.new_cache(1, 32), ids, pv[:, :100], thw)
    with pytest.raises(ValueError, match="spatial_merge_size"):
        model.prefill(model.new_cache(1, 32), ids, pixels(torch.Generator(), [(1, 3, 8)]), grid_tensor([(1, 3, 8)]))
    with pytest.raises(ValueError, match="pixel_values is None"):
        model.prefill(model.new_cache(1, 32), ids)


def test_split_image_run_and_padding(model):
    ids, pv, thw = inputs()
    split = ids.clone()
    first = int((ids[0] == IMAGE).nonzero()[0])
    split[0, first + 2] = 9  # a text token inside the image's run: 2 + 4 tokens, the grid wants 6 in a row
    split = torch.cat([split, torch.tensor([[IMAGE]])], 1)
    with pytest.raises(ValueError, match=r"image 0 \(image_grid_thw \[1, 4, 6\]\) needs 6 consecutive image tokens"):
        model.prefill(model.new_cache(1, 32), split, pv, thw)
    left = torch.ones_like(ids)
    left[0, 0] = 0
    with pytest.raises(ValueError, match="right-padded"):
        model.prefill(model.new_cache(1, 32), ids, pv, thw, attention_mask=left)
    with pytest.raises(ValueError, match="cache of 1 rows x 8 positions"):
        model.prefill(model.new_cache(1, 8), ids, pv, thw)


def test_attention_mask_equals_lengths(model):
    gen = torch.Generator().manual_seed(1)
    rows = [prompt(gen, [G], [2, 3]), prompt(gen, [], [4])]
    ids = torch.zeros(2, len(rows[0]), dtype=torch.long)
    ids[0], ids[1, :4] = rows[0], rows[1]
    mask = (torch.arange(ids.shape[1])[None] < torch.tensor([[len(rows[0])], [4]])).long()
    pv, thw = pixels(gen, [G]), grid_tensor([G])
    a = model.prefill(model.new_cache(2, 32), ids, pv, thw, attention_mask=mask)
    b = model.prefill(model.new_cache(2, 32), ids, pv, thw, lengths=torch.tensor([len(rows[0]), 4]))
    assert torch.equal(a.hidden, b.hidden) and a.lengths.tolist() == [len(rows[0]), 4]
    assert a.next_positions.tolist() == [len(rows[0]) - 6 + 3, 4]  # 6 image tokens on a 2x3 merged grid: +3
