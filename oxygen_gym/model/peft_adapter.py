"""PEFT LoRA folders (`adapter_config.json` + `adapter_model.safetensors`, as `PeftModel.save_pretrained` writes
them) read onto our module names, and written back in the same format (the adapter trainer exports with it).

PEFT stores `base_model.model.<module>.lora_A.weight [r, in]` and `.lora_B.weight [out, r]` per targeted module and
scales the update by `lora_alpha / r` (`lora_alpha / sqrt(r)` with `use_rslora`), with `rank_pattern` /
`alpha_pattern` overriding r and alpha per module (peft/tuners/lora/layer.py `update_layer`; patterns match a
module name's tail, peft/utils/other.py `get_pattern_key`). Dropout only acts in training and is ignored. Module
names are the adapted model's: ours, or a published checkpoint layout's (lerobot / openpi pi0.5 keys, XR0's
transformers names), mapped onto ours by the family's key table. Anything we cannot apply exactly (DoRA, biases,
embedding LoRA, modules_to_save, a module we do not have) is refused naming it.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .lora_bank import AdapterError, LoraWeights, language_modules

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$")


@dataclass
class PeftAdapter:
    """An adapter folder read for one model: its weights under our module names and what it can be used as."""

    path: Path
    config: dict
    weights: LoraWeights

    def outside_language(self, model: nn.Module) -> list[str]:
        """Modules that are not language projections of the backbone (none: the adapter can be per task)."""
        allowed = language_modules(model)
        return [m for m in self.weights.modules if m not in allowed]

    def parts(self) -> dict[str, int]:
        """Modules per part of the model (the first name component: vlm, vision, expert, ...)."""
        out: dict[str, int] = {}
        for m in self.weights.modules:
            out[m.split(".")[0]] = out.get(m.split(".")[0], 0) + 1
        return out


def read_peft_config(path: str | Path) -> dict:
    """`adapter_config.json` of a folder, checked for what we apply exactly."""
    root = Path(path)
    cfg_file = root / CONFIG_FILE
    if not cfg_file.is_file():
        raise AdapterError(f"{root}: no {CONFIG_FILE} (a PEFT LoRA folder holds {CONFIG_FILE} and {WEIGHTS_FILE})")
    cfg = json.loads(cfg_file.read_text())
    if cfg.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{cfg_file}: peft_type {cfg['peft_type']!r}; only LORA adapters are supported")
    refused = {
        "use_dora": (False, None), "bias": ("none", None), "fan_in_fan_out": (False, None),
        "modules_to_save": (None, [], ()), "lora_bias": (False, None), "layer_replication": (None,),
        "use_qalora": (False, None), "target_parameters": (None,), "trainable_token_indices": (None,),
        "alora_invocation_tokens": (None,), "use_bdlora": (None, False),
    }
    for key, fine in refused.items():
        value = cfg.get(key)
        if isinstance(value, list):
            value = value or None
        if value not in fine:
            raise AdapterError(f"{cfg_file}: {key}={value!r} is not supported (expected {fine[0]!r})")
    if not isinstance(cfg.get("r"), int) or cfg["r"] < 1:
        raise AdapterError(f"{cfg_file}: r must be a positive int, got {cfg.get('r')!r}")
    return cfg


def _pattern_value(patterns: dict, module: str, default):
    """PEFT's pattern lookup: a key matches a module whose name ends with it at a dot boundary."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def module_scale(cfg: dict, module: str, rank: int) -> float:
    r = _pattern_value(cfg.get("rank_pattern"), module, cfg["r"])
    if r != rank:
        raise AdapterError(f"module {module!r}: lora_A has rank {rank} but the config gives r={r}")
    alpha = _pattern_value(cfg.get("alpha_pattern"), module, cfg.get("lora_alpha", 8))
    return alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank


def read_peft(path: str | Path, model: nn.Module, name: str | None = None) -> PeftAdapter:
    """A PEFT LoRA folder as weights on `model`'s modules (names mapped by `our_module_name`)."""
    from safetensors.torch import load_file

    root = Path(path)
    adapter = name or root.name
    cfg = read_peft_config(root)
    weights_file = root / WEIGHTS_FILE
    if not weights_file.is_file():
        raise AdapterError(f"{root}: no {WEIGHTS_FILE}")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(str(weights_file)).items():
        m = _KEY.match(key)
        if m is None:
            raise AdapterError(f"adapter {adapter!r}: tensor {key!r} is not a LoRA A/B weight (DoRA magnitudes, "
                               "embedding LoRA and saved modules are not supported)")
        pairs.setdefault(m["module"], {})[m["which"]] = tensor
    if not pairs:
        raise AdapterError(f"adapter {adapter!r}: {weights_file} holds no LoRA weights")
    modules, scales = {}, {}
    ours = dict(model.named_modules())
    for peft_name, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"adapter {adapter!r}: module {peft_name!r} has lora_{''.join(ab)} only")
        target = our_module_name(model, peft_name, ours)
        if target in modules:
            raise AdapterError(f"adapter {adapter!r}: modules {peft_name!r} and another both map to {target!r}")
        modules[target] = (ab["A"].float(), ab["B"].float())
        scales[target] = module_scale(cfg, peft_name, ab["A"].shape[0])
    return PeftAdapter(root, cfg, LoraWeights(modules, scales))


def our_module_name(model: nn.Module, peft_name: str, ours: dict[str, nn.Module] | None = None) -> str:
    """Our module for a PEFT module name: ours as is (a PEFT model built over our classes, or XR0, whose names are
    the published ones), else a pi0.5 checkpoint layout's key mapped by its loader's table (pi05/weights.py)."""
    ours = ours if ours is not None else dict(model.named_modules())
    if peft_name in ours:
        return peft_name
    from .pi05.modeling import PI05Model

    if isinstance(model, PI05Model):
        from .pi05.weights import CheckpointError, our_name

        try:
            mapped = our_name(peft_name + ".weight")
        except CheckpointError:
            mapped = None
        if mapped is not None and mapped.endswith(".weight") and mapped[: -len(".weight")] in ours:
            return mapped[: -len(".weight")]
    raise AdapterError(f"adapter module {peft_name!r}: no such module in this model (neither our name nor a known "
                       "checkpoint layout's)")


def write_peft(path: str | Path, weights: LoraWeights, *, rank: int, alpha: float, target_modules: list[str],
               base_model: str | None = None, module_names: dict[str, str] | None = None) -> Path:
    """A PEFT folder PEFT itself loads (`PeftModel.from_pretrained`): config + `base_model.model.*` tensors.
    `module_names`: our name -> the name to store (a published layout's), default ours."""
    from safetensors.torch import save_file

    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    names = module_names or {}
    tensors = {}
    for m, (a, b) in weights.modules.items():
        stored = PEFT_PREFIX + names.get(m, m)
        tensors[f"{stored}.lora_A.weight"] = a.detach().float().contiguous().cpu()
        tensors[f"{stored}.lora_B.weight"] = b.detach().float().contiguous().cpu()
    cfg = {
        "peft_type": "LORA", "task_type": None, "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
        "use_rslora": False, "bias": "none", "fan_in_fan_out": False, "target_modules": sorted(target_modules),
        "modules_to_save": None, "init_lora_weights": True, "use_dora": False, "rank_pattern": {}, "alpha_pattern": {},
        "base_model_name_or_path": base_model, "inference_mode": True,
    }
    save_file(tensors, str(root / WEIGHTS_FILE))
    (root / CONFIG_FILE).write_text(json.dumps(cfg, indent=2))
    return root
