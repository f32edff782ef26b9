"""Perturbed expert collection (train/collect/perturb.py): what each step executes, the key's determinism, and that a
perturbed LIBERO demo stores the state expert's label of every state it visited."""
from __future__ import annotations

import numpy as np
import pytest
from state_expert_replay import assert_replay_labels_match

from oxygen_gym.train.collect.collector import CollectConfig
from oxygen_gym.train.collect.perturb import FLIP_SHARE, PUSH_STEPS, PUSH_UNITS, PerturbingActor

LABEL = np.array([0.1, -0.2, 0.3, 0.0, 0.0, 0.0, -1.0], np.float32)


def _run(rate: float, steps: int = 400, seed: int = 3, noise_std: float = 0.0):
    actor = PerturbingActor(rate, replan=5, noise_std=noise_std, rng=np.random.default_rng(seed))
    return actor, np.stack([actor({}, LABEL) for _ in range(steps)])


def test_rate_zero_without_noise_executes_the_label():
    actor, executed = _run(rate=0.0)
    assert np.array_equal(executed, np.tile(LABEL, (400, 1))) and actor.perturbations == 0


def test_noise_moves_only_the_position_and_stays_in_range():
    _, executed = _run(rate=0.0, noise_std=0.3)
    assert np.array_equal(executed[:, 3:], np.tile(LABEL[3:], (400, 1)))
    assert 0.2 < np.std(executed[:, :3] - LABEL[:3]) < 0.4 and np.abs(executed[:, :3]).max() <= 1.0


def test_perturbations_are_constant_pushes_of_the_stated_size_and_length_some_flipping_the_gripper():
    actor, executed = _run(rate=0.3, steps=2000)
    perturbed = np.abs(executed[:, :3] - LABEL[:3]).max(axis=1) > 1e-6
    assert perturbed.sum() == actor.perturbed_steps and 20 < actor.perturbations < 200
    runs, flips, t = [], 0, 0
    while t < len(executed):  # split the perturbed steps into runs of one push each
        if not perturbed[t]:
            t += 1
            continue
        start = t
        while t < len(executed) and perturbed[t] and np.array_equal(executed[t, :3], executed[start, :3]):
            t += 1
        runs.append(t - start)
        assert PUSH_UNITS[0] - 1e-6 <= np.linalg.norm(executed[start, :3]) <= PUSH_UNITS[1] + 1e-6
        flipped = executed[start:t, 6] == -LABEL[6]
        assert flipped.all() or not flipped.any()  # a push flips the gripper for all its steps or none
        flips += bool(flipped.all())
    assert len(runs) == actor.perturbations  # each perturbation is one run of one push
    assert min(runs) >= PUSH_STEPS[0] and max(runs) <= PUSH_STEPS[1]
    assert 0.5 * FLIP_SHARE < flips / len(runs) < 1.5 * FLIP_SHARE
    assert (executed[~perturbed, 6] == LABEL[6]).all()


def test_the_same_key_gives_the_same_perturbations_and_another_key_others():
    _, first = _run(rate=0.3, noise_std=0.3)
    _, again = _run(rate=0.3, noise_std=0.3)
    _, other = _run(rate=0.3, noise_std=0.3, seed=4)
    assert np.array_equal(first, again) and not np.array_equal(first, other)


def test_bad_rates_and_two_drivers_are_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--perturb"):
        PerturbingActor(1.0, 5, 0.3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="--perturb"):
        CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=-0.1)
    with pytest.raises(ValueError, match="--perturb and --dagger"):
        CollectConfig(init_states=(), fresh_scenes=(0,), perturb_rate=0.2, dagger_checkpoint="tiny")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_perturbed_demo_stores_the_state_experts_label_of_every_state_it_visited(tmp_path):
    """Replaying the executed actions from the same scene visits the same states, and the state expert labels them
    exactly as stored; the perturbation really ran (executed differs from the label by more than the noise)."""
    pytest.importorskip("libero")
    from oxygen_gym.train.collect.collector import collect, task_file
    from oxygen_gym.train.collect.libero_hdf5 import read_demos

    cfg = CollectConfig(init_states=(), fresh_scenes=(3,), variants=2, workers=1, camera_size=64, max_steps=30,
                        perturb_rate=0.9)
    counts = collect(cfg, tmp_path, progress=False)
    assert counts["kept"] == 2 and counts["succeeded"] == 0  # 30 steps are too few to finish: kept anyway
    clean, perturbed = read_demos(task_file(tmp_path, "libero_spatial", 0))
    assert np.array_equal(clean.executed_actions, clean.actions) and "perturbations" not in clean.attrs
    assert perturbed.attrs["perturbations"] >= 1 and perturbed.attrs["perturb_rate"] == 0.9
    pushed = np.abs(perturbed.executed_actions[:, :3] - perturbed.actions[:, :3]).max(axis=1) > 1e-6
    assert pushed.sum() >= perturbed.attrs["perturbed_steps"]
    assert_replay_labels_match(task_file(tmp_path, "libero_spatial", 0), perturbed)
