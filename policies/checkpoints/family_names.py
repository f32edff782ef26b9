"""The family table: one line per model family, naming the module that registers it (policies/family_api.py) and
the names `family=` accepts for its checkpoint folders. Plain strings, so the override checks (overrides.py) know
every name before any family is imported, and the registry (policies/model_io.py) imports the modules from here
(as transformers' auto classes map names to module paths: models/auto/configuration_auto.py). Adding a family is
its folder and one line here."""
from __future__ import annotations

# pi0.5's checkpoint layouts, told apart by checkpoints/family.py
OURS = "ours"
LEROBOT_04 = "lerobot<=0.4.4"
LEROBOT_05 = "lerobot>=0.5"
OPENPI = "openpi"
OPENPI_TRAINING = "openpi-training"
PI05_LAYOUTS = (OURS, LEROBOT_04, LEROBOT_05, OPENPI, OPENPI_TRAINING)

# family -> (the module that registers it, the `family=` names of its checkpoint folders); folders are offered to
# the families' `detects` in this order
FAMILY_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "pi05": ("oxygen_gym.policies.pi05_io", PI05_LAYOUTS),
    "xr0": ("oxygen_gym.policies.xr0_io", ("xr0",)),
    "starvla": ("oxygen_gym.policies.starvla_io", ("starvla",)),
}

CHECKPOINT_FAMILY_NAMES: tuple[str, ...] = tuple(n for _, names in FAMILY_TABLE.values() for n in names)
