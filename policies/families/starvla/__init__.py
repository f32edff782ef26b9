"""StarVLA (PI, GR00T and OFT heads on a Qwen3-VL backbone): its IO and built-ins, and its run folders."""
