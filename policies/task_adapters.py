"""A policy's LoRA adapters: per-task ones (PEFT folders over the backbone's language projections, routed per
request, model/lora_bank.py) and whole-model ones merged into the weights at load (fine-tuned checkpoints).

`from_pretrained(..., adapters={"memory": PATH})` loads folders; `adapters=["memory"]` loads the checkpoint's own,
`<checkpoint>/adapters/<name>/`. Loading and unloading at run time touch only the adapter bank, never the KV pool.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from oxygen_gym.engine.request import Request
from oxygen_gym.model.lora_bank import AdapterError, bank_of, merge_into
from oxygen_gym.model.peft_adapter import read_peft

from .language import LanguageTask

ADAPTERS_DIR = "adapters"


def checkpoint_adapters(root: Path | None, adapters) -> dict[str, Path] | None:
    """`adapters` as name -> folder: a mapping as given, a list of names as `<root>/adapters/<name>/`."""
    if adapters is None:
        return None
    if isinstance(adapters, Mapping):
        return {str(k): Path(v) for k, v in adapters.items()}
    if isinstance(adapters, str) or not isinstance(adapters, Iterable):
        raise AdapterError(f"adapters: expected {{name: folder}} or a list of the checkpoint's adapter names, got {adapters!r}")
    names = list(adapters)
    if root is None:
        raise AdapterError(f"adapters={names}: a list names a checkpoint's own {ADAPTERS_DIR}/<name>/ folders; this "
                           "model has no folder, pass {name: folder} instead")
    out = {}
    for n in names:
        folder = Path(root) / ADAPTERS_DIR / n
        if not folder.is_dir():
            have = sorted(p.name for p in (Path(root) / ADAPTERS_DIR).glob("*") if p.is_dir())
            raise AdapterError(f"adapters: {root} has no adapter {n!r} ({ADAPTERS_DIR}/{n}/); it has {have}")
        out[n] = folder
    return out


class TaskAdapters:
    """The per-task adapters of one model (shared by a policy's server sessions)."""

    def __init__(self, model) -> None:
        self.model = model

    @property
    def names(self) -> list[str]:
        bank = getattr(self.model, "lora", None)
        return sorted(bank.names) if bank is not None else []

    def load(self, name: str, path: str | Path) -> int:
        """Read a PEFT folder and give it a slot; refused (naming the module) unless every module it adapts is a
        language projection of the backbone."""
        if not isinstance(name, str) or not name:
            raise AdapterError(f"adapter name must be a non-empty string, got {name!r}")
        adapter = read_peft(path, self.model, name)
        outside = adapter.outside_language(self.model)
        if outside:
            other = outside[0]
            raise AdapterError(
                f"adapter {name!r} ({path}) adapts {other!r}, outside the backbone's language projections: it "
                "would change the shared prefill or an action head, so it cannot be per task; merge it into the "
                "weights instead (merge_adapters=[folder])"
            )
        return bank_of(self.model).load(name, adapter.weights)

    def unload(self, name: str, in_flight: list[Request], tasks: list[LanguageTask]) -> None:
        bank = getattr(self.model, "lora", None)
        if bank is None or name not in bank.names:
            raise AdapterError(f"adapter {name!r} is not loaded; loaded: {self.names}")
        slot = bank.names[name]
        busy = [r.request_id for r in in_flight if r.adapter == slot]
        if busy:
            raise AdapterError(f"adapter {name!r} is in use by in-flight request(s) {busy}; unload it after they finish")
        users = [t.name for t in tasks if t.adapter == name]
        if users:
            raise AdapterError(f"adapter {name!r} is the adapter of task(s) {users} of this policy")
        bank.unload(name)

    def slot_of(self, task: LanguageTask) -> int:
        if task.adapter is None:
            return 0
        bank = getattr(self.model, "lora", None)
        if bank is None or task.adapter not in bank.names:
            raise AdapterError(f"task {task.name!r}: adapter {task.adapter!r} is not loaded; loaded: {self.names}")
        return bank.names[task.adapter]


def merge_adapters(model, folders) -> list[dict]:
    """Merge whole-model PEFT adapters into `model`'s weights (PEFT's merge_and_unload); what `inspect` states."""
    merged = []
    for folder in folders or ():
        adapter = read_peft(folder, model)
        parts = merge_into(model, adapter.weights, str(folder))
        merged.append({"path": str(folder), "modules": len(adapter.weights.modules), "parts": parts,
                       "rank": adapter.weights.rank})
    return merged


def setup(policy, adapters, merge, tasks: list[LanguageTask]) -> TaskAdapters:
    """A policy's adapters at construction: merge first (it changes the base), then load the per-task ones, then
    check that every task's adapter is loaded."""
    policy.merged_adapters = merge_adapters(policy.model, merge)
    out = TaskAdapters(policy.model)
    for name, folder in (checkpoint_adapters(None, adapters) or {}).items():
        out.load(name, folder)
    for t in tasks:
        out.slot_of(t)
    return out
