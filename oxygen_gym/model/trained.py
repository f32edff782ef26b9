"""Trained built-in models shipped inside the package: name -> checkpoint folder in our own layout
(config.json with an `oxygen_gym` key, model.safetensors, lerobot-style normaliser files). Unlike `tiny`/`small`/
`pi05` (random weights, config.BUILTIN), these load like any checkpoint folder."""
from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"

TRAINED_MODELS: dict[str, Path] = {
    "libero-spatial": ASSETS / "libero-spatial",
}


def trained_model_dir(name: str) -> Path | None:
    """The folder of a shipped trained model, or None when `name` is not one (or its weights are not installed)."""
    path = TRAINED_MODELS.get(name) if isinstance(name, str) else None
    return path if path is not None and (path / "model.safetensors").is_file() else None
