"""Which project wrote a checkpoint folder, told from its files alone, and the layouts we refuse with a way out.

Families (what each one's own eval does with the same folder differs: resolve.py):
- `ours`: config.json with an `oxygen_gym` key (oxygen_gym.model.pi05.loading.save_pretrained).
- `lerobot>=0.5`: lerobot's config.json (`type`) with `use_relative_actions` (added in 0.5.1) or a
  `delta_actions_processor` step in its processor JSON.
- `lerobot<=0.4.4`: lerobot's config.json without those. lerobot 0.5.0 writes identical files, so this is a guess.
- `openpi`: the config.json of openpi's `examples/convert_jax_model_to_pytorch.py` (`action_horizon`, `precision`).
- `openpi-training`: no config.json (openpi `scripts/train_pytorch.py` saves model.safetensors, metadata.pt, assets/).
"""
from __future__ import annotations

import json
from pathlib import Path

from oxygen_gym.model.pi05.loading import CONFIG_FILE, OUR_KEY, WEIGHTS_FILE, CheckpointNotFoundError, read_config_json
from oxygen_gym.model.pi05.weights import CheckpointError

from .family_names import LEROBOT_04, LEROBOT_05, OPENPI, OPENPI_TRAINING, OURS
from .family_names import PI05_LAYOUTS as FAMILIES
LEROBOT = (LEROBOT_04, LEROBOT_05)


class CheckpointGuessWarning(UserWarning):
    """A convention the checkpoint does not record and that was guessed; the message names the override."""


class UnsupportedCheckpointError(CheckpointError):
    """A checkpoint layout or flag this package cannot run as its authors do; the message says what to do."""


def refuse_layouts(root: Path) -> None:
    """Layouts that hold a pi0.5 but not in one safetensors file we can read: say how to convert them."""
    if (root / "adapter_config.json").is_file() or (root / "adapter_model.safetensors").is_file():
        raise UnsupportedCheckpointError(
            f"{root} is a PEFT (LoRA) adapter, not a full checkpoint. Merge it into its base model first, e.g. "
            f"`peft.PeftModel.from_pretrained(base_policy, '{root}').merge_and_unload()` then save_pretrained, "
            f"and pass the merged folder."
        )
    if not (root / WEIGHTS_FILE).is_file():
        if (root / "model.safetensors.index.json").is_file():
            raise UnsupportedCheckpointError(
                f"{root} holds a sharded checkpoint (model.safetensors.index.json). Merge the shards into one "
                f"{WEIGHTS_FILE}: load every file the index names with safetensors.torch.load_file, merge the dicts, "
                f"and save_file(merged, '{WEIGHTS_FILE}', metadata={{'format': 'pt'}})."
            )
        if (root / "params").is_dir():
            raise UnsupportedCheckpointError(
                f"{root} is an openpi JAX (orbax) checkpoint (params/). Convert it to PyTorch with openpi's "
                f"`python examples/convert_jax_model_to_pytorch.py --checkpoint_dir {root} --config_name "
                f"<its train config, e.g. pi05_libero> --output_path <out>` and pass <out>."
            )
        raise CheckpointNotFoundError(f"{WEIGHTS_FILE} not found in checkpoint folder {root}")


def _processor_steps(root: Path) -> list[str]:
    names = []
    for file in ("policy_preprocessor.json", "policy_postprocessor.json"):
        path = root / file
        if path.is_file():
            try:
                steps = json.loads(path.read_text()).get("steps", [])
            except json.JSONDecodeError as err:
                raise CheckpointError(f"{path} is not valid JSON: {err}") from err
            names += [str(s.get("registry_name")) for s in steps if isinstance(s, dict)]
    return names


def detect_family(root: Path, cfg: dict | None = None) -> tuple[str, bool]:
    """(family, guessed) of a checkpoint folder; `cfg` is its config.json ({} when absent)."""
    cfg = read_config_json(root) if cfg is None else cfg
    if OUR_KEY in cfg:
        return OURS, False
    if "type" in cfg:
        if "use_relative_actions" in cfg or {"delta_actions_processor", "relative_actions_processor"} & set(
            _processor_steps(root)
        ):
            return LEROBOT_05, False
        return LEROBOT_04, True
    if not (root / CONFIG_FILE).is_file():
        return OPENPI_TRAINING, not ((root / "metadata.pt").is_file() or (root / "assets").is_dir())
    if "action_horizon" in cfg or "precision" in cfg:
        return OPENPI, False
    raise UnsupportedCheckpointError(
        f"{root / CONFIG_FILE} is neither lerobot's (no 'type'), openpi's converter output (no 'action_horizon'), "
        f"nor ours (no '{OUR_KEY}'); pass family= one of {FAMILIES} if you know which project wrote it"
    )


def refuse_flags(family: str, cfg: dict) -> None:
    """Config flags that change what the model computes in ways we do not implement: name them."""
    if family not in LEROBOT:
        return
    if cfg.get("type") != "pi05":
        raise UnsupportedCheckpointError(f"config.json 'type' is {cfg.get('type')!r}; only pi05 checkpoints are supported")
    flags = {
        "use_relative_actions": "actions relative to the state (lerobot's delta/absolute action processors)",
        "use_visual_memory": "MEM visual memory (past frames in SigLIP)",
        "use_proprioceptive_memory": "MEM proprioceptive memory (state tokens instead of prompt bins)",
        "use_peft": "a PEFT adapter config",
    }
    on = [f"{k} ({why})" for k, why in flags.items() if cfg.get(k)]
    if int(cfg.get("n_obs_steps", 1) or 1) != 1:
        on.append(f"n_obs_steps={cfg['n_obs_steps']} (observation history)")
    visual = str(cfg.get("normalization_mapping", {}).get("VISUAL", "IDENTITY"))
    if visual != "IDENTITY":
        on.append(f"normalization_mapping VISUAL={visual} (images are fed in [-1, 1] unnormalised)")
    if on:
        raise UnsupportedCheckpointError(f"config.json sets flags this package does not implement: {'; '.join(on)}")
