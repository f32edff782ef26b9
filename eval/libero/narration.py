"""Narration accuracy and held-out bookkeeping for trained checkpoints.

Narration accuracy: the fraction of policy calls whose narration request (started on that call's observation)
finished with text naming the subtask the sim-state labeller (envs/experts.SubtaskLabeller) gives for that same
observation. The label is computed from the state the policy acted on, never from an expert's plan, so it scores any
policy's rollout honestly. A request that never finished (episode ended) counts as wrong.

Held-out: a checkpoint trained by `oxygen-gym train` records in training.json the init states, fresh scenes and tasks
of its data; an episode is held out only if its (task, init state) or (task, scene) was not among them.
"""
from __future__ import annotations

import json
from pathlib import Path


def normalise(text: str) -> str:
    return " ".join(str(text).lower().replace(".", " ").split())


def frame_correctness(narration: list[dict], labels: list, task: str = "narrate") -> list[bool | None] | None:
    """Per policy call: whether the `task` request started on that call's observation finished naming its label
    (None for a call without a label), or None when nothing is labelled or the task did not run. The accuracy and
    its plot over time (eval/eval_plots.py) both count from this."""
    if not labels or not any(x is not None for x in labels):
        return None
    by_frame = {int(r["frame"]): r for r in narration if r.get("task") == task}
    if not by_frame:
        return None
    out: list[bool | None] = []
    for frame, label in enumerate(labels):
        req = by_frame.get(frame)
        out.append(None if label is None else
                   bool(req and req.get("done") and normalise(req["text"]) == normalise(label)))
    return out


def narration_accuracy(narration: list[dict], labels: list, task: str = "narrate") -> dict | None:
    """{"frames", "correct", "accuracy"} over the calls that have a label, or None when nothing is labelled or the
    task did not run (an eval without a memory task reports no memory accuracy, not 0%)."""
    per_frame = frame_correctness(narration, labels, task)
    if per_frame is None:
        return None
    scored = [c for c in per_frame if c is not None]
    frames, correct = len(scored), sum(scored)
    return {"frames": frames, "correct": correct, "accuracy": correct / frames if frames else None}


def training_info(checkpoint: str) -> dict:
    """A trained checkpoint's training.json (recipe, data, language tasks), or {} for any other checkpoint."""
    from oxygen_gym.model.trained import trained_model_dir

    folder = trained_model_dir(checkpoint) or Path(str(checkpoint))
    path = folder / "training.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def training_data(checkpoint: str) -> dict | None:
    """The `data` block of a trained checkpoint's training.json (init states, tasks), or None."""
    return training_info(checkpoint).get("data")


def trained_language_tasks(checkpoint: str) -> dict[str, dict]:
    """name -> {name, prompt, max_new_tokens[, adapter]} of the language tasks a checkpoint was trained for: its
    own (training.json) and those of its adapters (`adapters/<name>/training.json`, `oxygen-gym train --adapter`),
    each named after its adapter."""
    tasks = {t["name"]: t for t in training_info(checkpoint).get("language_tasks", [])}
    folder = _checkpoint_folder(checkpoint)
    for path in sorted(folder.glob("adapters/*/training.json")) if folder else ():
        name, task = path.parent.name, json.loads(path.read_text()).get("language_task") or {}
        if task.get("prompt"):
            tasks[name] = {"name": name, "prompt": task["prompt"], "adapter": name,
                           **({"max_new_tokens": task["max_new_tokens"]} if "max_new_tokens" in task else {})}
    return tasks


def _checkpoint_folder(checkpoint: str) -> Path | None:
    from oxygen_gym.model.trained import trained_model_dir

    folder = trained_model_dir(checkpoint) or Path(str(checkpoint))
    return folder if folder.is_dir() else None


def data_collections(data: dict | None) -> list[dict]:
    """The `oxygen-gym collect` configs a checkpoint's data came from: training.json holds one, or a list when the
    model trained on several collections (`oxygen-gym train --data A,B`, e.g. demonstrations plus DAgger rollouts)."""
    collect = (data or {}).get("collect") or []
    return collect if isinstance(collect, list) else [collect]


def training_scenes(data: dict) -> set[int]:
    """The fresh scene indices a checkpoint trained on. A training.json from before `scenes` was recorded falls back
    to the scenes its collection asked for (a superset of the kept demos': an episode is never called held out
    wrongly)."""
    if "scenes" in data:
        return {int(k) for k in data["scenes"]}
    return {int(k) for c in data_collections(data) for k in c.get("fresh_scenes") or []}


def is_held_out(data: dict | None, task_name: str | None, init_state: int | None,
                scene: int | None = None) -> bool | None:
    """True/False for a trained checkpoint, None when the checkpoint says nothing about its data. A fresh scene is
    compared with the training data's scenes, an official init state with its init states (so official states stay
    held out against fresh-scene data)."""
    if not data or "init_states" not in data:
        return None
    if data.get("tasks") and task_name not in data["tasks"]:
        return True
    if scene is not None:
        return int(scene) not in training_scenes(data)
    return int(init_state) not in set(data["init_states"])
