"""lerobot 0.4.4's GR00T N1.5 action head, imported from the installed wheel without `lerobot.policies`' package
init (which imports every policy and the datasets stack): the two parent packages are registered by path, then the
real `action_head` modules load as they are. Install: `pip install --no-deps lerobot==0.4.4 diffusers draccus`."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path


def groot_action_head_module():
    """`lerobot.policies.groot.action_head.flow_matching_action_head` (pytest.importorskip's caller skips without)."""
    spec = importlib.util.find_spec("lerobot")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("lerobot is not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    for name, rel in (("lerobot.policies", "policies"), ("lerobot.policies.groot", "policies/groot")):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root / rel)]
            sys.modules[name] = pkg
    return importlib.import_module("lerobot.policies.groot.action_head.flow_matching_action_head")
