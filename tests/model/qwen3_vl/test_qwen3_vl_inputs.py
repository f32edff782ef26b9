"""Prompts built by transformers' Qwen3-VL processor (tiny offline tokenizer + Qwen2VLImageProcessor), fed to the
backbone: the image pads match the grids, and the backbone's greedy tokens equal transformers' on them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from qwen3_vl_tiny import make_pair
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import Qwen2TokenizerFast, Qwen2VLImageProcessor

from oxygen_gym.model.qwen3_vl.qwen_inputs import ImageOnlyQwen3VLProcessor, processor_inputs

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
           "<|vision_end|>"]  # ids 0..6: image 3, video 4, vision start 5, vision end 6, as qwen3_vl_tiny's config
WORDS = ["user", "assistant", "pick", "up", "the", "red", "cup", "put", "it", "in", "bowl"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} "
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|> "
    "{% else %}{{ c['text'] }} {% endif %}{% endfor %}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


@pytest.fixture(scope="module")
def processor():
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS + ["[UNK]"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = Qwen2TokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                             additional_special_tokens=SPECIAL)
    images = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=32 * 32,
                                   max_pixels=96 * 96)
    return ImageOnlyQwen3VLProcessor(images, tok, chat_template=TEMPLATE)


def test_image_pads_match_the_grids(processor):
    rng = np.random.default_rng(0)
    ims = [rng.integers(0, 256, (70, 100, 3), dtype=np.uint8), rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)]
    p = processor_inputs(processor, ims, "pick up the red cup")
    ids = p.input_ids[0]
    assert p.image_grid_thw.tolist() == [[1, 4, 6], [1, 4, 2]]  # smart resize: 70x100 -> 64x96, 48x40 -> 64x32
    assert int((ids == 3).sum()) == int(p.image_grid_thw.prod(-1).sum()) // 4
    assert p.pixel_values.shape == (int(p.image_grid_thw.prod(-1).sum()), 3 * 2 * 16 * 16)
    starts = (ids == 5).nonzero()[:, 0].tolist()
    assert len(starts) == 2 and ids[starts[0] + 1 : starts[0] + 7].eq(3).all() and int(ids[starts[0] + 7]) == 6
    assert processor.tokenizer.convert_ids_to_tokens(ids[-2:].tolist()) == ["<|im_start|>", "assistant"]


def test_text_only_prompt(processor):
    p = processor_inputs(processor, [], "put it in the bowl")
    assert p.pixel_values is None and p.image_grid_thw is None and not bool((p.input_ids == 3).any())


def test_rejects_non_uint8_images(processor):
    with pytest.raises(ValueError, match=r"images\[0\] must be uint8"):
        processor_inputs(processor, [np.zeros((32, 32, 3), np.float32)], "cup")


def test_backbone_generates_like_transformers_on_processor_inputs(processor):
    ref, ours = make_pair("gqa2_tied_ds1")
    rng = np.random.default_rng(1)
    p = processor_inputs(processor, [rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)], "pick up the cup")
    with torch.no_grad():
        want = ref.generate(input_ids=p.input_ids, pixel_values=p.pixel_values, image_grid_thw=p.image_grid_thw,
                            max_new_tokens=6, do_sample=False)
    got = ours.generate(p.input_ids, p.pixel_values, p.image_grid_thw, max_new_tokens=6)
    assert got == want[0, p.input_ids.shape[1]:].tolist()
