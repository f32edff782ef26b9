"""StarVLA: Qwen3-VL with up to three action heads on one prefill (PI_v3, GR00T N1.5, OFT)."""
from .starvla_config import HEAD_NAMES, GR00TDims, OFTDims, PIDims, StarVLAConfig
from .starvla_model import StarVLAModel, build_starvla

__all__ = ["GR00TDims", "HEAD_NAMES", "OFTDims", "PIDims", "StarVLAConfig", "StarVLAModel", "build_starvla"]
