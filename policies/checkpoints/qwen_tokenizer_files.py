"""The Qwen tokenizer of a checkpoint on a Qwen3-VL backbone (XR0, StarVLA): `tokenizer=` when given (a folder or a tokenizer object), else the one the
checkpoint folder ships (tokenizer.json / tokenizer_config.json, read by transformers' AutoTokenizer), else an error.

physical-ai-studio's port loads its processor from the base model `Qwen/Qwen3-VL-4B-Instruct` at a pinned revision
(`policies/xr0/preprocessor.py` `XR0Preprocessor.processor`), not from the checkpoint: a folder without tokenizer
files needs that tokenizer passed in. Either way it must be the one the config's special ids belong to."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from oxygen_gym.model.qwen3_vl.qwen_tokenizer import QwenTokenizer
from oxygen_gym.model.qwen3_vl.backbone_config import BackboneViews

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
BASE_TOKENIZER = "Qwen/Qwen3-VL-4B-Instruct"  # physical-ai-studio `policies/xr0/policy.py` vlm_model_id


def has_tokenizer_files(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def _from_folder(folder: Path, what: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - any failure means: not a tokenizer transformers can read
        raise ValueError(f"tokenizer: {what} {folder} could not be read by transformers.AutoTokenizer "
                         f"({type(err).__name__}: {err}); pass tokenizer= a Qwen tokenizer folder") from err


def find_qwen_tokenizer(root: Path, override: Any, config: BackboneViews) -> tuple[QwenTokenizer, str]:
    """(tokenizer, where from); checked against the config's image-pad id and vocabulary."""
    if isinstance(override, QwenTokenizer):
        tok, source = override, "tokenizer= object"
    elif override is not None and hasattr(override, "convert_tokens_to_ids"):
        tok, source = QwenTokenizer(override), f"tokenizer= {type(override).__name__}"
    elif isinstance(override, (str, os.PathLike)):
        folder = Path(override).expanduser()
        if not folder.is_dir() or not has_tokenizer_files(folder):
            raise ValueError(f"tokenizer: {override!s} is not a folder holding a Qwen tokenizer "
                             f"(one of {list(TOKENIZER_FILES)})")
        tok, source = QwenTokenizer(_from_folder(folder, "the folder")), f"tokenizer= {folder}"
    elif override is not None:
        raise ValueError(f"tokenizer: expected a Qwen tokenizer folder or object for a Qwen3-VL checkpoint, got "
                         f"{type(override).__name__}")
    elif has_tokenizer_files(root):
        tok, source = QwenTokenizer(_from_folder(root, "the checkpoint's tokenizer files in")), f"{root} (its own)"
    else:
        raise ValueError(
            f"tokenizer: checkpoint {root} ships no tokenizer files ({', '.join(TOKENIZER_FILES)}); pass "
            f"tokenizer= the folder of its base model's tokenizer ({BASE_TOKENIZER}, downloaded elsewhere) or a "
            f"QwenTokenizer"
        )
    _check(tok, source, config)
    return tok, source


def _check(tok: QwenTokenizer, source: str, config: BackboneViews) -> None:
    vocab = int(config.text_config["vocab_size"])
    if tok.vocab_size > vocab:
        raise ValueError(f"tokenizer ({source}) has {tok.vocab_size} tokens, the checkpoint's embedding {vocab}: "
                         f"not this checkpoint's tokenizer")
    image_id = int(config.backbone["image_token_id"])
    if tok.hf.convert_ids_to_tokens(image_id) != "<|image_pad|>":
        raise ValueError(f"tokenizer ({source}): id {image_id} (config.json image_token_id) is "
                         f"{tok.hf.convert_ids_to_tokens(image_id)!r}, not '<|image_pad|>': not this checkpoint's "
                         f"tokenizer")
    if not getattr(tok.hf, "chat_template", None):
        raise ValueError(f"tokenizer ({source}) has no chat template: the prompt is a Qwen3-VL chat "
                         f"(pass a tokenizer whose tokenizer_config.json or chat_template.jinja has one)")
