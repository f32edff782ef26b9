"""Qwen3-VL backbone over the engine's KV slots (vision tower, DeepStack, M-RoPE, GQA decoder)."""
