"""Re-export of the engine-model seam, which lives in oxygen_gym/core/model_contract.py, below the engine and the
model families both, so that `from oxygen_gym.engine.model_api import ...` keeps working."""
from oxygen_gym.core.model_contract import ActionHead, EngineModel, KVLayout, PrefixState

__all__ = ["ActionHead", "EngineModel", "KVLayout", "PrefixState"]
