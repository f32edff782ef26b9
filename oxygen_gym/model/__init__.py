"""pi0.5 model core: config, weights, tokenizer and prompt building, and the staged model (prefill, denoise, decode).

The reference-compatible seam (api.md):
    from oxygen_gym.model import GemmaDims, VisionDims, PI05Config, load_pretrained
    model = load_pretrained(path, config=cfg, device="cpu", dtype=torch.float32)
    actions = model.sample_actions(images, image_masks, tokens, token_masks, noise=noise, num_steps=10)
"""
from .config import BUILTIN_VOCAB, GemmaDims, PI05Config, VisionDims
from .init import build_model, count_parameters
from .kv import KVCache
from .loading import CheckpointNotFoundError, load_pretrained, save_pretrained
from .norm_stats import NormStats, load_norm_stats
from .pi05 import PI05Model, Prefix
from .prompt import (
    clean_instruction,
    discretize_state,
    missing_image,
    preprocess_image,
    prompt_ids,
    prompt_text,
    resize_with_pad,
    tokenize_prompt,
)
from .tokenizer import (
    SentencePieceTokenizer,
    Tokenizer,
    TokenizerNotFoundError,
    builtin_tokenizer,
    paligemma_tokenizer,
    tokenizer_for,
)
from .weights import CheckpointError, cast_for_inference, checkpoint_keys

__all__ = [
    "BUILTIN_VOCAB",
    "CheckpointError",
    "CheckpointNotFoundError",
    "GemmaDims",
    "KVCache",
    "NormStats",
    "PI05Config",
    "PI05Model",
    "Prefix",
    "SentencePieceTokenizer",
    "Tokenizer",
    "TokenizerNotFoundError",
    "VisionDims",
    "build_model",
    "builtin_tokenizer",
    "cast_for_inference",
    "checkpoint_keys",
    "clean_instruction",
    "count_parameters",
    "discretize_state",
    "load_norm_stats",
    "load_pretrained",
    "missing_image",
    "paligemma_tokenizer",
    "preprocess_image",
    "prompt_ids",
    "prompt_text",
    "resize_with_pad",
    "save_pretrained",
    "tokenize_prompt",
    "tokenizer_for",
]
