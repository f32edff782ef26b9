"""Xiaomi-Robotics-0 on a Qwen3-VL backbone: its IO and built-ins, and its checkpoint folders."""
