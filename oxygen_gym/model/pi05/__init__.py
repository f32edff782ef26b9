"""The pi0.5 family (openpi / lerobot PI05): PaliGemma backbone (SigLIP + Gemma 2B) and a Gemma action expert with
adaRMS time conditioning, reading every backbone layer's KV (joint attention).

config.py     dimensions and the built-in configs          modeling.py  the staged model (engine interface)
gemma.py      decoder layers of both stacks                siglip.py    the vision tower
prompt.py     prompt and image processing                  prefix_inputs.py  the prefix bundle the engine batches
loading.py    checkpoints (ours, lerobot, openpi)          weights.py   key maps and dtype casts
init.py       random init of the built-in models           training.py  the training forward (same bodies)
"""
from .config import BUILTIN, BUILTIN_VOCAB, GemmaDims, PI05Config, VisionDims
from .prefix_inputs import PrefixInputs
from .modeling import PI05Model, Prefix, time_embedding

__all__ = ["BUILTIN", "BUILTIN_VOCAB", "GemmaDims", "PI05Config", "PI05Model", "Prefix", "PrefixInputs", "VisionDims", "time_embedding"]
