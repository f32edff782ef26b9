"""Xiaomi-Robotics-0: a Qwen3-VL backbone with a DiT action expert reading the KV of its last layers."""
