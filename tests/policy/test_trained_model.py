"""The shipped `libero-spatial` model: trained on fresh scenes of libero_spatial task 0 only (all 50 official init
states held out), it solves official init states in closed loop through the full MultiTaskPolicy engine, with eval's
defaults (openpi protocol, hard reset, full render), and narrates with the subtask sentences it learned.

The episode is deterministic on one CPU (fixed seed), not across CPUs: the kernels of an AVX2 and an AVX-512 machine
round differently and a closed loop amplifies that. So the test runs the first official init states in order (the
rule, not a search for one that works) and asks for one success. The model solves 96% of the official states with its
declared execution (model card; states 0, 1 and 2 with seed 7), so on a CPU kind it was not checked on, the three
failing together is unlikely (far below 1% if they were independent draws): add the next states in order then."""
from __future__ import annotations

import gymnasium as gym
import pytest

import oxygen_gym.envs  # noqa: F401
from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.envs import run_episode
from oxygen_gym.eval.libero.episode_set import EpisodeSpec
from oxygen_gym.eval.libero.narration import narration_accuracy, training_info, training_scenes
from oxygen_gym.eval.libero.worker import policy_seed
from oxygen_gym.model.trained import trained_model_dir
from oxygen_gym.policies.checkpoints.replan_steps import declared_replan_steps

OFFICIAL_INIT_STATES = (0, 1, 2)  # the first official init states, in order
SUBTASKS = {"reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate",
            "place the bowl on the plate", "release the bowl"}

pytestmark = pytest.mark.skipif(trained_model_dir("libero-spatial") is None, reason="libero-spatial weights not installed")


def _policy():
    info = training_info("libero-spatial")
    (task,) = info["language_tasks"]
    return MultiTaskPolicy.from_pretrained("libero-spatial", robot="libero", tasks=[LanguageTask(**task)], seed=0)


def _episode(env, policy, init_state: int):
    # the action-noise seed eval and `make demo` use for this episode (eval/libero/worker.py), so all three agree
    policy.reset(seed=policy_seed(EpisodeSpec("libero_spatial", 0, 7, init_state)))
    # the execution horizon eval runs by default: the checkpoint's declared replan_steps, else the protocol's
    return run_episode(env, policy, seed=7, init_state=init_state, replan=declared_replan_steps("libero-spatial"))


def test_the_shipped_model_never_trained_on_an_official_init_state():
    data = training_info("libero-spatial")["data"]
    assert not data.get("init_states") and training_scenes(data)  # fresh scenes only, every official one held out


@pytest.mark.timeout(900)  # ~40 s an episode on an idle 2-core machine
def test_the_shipped_model_solves_an_official_init_state_and_narrates_it():
    env = gym.make("oxygen_gym/LIBERO-v0", suite="libero_spatial", task_id=0, label_subtasks=True)  # eval's defaults
    tried = []
    try:
        with _policy() as policy:
            for init_state in OFFICIAL_INIT_STATES:
                result = _episode(env, policy, init_state)
                tried.append((init_state, result.steps))
                if result.success:
                    break
    finally:
        env.close()
    assert result.success, f"none of official init states {OFFICIAL_INIT_STATES} solved (state, steps): {tried}"
    finished = [r["text"] for r in result.narration if r["done"]]
    assert finished and set(finished) <= SUBTASKS
    acc = narration_accuracy(result.narration, result.subtask_labels)
    assert acc["accuracy"] >= 0.5, acc


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~25 s an episode on an idle 2-core machine (two evals side by side), ~5 min alone
def test_the_shipped_model_solves_official_init_states_0_to_9_through_eval(tmp_path):
    """More states than the default test, through `oxygen-gym eval` itself (its defaults: openpi protocol, hard reset,
    full render, seed 7), so a regression of the engine, the env or the weights shows as a rate, not one episode.
    Measured on the shipped model with its declared execution (model card, seed 7): 10 of 10 solved, narration 93.0%
    of 301 frames (6 of 10 and 75.1% with the reference sampler and replan 5). The bounds leave room for another CPU
    kind's rounding: at a true rate of 85%, 6 or fewer of 10 happens about 5% of the time, at the measured 96% well
    under 1%; the reference sampler's 6 of 10 fails it."""
    import json

    from oxygen_gym.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "libero", "--checkpoint", "libero-spatial", "--tasks", "0", "--init-states", "0-9",
                 "--seeds", "7", "--task", "narrate", "--max-new-tokens", "12", "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["ok"] == 10, summary["errors"]
    assert summary["held_out"]["held_out"]["episodes"] == 10  # every official state is held out of the data
    assert summary["overall"]["successes"] >= 7, summary["overall"]
    assert summary["narration"]["accuracy"] >= 0.8, summary["narration"]
