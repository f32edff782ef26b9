"""oxygen-gym: multi-task VLA inference with one KV cache shared across tasks and frames."""
__version__ = "0.1.0"
