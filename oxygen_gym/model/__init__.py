"""Model families behind the engine's interface (oxygen_gym/core/model_contract.py), plus what they share: layers,
the oneDNN CPU kernel path, tokenizers, dataset statistics. pi0.5 (pi05/) is the first family.

The reference-compatible seam (docs/api.md):
    from oxygen_gym.model import GemmaDims, VisionDims, PI05Config, load_pretrained
    model = load_pretrained(path, config=cfg, device="cpu", dtype=torch.float32)
    actions = model.sample_actions(images, image_masks, tokens, token_masks, noise=noise, num_steps=10)
"""
from .pi05.config import BUILTIN_VOCAB, GemmaDims, PI05Config, VisionDims
from .pi05.init import build_model, count_parameters
from ..core.kv_view import KVCache
from .pi05.loading import CheckpointNotFoundError, load_pretrained, save_pretrained
from .norm_stats import NormStats, load_norm_stats
from .pi05 import PI05Model, Prefix, PrefixInputs
from .pi05.prompt import (
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
from .pi05.weights import CheckpointError, cast_for_inference, checkpoint_keys

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
    "PrefixInputs",
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
