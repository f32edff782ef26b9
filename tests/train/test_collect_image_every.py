"""`collect --image-every N --image-size PX`: the cameras render every N-th step only and images are stored at the
policy's size. The episode must be the same episode (actions, sim states, labels), the stored images exactly what
`policy.act` would have made of that step's render, and a training row exactly the every-step collection's row at
the same step."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oxygen_gym.model import PI05Config, builtin_tokenizer
from oxygen_gym.model.image_resize import resize_with_pad
from oxygen_gym.train.collect import CollectConfig, collect, read_demos
from oxygen_gym.train.collect.collector import task_file
from oxygen_gym.train.collect.libero_hdf5 import write_demo
from oxygen_gym.train.dataset import DemoDataset, compute_norm_stats
from oxygen_gym.train.lerobot_format import export_lerobot

from test_train_data import synthetic_demo


@pytest.mark.timeout(900)  # two ~80-step episodes at 64 px: ~1 min on an idle 2-core machine
def test_rendering_every_third_step_stores_that_steps_images_at_the_policy_size_and_trains_the_same_rows(tmp_path):
    pytest.importorskip("libero")
    base = dict(init_states=(), fresh_scenes=(0,), variants=1, perturb_rate=0.15, workers=1, camera_size=64,
                release_xy_m=0.025)
    full_cfg, sparse_cfg = CollectConfig(**base), CollectConfig(**base, image_every=3, image_size=96)
    assert collect(full_cfg, tmp_path / "full", progress=False)["kept"] == 1
    assert collect(sparse_cfg, tmp_path / "sparse", progress=False)["kept"] == 1
    (full,) = read_demos(task_file(tmp_path / "full", "libero_spatial", 0))
    (sparse,) = read_demos(task_file(tmp_path / "sparse", "libero_spatial", 0))
    t = len(full)
    assert len(sparse) == t and full.image_steps is None
    assert sparse.image_steps.tolist() == list(range(0, t, 3))
    # the same episode: rendering fewer steps changes no physics, action or label
    assert np.array_equal(sparse.states, full.states) and np.array_equal(sparse.actions, full.actions)
    assert sparse.subtasks == full.subtasks and sparse.memory == full.memory
    assert sparse.agentview.shape == (len(sparse.image_steps), 96, 96, 3)
    for j, s in enumerate(sparse.image_steps):
        assert np.array_equal(sparse.agentview[j], resize_with_pad(full.agentview[s], 96, 96)), s
        assert np.array_equal(sparse.wrist[j], resize_with_pad(full.wrist[s], 96, 96)), s
    config = json.loads((tmp_path / "sparse" / "dataset.json").read_text())["config"]
    assert (config["image_every"], config["image_size"]) == (3, 96)
    # a training row per stored image pair, equal to the every-step collection's row at that step
    cfg, tok = PI05Config.named("compact"), builtin_tokenizer()
    assert cfg.vision.image_size == 96  # stored at the model size: the dataset resizes nothing
    stats = compute_norm_stats([full])
    rows_full = DemoDataset([full], cfg, tok, "What is the robot doing?", stats, progress=False)
    rows_sparse = DemoDataset([sparse], cfg, tok, "What is the robot doing?", stats, progress=False)
    assert len(rows_sparse) == len(sparse.image_steps) and len(rows_full) == t
    a = rows_sparse.batch(torch.arange(len(rows_sparse)))
    b = rows_full.batch(torch.as_tensor(sparse.image_steps))
    for name in ("tokens", "token_masks", "actions", "action_loss_mask", "text", "text_loss_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    for slot in range(2):
        assert torch.equal(a.images[slot], b.images[slot])
    # a folder keeps one setting: the every-step collection refuses sparse episodes
    with pytest.raises(ValueError, match="image_every"):
        collect(CollectConfig(**{**base, "fresh_scenes": (1,)}, image_every=2), tmp_path / "full", progress=False)


@pytest.mark.parametrize("bad, flag", [(dict(image_every=0), "--image-every"), (dict(image_every=1.5), "--image-every"),
                                       (dict(image_size=4), "--image-size"), (dict(image_size=True), "--image-size")])
def test_bad_image_settings_name_their_flag(bad, flag):
    with pytest.raises(ValueError, match=flag):
        CollectConfig(**bad)


def test_a_dagger_policy_needs_every_steps_cameras():
    with pytest.raises(ValueError, match="--image-every 1 with --dagger"):
        CollectConfig(dagger_checkpoint="libero-spatial", image_every=2)


def test_image_steps_must_match_the_images_and_lie_inside_the_episode(tmp_path):
    demo = synthetic_demo(0, steps=6, size=16)
    demo.agentview, demo.wrist = demo.agentview[::2], demo.wrist[::2]
    with pytest.raises(ValueError, match="agentview has 3 images for 6 image steps"):
        write_demo(tmp_path / "d.hdf5", "demo_0", demo, {})
    demo.image_steps = np.array([0, 2, 6])
    with pytest.raises(ValueError, match="image_steps must be increasing steps in"):
        write_demo(tmp_path / "d.hdf5", "demo_0", demo, {})
    demo.image_steps = np.array([0, 2, 4])
    write_demo(tmp_path / "d.hdf5", "demo_0", demo, {"suite": "s", "image_orientation": "policy"})
    (back,) = read_demos(tmp_path / "d.hdf5")
    assert back.image_steps.tolist() == [0, 2, 4] and np.array_equal(back.wrist, demo.wrist)


def test_a_lerobot_export_refuses_episodes_without_every_frames_images(tmp_path):
    pytest.importorskip("lerobot")
    demo = synthetic_demo(0, steps=6, size=16)
    demo.agentview, demo.wrist, demo.image_steps = demo.agentview[::2], demo.wrist[::2], np.array([0, 2, 4])
    (tmp_path / "src").mkdir()
    write_demo(tmp_path / "src" / "s_task0_demo.hdf5", "demo_0", demo, {"suite": "s", "image_orientation": "policy"})
    with pytest.raises(ValueError, match="--image-every 1 to export"):
        export_lerobot(tmp_path / "src", tmp_path / "lerobot")
