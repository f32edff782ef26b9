"""Qwen3-VL backbone over the engine's KV slots (vision tower, DeepStack, M-RoPE, GQA decoder)."""
from .backbone import Qwen3VLBackbone, Qwen3VLPrefill
from .qwen_config import Qwen3VLSpec

__all__ = ["Qwen3VLBackbone", "Qwen3VLPrefill", "Qwen3VLSpec"]
