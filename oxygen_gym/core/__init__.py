"""The seam below both the engine and the model families: the model API contract (`model_contract.py`), the KV
cache view (`kv_view.py`) and real-time chunking's guidance types (`guidance.py`). It imports neither side: the
engine drives models through it and every family implements it, so no model file imports the engine."""
