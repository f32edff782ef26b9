"""What `oxygen-gym inspect` says about LoRA adapters: the checkpoint's own (`adapters/<name>/`), those named with
`--adapter NAME=PATH` (per task: language projections of the backbone only) and `--merge-adapter PATH` (merged into
the weights at load, changing the prefill and the action heads). Reads the JSON and safetensors headers only."""
from __future__ import annotations

import re
from pathlib import Path

from oxygen_gym.model.lora_bank import LANGUAGE_PROJECTIONS, AdapterError
from oxygen_gym.model.peft_adapter import _KEY, WEIGHTS_FILE, module_scale, read_peft_config

from ..task_adapters import ADAPTERS_DIR

_LANGUAGE = re.compile(
    rf"(vlm\.layers|vlm\.model\.language_model\.layers|paligemma\.model\.language_model\.layers)\.\d+\."
    rf"({'|'.join(map(re.escape, LANGUAGE_PROJECTIONS))})$"
)


def describe_adapter(folder: Path) -> tuple[str, bool]:
    """(one line: rank, alpha/scale, modules per part; whether it can be per task)."""
    from safetensors import safe_open

    cfg = read_peft_config(folder)
    with safe_open(str(folder / WEIGHTS_FILE), framework="pt", device="cpu") as f:
        modules = {}
        for key in f.keys():
            m = _KEY.match(key)
            if m is None:
                raise AdapterError(f"{folder}: tensor {key!r} is not a LoRA A/B weight")
            if m["which"] == "A":
                modules[m["module"]] = f.get_slice(key).get_shape()[0]
    per_task = all(_LANGUAGE.search(m) for m in modules)
    parts: dict[str, int] = {}
    for m in modules:
        part = "backbone language" if _LANGUAGE.search(m) else m.removeprefix("model.").split(".")[0]
        parts[part] = parts.get(part, 0) + 1
    scales = sorted({round(module_scale(cfg, m, r), 4) for m, r in modules.items()})
    text = (f"r={cfg['r']} alpha={cfg.get('lora_alpha')}{' rslora' if cfg.get('use_rslora') else ''} scale "
            f"{'/'.join(map(str, scales))}; {len(modules)} modules (" + ", ".join(f"{p} {n}" for p, n in sorted(parts.items())) + ")")
    return text, per_task


def adapter_lines(root: Path | None, adapters: dict[str, Path], merge: list[Path]) -> list[str]:
    own = sorted(p for p in (Path(root) / ADAPTERS_DIR).glob("*") if p.is_dir()) if root else []
    if not (own or adapters or merge):
        return ["adapters:   none"]
    lines = ["adapters:"]
    for folder in own:
        text, per_task = describe_adapter(folder)
        use = "per task (adapters=[%r])" % folder.name if per_task else "whole model: merge_adapters= only"
        lines.append(f"  {folder.name} (this checkpoint's {ADAPTERS_DIR}/{folder.name}/): {text}; {use}")
    for name, folder in adapters.items():
        text, per_task = describe_adapter(folder)
        verdict = "per task: its requests only, the prefill and actions stay the base model's" if per_task else (
            "REFUSED as a per-task adapter: it adapts modules outside the backbone's language projections")
        lines.append(f"  {name} ({folder}): {text}; {verdict}")
    for folder in merge:
        text, _ = describe_adapter(folder)
        lines.append(f"  merged into the weights at load ({folder}): {text}; the prefill and every task see it")
    return lines


def parse_adapter_args(items: list[str] | None) -> dict[str, Path]:
    out = {}
    for item in items or ():
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--adapter expects NAME=PATH, got {item!r}")
        out[name] = Path(path)
    return out
