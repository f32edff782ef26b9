"""XR0's name for the Qwen3-VL prefix bundle it shares with StarVLA (oxygen_gym/model/qwen3_vl/prefix_inputs.py):
kept so `from oxygen_gym.model.xr0.xr0_prefix import XR0PrefixInputs` goes on working."""
from ..qwen3_vl.qwen_prefix_inputs import QwenPrefixInputs as XR0PrefixInputs

__all__ = ["XR0PrefixInputs"]
