"""`oxygen-gym inspect NAME` for a built-in random-weight model of any family: its dims, heads, KV layout and slot
size, and (for models small enough to build here) the prefix an example observation becomes."""
from __future__ import annotations

import json

import numpy as np
import torch

from .checkpoints.overrides import ConventionOverrides
from .model_io import family_of_builtin
from .robots import get_robot

BUILD_LIMIT = 200_000_000  # parameters: above this the example prefix is skipped (the weights are not built)


def builtin_report(name: str, robot: str, prompt: str) -> str:
    family = family_of_builtin(name)
    spec = get_robot(robot)
    with torch.device("meta"):
        meta, _, _ = family.build_builtin(name, spec, torch.device("meta"), torch.float32, ConventionOverrides(), 0)
    params = sum(p.numel() for p in meta.parameters())
    kv = meta.kv_layout
    capacity = meta.max_prefix_length()
    lines = [
        f"built-in model {name!r} (family {family.name}, random weights from seed): {params / 1e6:.1f} M parameters",
        f"KV layout: {kv.layers} layers x {kv.kv_heads} KV heads x head_dim {kv.head_dim}; "
        f"{kv.row_bytes(capacity, torch.float32) / 2**20:.2f} MiB per slot of {capacity} positions (fp32)",
        "action heads (horizon, denoise steps, action dim):",
        *[f"  {h.name}: {h.horizon}, {h.num_steps}, {h.action_dim}" + (" (writes its K/V after the prefix)" if h.writes_cache else "")
          for h in meta.action_heads.values()],
        f"robot {spec.name}: cameras {list(spec.cameras)}, state {spec.state_dim}, action {spec.action_dim}, horizon {spec.horizon}",
        "dims: " + json.dumps(meta.config.to_json(), default=str)[:2000],
    ]
    if params > BUILD_LIMIT:
        lines.append(f"example prefix: skipped ({params / 1e9:.2f} B parameters are not built by inspect)")
        return "\n".join(lines)
    from .multitask import MultiTaskPolicy

    with MultiTaskPolicy.from_pretrained(name, robot=spec, num_slots=1) as policy:
        rng = np.random.default_rng(0)
        images = {cam: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for cam in spec.cameras}
        obs = {"images": images, "state": np.zeros(spec.state_dim, np.float32), "prompt": prompt}
        inputs = policy.model_inputs(obs)
        n = policy.model.prefix_length(inputs)
        ids = getattr(inputs, "input_ids", getattr(inputs, "tokens", None))
        text = policy.tokenizer.decode(ids[0].tolist()) if ids is not None else ""
    lines += [f"example prefix (robot state all zeros): {n} cache positions", f"  text: {text!r}"]
    return "\n".join(lines)
