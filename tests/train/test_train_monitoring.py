"""The training recipe's parts for a policy that must succeed: EMA weights are the moving average of the raw
trajectory, colour jitter changes colours and nothing else, validation scenes never reach training, the open-loop
error is zero exactly when the expert did what the model does, and training.json names no machine path."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from oxygen_gym.model import PI05Config, build_model, builtin_tokenizer
from oxygen_gym.policies.normalize import Normalizer
from oxygen_gym.train.collect.libero_hdf5 import write_demo
from oxygen_gym.train.checkpoint_monitor import best_step
from oxygen_gym.train.dataset import DemoDataset, compute_norm_stats
from oxygen_gym.train.image_augment import color_jitter
from oxygen_gym.train.open_loop import open_loop_metrics
from oxygen_gym.train.trainer import TrainConfig, train
from oxygen_gym.train.validation_split import split_by_scene
from test_train_data import synthetic_demo

COMMON = dict(batch_size=4, warmup=2, threads=1, device="cpu", monitor_rows=8)


def _data(folder, n=3, steps=12):
    folder.mkdir()
    for i in range(n):
        demo = synthetic_demo(i, steps=steps, size=64)
        demo.attrs = {**demo.attrs, "scene": i}
        del demo.attrs["init_state"]
        write_demo(folder / "synthetic_demo.hdf5", f"demo_{i}", demo, {"image_orientation": "policy"})
    return folder


def _raw_weights(run) -> dict:
    return torch.load(run / "train_state.pt", weights_only=False)["model"]


def test_exported_ema_weights_are_the_moving_average_of_the_raw_trajectory(tmp_path):
    data, decay = _data(tmp_path / "data"), 0.6
    raw = [_raw_weights(train(TrainConfig(data=str(data), out=str(tmp_path / f"r{n}"), steps=n, **COMMON),
                              progress=False).parent) for n in (1, 2, 3)]
    folder = train(TrainConfig(data=str(data), out=str(tmp_path / "ema"), steps=3, ema_decay=decay, **COMMON),
                   progress=False)
    exported = load_file(folder / "model.safetensors")
    key = next(k for k in exported if k.endswith("action_out_proj.weight"))
    name = next(k for k in raw[0] if k.endswith("action_out_proj.weight"))
    ema = raw[0][name]  # torch's AveragedModel copies the first update, then averages
    for w in raw[1:]:
        ema = decay * ema + (1 - decay) * w[name]
    assert torch.allclose(exported[key], ema, atol=1e-6)
    assert not torch.allclose(exported[key], raw[2][name], atol=1e-4)  # the raw weights are not what ships
    # and a resumed EMA run continues the same average
    train(TrainConfig(data=str(data), out=str(tmp_path / "ema2"), steps=2, ema_decay=decay, checkpoint_every=1,
                      **COMMON), progress=False)
    resumed = train(TrainConfig(data=str(data), out=str(tmp_path / "ema2"), steps=3, ema_decay=decay, **COMMON),
                    progress=False)
    assert torch.equal(load_file(resumed / "model.safetensors")[key], exported[key])


def test_color_jitter_changes_colour_only_and_is_seeded():
    images = torch.rand(3, 2, 3, 8, 8) * 2 - 1
    same = color_jitter(images, 0.3, torch.Generator().manual_seed(1))
    assert torch.equal(same, color_jitter(images, 0.3, torch.Generator().manual_seed(1)))
    assert torch.allclose(color_jitter(images, 0.0, torch.Generator()), images, atol=1e-6)
    assert same.min() >= -1 and same.max() <= 1 and not torch.allclose(same, images, atol=1e-2)
    # per-image factors: six copies of one image come out six different ways
    copies = color_jitter(images[:1, :1].expand(3, 2, 3, 8, 8), 0.3, torch.Generator().manual_seed(1))
    assert len({tuple(c.flatten().round(decimals=4).tolist()) for c in copies.reshape(6, -1)}) == 6
    flat = torch.zeros(1, 1, 3, 4, 4)  # a mid-grey image: brightness moves it, contrast and saturation cannot
    out = color_jitter(flat, 0.5, torch.Generator().manual_seed(0))
    assert torch.allclose(out, out[..., :1, :1, :1].expand_as(out), atol=1e-6)
    with pytest.raises(ValueError, match="strength must be in"):
        color_jitter(images, 1.5, None)


def test_validation_scenes_never_reach_training(tmp_path):
    data = _data(tmp_path / "data", n=4)
    out = tmp_path / "run"
    folder = train(TrainConfig(data=str(data), out=str(out), steps=2, checkpoint_every=1, val_scenes=(3,), **COMMON),
                   progress=False)
    info = json.loads((folder / "training.json").read_text())
    assert info["validation"]["scenes"] == [3] and info["validation"]["demos"] == 1
    assert info["data"]["demos"] == 3 and info["data"]["steps"] == 36
    records = [json.loads(line) for line in (out / "monitor.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all("val" in r and "train" in r for r in records)
    assert (out / "snapshots" / "step_1" / "model.safetensors").is_file()
    assert best_step(out) in (1, 2)
    with pytest.raises(ValueError, match=r"--val-scenes: scenes \[7\] are not in the data"):
        train(TrainConfig(data=str(data), out=str(tmp_path / "bad"), steps=1, val_scenes=(7,), **COMMON), progress=False)


def test_split_by_scene_keeps_every_variant_of_a_scene_together():
    demos = [synthetic_demo(i, steps=2, size=8) for i in range(6)]
    for i, d in enumerate(demos):
        d.attrs = {**d.attrs, "scene": i // 2}  # two variants per scene
        del d.attrs["init_state"]
    train_demos, val = split_by_scene(demos, [1])
    assert [d.attrs["scene"] for d in val] == [1, 1] and all(d.attrs["scene"] != 1 for d in train_demos)
    with pytest.raises(ValueError, match="every scene of the data would be held out"):
        split_by_scene(demos, [0, 1, 2])


def test_training_json_names_no_machine_path(tmp_path):
    data = _data(tmp_path / "data", n=1)
    folder = train(TrainConfig(data=str(data), out=str(tmp_path / "run"), steps=1, **COMMON), progress=False)
    text = (folder / "training.json").read_text()
    assert str(tmp_path) not in text
    info = json.loads(text)
    assert info["train_config"]["data"] == "../data" and info["data"]["path"] == "../data"


def test_open_loop_error_is_zero_when_the_expert_did_what_the_model_does():
    cfg, tok = PI05Config.named("compact"), builtin_tokenizer()
    model = build_model(cfg, seed=0, device="cpu", dtype=torch.float32)
    horizon = cfg.action_horizon
    demos = [synthetic_demo(i, steps=horizon, size=64) for i in range(2)]
    stats = compute_norm_stats(demos)
    rows = torch.tensor([0, horizon])  # each demo's first frame: its chunk is the whole demo
    ds = DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False)
    before = open_loop_metrics(model, ds, rows, seed=3, batch_size=2)
    assert before["mse_exec"] > 0.05
    # replay: the expert's actions become the chunk the model samples with the same noise
    gen = torch.Generator().manual_seed(3)
    batch = ds.batch(rows)
    from oxygen_gym.model.pi05.training import losses
    losses(model, batch, gen, language_weight=0.0)  # open_loop_metrics draws the flow loss's noise first
    noise = torch.randn(batch.actions.shape, generator=gen)
    sampled = model.sample_actions(batch.images, batch.image_masks, batch.tokens, batch.token_masks, noise).float()
    norm = Normalizer("QUANTILES", {"q01": stats["actions"].q01, "q99": stats["actions"].q99})
    for d, demo in enumerate(demos):
        demo.actions = norm.unnormalize(sampled[d, :, :7].numpy()).astype(np.float32)
    after = open_loop_metrics(model, DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False),
                              rows, seed=3, batch_size=2)
    assert after["mse_exec"] < 1e-9 and after["mse_chunk"] < 1e-9 and after["gripper_agree"] == 1.0
    assert after["gripper_false_open"] == 0.0
    assert set(after["mse_exec_by_label"]) == {demos[0].subtasks[0]}
    # the expert keeps the gripper closed throughout: every executed step the model opens on is a false open
    for demo in demos:
        demo.actions[:, 6] = demo.actions[:, 6].max() + 1.0  # closed, and above the normalisation's midpoint
        demo.executed_actions = demo.actions.copy()
    closed = DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False)
    assert bool((closed.actions[rows][:, :, 6] > 0).all())
    opens = float((sampled[:, :5, 6] < 0).float().mean())
    assert 0 < opens < 1  # the untrained model opens on some steps and not others
    assert open_loop_metrics(model, closed, rows, seed=3, batch_size=2)["gripper_false_open"] == pytest.approx(opens)


def test_open_loop_samples_with_the_noise_scale_it_is_given():
    """noise_scale 0 scores the model's deterministic chunk: replayed as the expert's actions it scores zero, while
    the reference sampler (scale 1) does not."""
    cfg, tok = PI05Config.named("compact"), builtin_tokenizer()
    model = build_model(cfg, seed=0, device="cpu", dtype=torch.float32)
    demos = [synthetic_demo(i, steps=cfg.action_horizon, size=64) for i in range(2)]
    stats = compute_norm_stats(demos)
    rows = torch.tensor([0, cfg.action_horizon])
    batch = DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False).batch(rows)
    zero = torch.zeros(batch.actions.shape)
    sampled = model.sample_actions(batch.images, batch.image_masks, batch.tokens, batch.token_masks, zero).float()
    norm = Normalizer("QUANTILES", {"q01": stats["actions"].q01, "q99": stats["actions"].q99})
    for d, demo in enumerate(demos):
        demo.actions = norm.unnormalize(sampled[d, :, :7].numpy()).astype(np.float32)
    ds = DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False)
    assert open_loop_metrics(model, ds, rows, seed=3, batch_size=2, noise_scale=0.0)["mse_exec"] < 1e-9
    assert open_loop_metrics(model, ds, rows, seed=3, batch_size=2, noise_scale=1.0)["mse_exec"] > 1e-3
    # one scale per dim: zeros on every dim is scale 0; noise on the padding alone (past the 7 scored dims) is not
    assert open_loop_metrics(model, ds, rows, seed=3, batch_size=2, noise_scale=(0.0,) * 32)["mse_exec"] < 1e-9
    assert open_loop_metrics(model, ds, rows, seed=3, batch_size=2, noise_scale=(0.0,) * 7)["mse_exec"] > 1e-6
    with pytest.raises(ValueError, match="noise_scale"):
        open_loop_metrics(model, ds, rows, noise_scale=-1.0)


def test_open_loop_command_scores_a_checkpoint_on_chosen_scenes(tmp_path, capsys):
    from oxygen_gym.cli import main

    data = _data(tmp_path / "data", n=3)
    folder = train(TrainConfig(data=str(data), out=str(tmp_path / "run"), steps=1, **COMMON), progress=False)
    out = tmp_path / "ol.json"
    assert main(["train", "open-loop", "--checkpoint", str(folder), "--data", str(data), "--scenes", "1,2",
                 "--rows", "0", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["demos"] == 2 and result["rows"] == 24 and 0 < result["mse_exec"] and 0 <= result["gripper_agree"] <= 1
    # every scene may be scored (only training refuses to hold them all out), and a scene the data lacks names --scenes
    assert main(["train", "open-loop", "--checkpoint", str(folder), "--data", str(data), "--scenes", "0-2",
                 "--rows", "0", "--threads", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["demos"] == 3
    capsys.readouterr()
    assert main(["train", "open-loop", "--checkpoint", str(folder), "--data", str(data), "--scenes", "1,7"]) == 2
    assert "--scenes: scenes [7] are not in the data" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a checkpoint that is not there: refused while parsing, one line
        main(["train", "open-loop", "--checkpoint", str(tmp_path / "nowhere"), "--data", str(data)])
    assert stop.value.code == 2 and "--checkpoint" in capsys.readouterr().err
