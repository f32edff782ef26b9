"""The family table: one line per model family, naming the module that registers it (policies/family_api.py), the
names `family=` accepts for its checkpoint folders and its built-in models. Plain strings, so the override checks
(overrides.py) and the commands' `--checkpoint` check (names.py) know every name before any family is imported, and the registry (policies/model_io.py) imports the modules from here
(as transformers' auto classes map names to module paths: models/auto/configuration_auto.py). Adding a family is
its folder and one line here."""
from __future__ import annotations

from typing import NamedTuple

# pi0.5's checkpoint layouts, told apart by checkpoints/family.py
OURS = "ours"
LEROBOT_04 = "lerobot<=0.4.4"
LEROBOT_05 = "lerobot>=0.5"
OPENPI = "openpi"
OPENPI_TRAINING = "openpi-training"
PI05_LAYOUTS = (OURS, LEROBOT_04, LEROBOT_05, OPENPI, OPENPI_TRAINING)

class FamilyLine(NamedTuple):
    module: str  # the module whose import registers the family (policies/family_api.py `register_family`)
    checkpoint_families: tuple[str, ...]  # the names `family=` accepts for its checkpoint folders
    builtins: tuple[str, ...]  # its built-in models with random weights (checked by name before torch is imported)


# folders are offered to the families' `detects` in this order
FAMILY_TABLE: dict[str, FamilyLine] = {
    "pi05": FamilyLine("oxygen_gym.policies.families.pi05.pi05_io", PI05_LAYOUTS,
                       ("tiny", "small", "compact", "pi05", "multi-tiny", "multi-small", "compact-128", "compact-wide")),
    "xr0": FamilyLine("oxygen_gym.policies.families.xr0.xr0_io", ("xr0",), ("xr0-tiny", "xr0-small", "xr0")),
    "starvla": FamilyLine("oxygen_gym.policies.families.starvla.starvla_io", ("starvla",),
                          ("starvla-tiny", "starvla-small", "starvla-4b")),
}

CHECKPOINT_FAMILY_NAMES: tuple[str, ...] = tuple(n for line in FAMILY_TABLE.values() for n in line.checkpoint_families)
