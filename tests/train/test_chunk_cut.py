"""Chunk labels past a gripper disagreement or a lost object are not targets (train/chunk_cut.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from oxygen_gym.model import PI05Config, builtin_tokenizer
from oxygen_gym.train.chunk_cut import predictable_chunk_lengths
from oxygen_gym.train.dataset import DemoDataset, compute_norm_stats
from oxygen_gym.train.trainer import TrainConfig

from test_train_data import synthetic_demo

REACH, GRASP, CARRY, PLACE, RELEASE = ("reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate",
                                       "place the bowl on the plate", "release the bowl")
H = 10


def _episode(subtasks: list[str], gripper: list[float]) -> tuple[np.ndarray, list[str]]:
    actions = np.zeros((len(subtasks), 7), np.float32)
    actions[:, 6] = gripper
    return actions, subtasks


def test_the_experts_own_episode_keeps_every_label():
    labels = [REACH] * 8 + [GRASP] * 6 + [CARRY] * 10 + [PLACE] * 4 + [RELEASE] * 5
    actions, subtasks = _episode(labels, [-1] * 10 + [1] * 18 + [-1] * 5)
    lengths = predictable_chunk_lengths(actions, actions.copy(), subtasks, H)
    assert lengths.tolist() == [min(H, len(labels) - s) for s in range(len(labels))]


def test_an_opening_while_carrying_ends_the_chunks_before_it_after_that_step():
    labels = [CARRY] * 20
    actions, subtasks = _episode(labels, [1] * 20)
    executed = actions.copy()
    executed[12, 6] = -1.0  # the policy (or a perturbation) opens at step 12; the expert said keep closed
    lengths = predictable_chunk_lengths(actions, executed, subtasks, H)
    # a row s <= 12 keeps the labels of steps s..12 (step 12's label is the expert's, before the opening acted)
    assert [lengths[s] for s in (3, 5, 10, 12)] == [10, 8, 3, 1]
    assert lengths[13] == 7 and lengths[2] == 10


def test_a_lost_bowl_ends_the_chunks_before_it():
    labels = [CARRY] * 9 + [REACH] * 6 + [GRASP] * 5  # dropped at step 9 (no gripper disagreement: it slipped)
    actions, subtasks = _episode(labels, [1] * 9 + [-1] * 6 + [1] * 5)
    lengths = predictable_chunk_lengths(actions, actions.copy(), subtasks, H)
    assert [lengths[s] for s in (0, 4, 8, 9)] == [9, 5, 1, 10]
    # reaching again after grasping a missed bowl is a fallback too; reach -> grasp is not
    labels = [REACH] * 4 + [GRASP] * 5 + [REACH] * 3
    actions, subtasks = _episode(labels, [-1] * 4 + [1] * 5 + [-1] * 3)
    assert predictable_chunk_lengths(actions, actions.copy(), subtasks, H).tolist()[:3] == [9, 8, 7]


def test_labels_of_another_form_never_cut():
    actions, subtasks = _episode(["hold"] * 6 + ["reach"] * 6, [1] * 12)
    assert predictable_chunk_lengths(actions, actions.copy(), subtasks, H).tolist() == [
        min(H, 12 - s) for s in range(12)]


def test_mismatched_lengths_are_an_error_naming_the_fields():
    actions, subtasks = _episode([CARRY] * 5, [1] * 5)
    with pytest.raises(ValueError, match="executed_actions"):
        predictable_chunk_lengths(actions, actions[:4], subtasks, H)


def test_the_dataset_masks_the_cut_labels_and_keeps_them_with_the_option_off():
    demo = synthetic_demo(0, steps=14)
    demo.actions[:, 6] = 1.0
    demo.executed_actions = demo.actions.copy()
    demo.executed_actions[6, 6] = -1.0
    cfg, tok = PI05Config.named("compact"), builtin_tokenizer()
    stats = compute_norm_stats([demo])
    cut = DemoDataset([demo], cfg, tok, "What is the robot doing?", stats, progress=False)
    kept = DemoDataset([demo], cfg, tok, "What is the robot doing?", stats, progress=False, cut_chunks=False)
    rows = torch.tensor([0, 2, 6, 7])
    assert cut.batch(rows).action_loss_mask[:, :, 0].sum(1).tolist() == [7, 5, 1, 7]
    assert kept.batch(rows).action_loss_mask[:, :, 0].sum(1).tolist() == [10, 10, 8, 7]
    assert torch.equal(cut.actions, kept.actions)  # only the loss mask differs


def test_the_option_is_on_by_default_and_runs_from_before_it_resume_with_it_off():
    on, off = TrainConfig(data="d", out="o"), TrainConfig(data="d", out="o", cut_chunks=False)
    assert on.cut_chunks and on.resume_key()["cut_chunks"] is True
    assert "cut_chunks" not in off.resume_key()  # the key a run saved before the option existed
