"""`oxygen-gym serve`: openpi's websocket policy protocol; each connection is a robot session, and every robot's
frames and language requests run in one batched engine (oxygen_gym/engine/batch.py)."""
