"""The shipped memory adapter (oxygen_gym/assets/libero-spatial/adapters/memory/): it loads by name, only its
language task goes through it (actions bit-identical with and without it loaded, narration unchanged), and it answers
"What did the robot do last?" on frames of held-out init state 35 (tests/fixtures/memory_heldout_init35.npz, recorded by
tools/memory_fixture.py from the scripted expert; labels from sim state, envs/scene_memory.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.eval.libero.narration import normalise, training_info
from oxygen_gym.model.trained import trained_model_dir

ROOT = trained_model_dir("libero-spatial")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "memory_heldout_init35.npz"
pytestmark = pytest.mark.skipif(ROOT is None or not (ROOT / "adapters" / "memory").is_dir(),
                                reason="libero-spatial memory adapter not installed")


def _tasks():
    (narrate,) = training_info("libero-spatial")["language_tasks"]
    memory = json.loads((ROOT / "adapters" / "memory" / "training.json").read_text())["language_task"]
    return [LanguageTask(narrate["name"], narrate["prompt"], 12), LanguageTask("memory", memory["prompt"], 12, adapter="memory")]


def _frames():
    d = np.load(FIXTURE)
    assert int(d["init_state"]) not in training_info("libero-spatial")["data"]["init_states"], "not held out"
    for i in range(len(d["label"])):
        obs = {"images": {"base": d["base"][i], "wrist": d["wrist"][i]}, "state": d["state"][i], "prompt": str(d["prompt"])}
        yield obs, str(d["label"][i])


def _answers(policy, obs) -> dict[str, str]:
    """Each task's text for the request started on `obs` (decode budget 16 >= 12 tokens: it finishes this frame)."""
    policy.reset(seed=0)
    actions, updates = policy.act(obs)
    texts = {u.task: u.text for u in updates if u.done}
    return actions, texts


def test_memory_adapter_loads_by_name_and_only_its_task_uses_it():
    narrate, memory = _tasks()
    with MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero", tasks=[narrate, memory], adapters=["memory"],
                                         decode_budget=16, seed=0) as policy, \
         MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero", tasks=[narrate, LanguageTask(
             "memory", memory.prompt, 12)], decode_budget=16, seed=0) as base:
        assert policy.adapters.names == ["memory"]
        base_right, frames = 0, 0
        for obs, label in _frames():
            frames += 1
            actions, texts = _answers(policy, obs)
            base_actions, base_texts = _answers(base, obs)
            assert np.array_equal(actions, base_actions), "the adapter reached the prefill or the action expert"
            assert texts["narrate"] == base_texts["narrate"], "the narration (base weights) changed"
            base_right += normalise(base_texts["memory"]) == normalise(label)
        assert base_right < frames, "the base weights answer the memory question alone: the adapter is not what is tested"


def test_memory_adapter_answers_where_the_bowl_is_on_a_held_out_init_state():
    narrate, memory = _tasks()
    with MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero", tasks=[memory], adapters=["memory"],
                                         decode_budget=16, seed=0) as policy:
        got = [(label, _answers(policy, obs)[1]["memory"]) for obs, label in _frames()]
    assert len({label for label, _ in got}) >= 3, f"the fixture covers too few answers: {got}"
    assert all(normalise(text) == normalise(label) for label, text in got), got


def test_demo_and_eval_run_the_memory_task_through_its_adapter_by_name():
    import argparse

    from oxygen_gym.eval import demo
    from oxygen_gym.policies.task_args import parse_language_task
    from oxygen_gym.eval.libero.narration import trained_language_tasks

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    cfg, _ = demo._config(parser.parse_args([]))
    assert [(t["name"], t.get("adapter")) for t in cfg.language_tasks] == [("narrate", None), ("memory", "memory")]
    task = parse_language_task("memory", 12, trained=trained_language_tasks("libero-spatial"))
    assert task == {"name": "memory", "prompt": "What did the robot do last?", "max_new_tokens": 12, "every": 1,
                    "adapter": "memory"}
