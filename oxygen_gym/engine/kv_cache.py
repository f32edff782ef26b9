"""Re-export of `KVCache`, which lives in oxygen_gym/core/kv_view.py, below the engine and the model families both,
so that `from oxygen_gym.engine.kv_cache import KVCache` keeps working."""
from oxygen_gym.core.kv_view import KVCache

__all__ = ["KVCache"]
