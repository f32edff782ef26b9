"""oxygen-gym: multi-task VLA inference with one KV cache shared across tasks and frames."""
__version__ = "0.1.0"

__all__ = ["LanguageTask", "LanguageUpdate", "MultiTaskPolicy", "RTCConfig"]


def __getattr__(name: str):
    # Lazy, so `import oxygen_gym` stays light and the core never imports policies at import time.
    if name in __all__:
        from oxygen_gym import policies

        return getattr(policies, name)
    raise AttributeError(f"module 'oxygen_gym' has no attribute {name!r}")
