"""Qwen tokenizers as the policy uses them (`QwenTokenizer`: encode / decode / eos_id over a transformers tokenizer),
and the built-in tokenizer of random-weight Qwen3-VL models (xr0-*): byte-level, no merges, Qwen's special tokens
and a chat template in Qwen's format. Built from code with the `tokenizers` library, so nothing is downloaded and no
asset is shipped; a real checkpoint brings Qwen's own tokenizer instead.

Ids: bytes 0-255 are themselves (GPT-2's byte-to-unicode alphabet, as Qwen's byte-level BPE uses), then the special
tokens in `SPECIAL_TOKENS` order from 256: a built-in config's `image_token_id` etc. must use these ids.
"""
from __future__ import annotations

from functools import lru_cache

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
)
SPECIAL_IDS = {t: 256 + i for i, t in enumerate(SPECIAL_TOKENS)}
VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)

# Qwen's turn format (what its chat templates render for user/assistant turns without a system prompt): images as
# vision start, one image pad (the processor expands it to the grid), vision end.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@lru_cache(maxsize=1)
def builtin_qwen_tokenizer():
    """A `Qwen2TokenizerFast` (eos `<|im_end|>`, pad `<|endoftext|>`) with `CHAT_TEMPLATE`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    alphabet = bytes_to_unicode()
    tk = Tokenizer(models.BPE({alphabet[b]: b for b in range(256)}, [], fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(list(SPECIAL_TOKENS))  # ids 256.. in this order
    tok = Qwen2TokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        additional_special_tokens=list(SPECIAL_TOKENS), chat_template=CHAT_TEMPLATE,
    )
    got = tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if got != [SPECIAL_IDS[t] for t in SPECIAL_TOKENS]:
        raise RuntimeError(f"built-in Qwen tokenizer: special ids {got}, expected 256.. in order")
    return tok


class QwenTokenizer:
    """A transformers Qwen tokenizer behind the interface the policy and engine use (model/tokenizer.py
    `Tokenizer`): `encode` without special-token insertion (text continues a prefix), `decode`, `eos_id`. `hf` keeps
    the transformers object for the processor and its chat template."""

    def __init__(self, hf, eos_token: str = "<|im_end|>") -> None:
        self.hf = hf
        eos = hf.convert_tokens_to_ids(eos_token)
        if eos is None or eos == hf.unk_token_id:
            raise ValueError(f"tokenizer: no {eos_token!r} token (a Qwen chat tokenizer ends turns with it)")
        self.eos_id = int(eos)
        self.vocab_size = len(hf)
        self.name = getattr(hf, "name_or_path", "") or "qwen"

    def encode(self, text: str, bos: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids) -> str:
        return self.hf.decode(list(ids))

    def __repr__(self) -> str:
        return f"QwenTokenizer({self.name!r}, vocab {self.vocab_size})"
