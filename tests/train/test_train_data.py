"""Training sees exactly what act() feeds the model, and a killed training run resumes to the same weights."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oxygen_gym.train.collect.libero_hdf5 import Demo, read_demos, write_demo
from oxygen_gym.train.dataset import DemoDataset, compute_norm_stats
from oxygen_gym.train.trainer import TrainConfig, train
from oxygen_gym.model import PI05Config, build_model, builtin_tokenizer
from oxygen_gym.policies.inputs import build_prefix_inputs
from oxygen_gym.policies.language import task_prompt_ids
from oxygen_gym.policies.normalize import Normalizer
from oxygen_gym.policies.robots import get_robot

LABELS = ("reach for the black bowl", "grasp the black bowl", "carry the bowl to the plate")


def synthetic_demo(seed: int, steps: int = 14, size: int = 128) -> Demo:
    rng = np.random.default_rng(seed)
    demo = Demo(
        agentview=rng.integers(0, 256, (steps, size, size, 3), dtype=np.uint8),
        wrist=rng.integers(0, 256, (steps, size, size, 3), dtype=np.uint8),
        ee_states=rng.normal(0, 0.3, (steps, 6)).astype(np.float32),
        gripper_states=rng.uniform(-0.04, 0.04, (steps, 2)).astype(np.float32),
        joint_states=rng.normal(0, 1, (steps, 7)).astype(np.float32),
        actions=rng.uniform(-1, 1, (steps, 7)).astype(np.float32),
        executed_actions=rng.uniform(-1, 1, (steps, 7)).astype(np.float32),  # replaced below, after the draws
        states=rng.normal(0, 1, (steps, 9)),
        subtasks=[LABELS[min(i * len(LABELS) // steps, len(LABELS) - 1)] for i in range(steps)],
        memory=["on the table" if i < steps // 2 else "in the gripper" for i in range(steps)],
        attrs={"init_state": seed, "language": "put the black bowl on the plate", "task_name": "synthetic"},
    )
    demo.executed_actions = demo.actions.copy()  # the expert's own demo: every chunk label is its plan (chunk_cut.py)
    return demo


def test_a_training_sample_is_what_act_would_feed_the_model():
    demos = [synthetic_demo(0), synthetic_demo(1)]
    cfg = PI05Config.named("compact")
    tok = builtin_tokenizer()
    stats = compute_norm_stats(demos)
    ds = DemoDataset(demos, cfg, tok, "What is the robot doing?", stats, progress=False)
    robot = get_robot("libero")
    state_norm = Normalizer("QUANTILES", {"q01": stats["state"].q01, "q99": stats["state"].q99})
    for row, (d, s) in enumerate([(0, 0), (0, 13), (1, 5)]):
        i = d * 14 + s
        demo = demos[d]
        ref = build_prefix_inputs(
            {"base": demo.agentview[s], "wrist": demo.wrist[s]}, demo.policy_state[s], demo.attrs["language"],
            robot=robot, model_slots=cfg.image_slots, image_size=cfg.vision.image_size, tokenizer=tok,
            max_token_len=cfg.max_token_len, discrete_state=cfg.discrete_state, state_normalizer=state_norm,
            state_pad_to=cfg.state_pad_to, device=torch.device("cpu"),
        )
        batch = ds.batch(torch.tensor([i]))
        for slot in range(2):
            assert torch.allclose(batch.images[slot][0], ref.images[slot][0], atol=1e-6)
        n = int(ref.token_masks.sum())
        assert torch.equal(batch.tokens[0, :n], ref.tokens[0, :n]) and bool(batch.token_masks[0, :n].all())
        prompt = task_prompt_ids(tok, "What is the robot doing?")
        label = tok.encode(demo.subtasks[s]) + [tok.eos_id]
        assert batch.text[0, : len(prompt) + len(label)].tolist() == prompt + label
        assert batch.text_loss_mask[0].nonzero().flatten().tolist() == list(range(len(prompt), len(prompt) + len(label)))
        # actions: the next `action_horizon` steps, normalised; steps past the episode's end masked out
        act_norm = Normalizer("QUANTILES", {"q01": stats["actions"].q01, "q99": stats["actions"].q99})
        want = act_norm.normalize(demo.actions[s : s + cfg.action_horizon])
        assert np.allclose(batch.actions[0, : len(want), :7].numpy(), want, atol=1e-6)
        assert int(batch.action_loss_mask[0, :, 0].sum()) == len(want)
        assert not bool(batch.action_loss_mask[0, :, 7:].any())


def test_hdf5_round_trip_keeps_every_field(tmp_path):
    demo = synthetic_demo(3, steps=6, size=32)
    path = tmp_path / "t_demo.hdf5"
    write_demo(path, "demo_0", demo, {"image_orientation": "policy", "env_args": {"a": 1}})
    (back,) = read_demos(path)
    for key in ("agentview", "wrist", "ee_states", "gripper_states", "joint_states", "actions", "executed_actions", "states"):
        assert np.array_equal(getattr(back, key), getattr(demo, key)), key
    assert back.subtasks == demo.subtasks and back.attrs["language"] == demo.attrs["language"]
    assert back.memory == demo.memory and len(set(demo.memory)) == 2


def test_the_memory_label_is_the_language_target_after_the_memory_prompt():
    demos = [synthetic_demo(0), synthetic_demo(1)]
    cfg, tok = PI05Config.named("compact"), builtin_tokenizer()
    ds = DemoDataset(demos, cfg, tok, "Where is the black bowl?", compute_norm_stats(demos), progress=False, label="memory")
    prompt = task_prompt_ids(tok, "Where is the black bowl?")
    for i, (d, s) in enumerate([(0, 0), (0, 13), (1, 5)]):
        label = tok.encode(demos[d].memory[s]) + [tok.eos_id]
        assert ds.batch(torch.tensor([d * 14 + s])).text[0, : len(prompt) + len(label)].tolist() == prompt + label
    assert ds.labels == sorted(set(demos[0].memory))
    unlabelled = synthetic_demo(2)
    unlabelled.memory = []
    with pytest.raises(ValueError, match="--label memory: demo .* has no memory labels"):
        DemoDataset([unlabelled], cfg, tok, "Where?", compute_norm_stats(demos), progress=False, label="memory")
    with pytest.raises(ValueError, match="label: 'where'"):
        DemoDataset(demos, cfg, tok, "Where?", compute_norm_stats(demos), progress=False, label="where")


def _write_data(folder, n=2):
    folder.mkdir()
    for i in range(n):
        write_demo(folder / "synthetic_demo.hdf5", f"demo_{i}", synthetic_demo(i, steps=12, size=64),
                   {"image_orientation": "policy"})


def test_training_resumes_to_the_same_weights(tmp_path):
    data = tmp_path / "data"
    _write_data(data)
    common = dict(data=str(data), batch_size=4, warmup=2, checkpoint_every=2, threads=1, device="cpu")
    straight = train(TrainConfig(out=str(tmp_path / "a"), steps=4, **common), progress=False)
    train(TrainConfig(out=str(tmp_path / "b"), steps=2, **common), progress=False)
    # A new process with a longer run continues from the saved optimiser, step and RNG state.
    resumed = train(TrainConfig(out=str(tmp_path / "b"), steps=4, **common), progress=False)
    from safetensors.torch import load_file

    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    info = json.loads((resumed / "training.json").read_text())
    assert info["step"] == 4 and info["data"]["init_states"] == [0, 1]
    lines = (tmp_path / "b" / "log.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [2, 4]


def test_resuming_with_other_settings_is_refused(tmp_path):
    data = tmp_path / "data"
    _write_data(data, n=1)
    common = dict(data=str(data), batch_size=2, warmup=1, checkpoint_every=1, threads=1, device="cpu")
    train(TrainConfig(out=str(tmp_path / "r"), steps=1, **common), progress=False)
    with pytest.raises(ValueError, match="lr"):
        train(TrainConfig(out=str(tmp_path / "r"), steps=2, lr=5e-4, **common), progress=False)


def test_the_trained_model_loads_as_a_policy(tmp_path):
    data = tmp_path / "data"
    _write_data(data, n=1)
    folder = train(TrainConfig(out=str(tmp_path / "m"), data=str(data), steps=1, batch_size=2, warmup=1,
                               threads=1, device="cpu"), progress=False)
    from oxygen_gym import LanguageTask, MultiTaskPolicy

    demo = synthetic_demo(0, steps=1, size=64)
    obs = {"images": {"base": demo.agentview[0], "wrist": demo.wrist[0]}, "state": demo.policy_state[0],
           "prompt": demo.attrs["language"]}
    with MultiTaskPolicy.from_pretrained(str(folder), robot="libero",
                                         tasks=[LanguageTask("narrate", "What is the robot doing?", 4)]) as policy:
        actions, updates = policy.act(obs)
        assert policy.model.config.to_json() == {**PI05Config.named("compact").to_json(), "extra": policy.model.config.extra}
    assert actions.shape == (10, 7) and np.isfinite(actions).all()
    assert updates and updates[0].task == "narrate"


def test_the_declared_execution_horizon_is_exported_and_checked_before_training(tmp_path):
    from oxygen_gym.policies.checkpoints.replan_steps import declared_replan_steps

    data = tmp_path / "data"
    _write_data(data, n=1)
    common = dict(data=str(data), batch_size=2, warmup=1, checkpoint_every=1, threads=1, device="cpu")
    folder = train(TrainConfig(out=str(tmp_path / "m"), steps=1, replan_steps=3, **common), progress=False)
    assert declared_replan_steps(folder) == 3
    # export only: resuming with another declaration continues the run and rewrites it
    folder = train(TrainConfig(out=str(tmp_path / "m"), steps=2, replan_steps=5, **common), progress=False)
    assert declared_replan_steps(folder) == 5
    assert json.loads((folder / "training.json").read_text())["step"] == 2
    assert declared_replan_steps(train(TrainConfig(out=str(tmp_path / "n"), steps=1, **common), progress=False)) is None
    with pytest.raises(ValueError, match=r"--replan-steps must be an int in 1\.\.10 "):
        train(TrainConfig(out=str(tmp_path / "x"), steps=1, replan_steps=11, **common), progress=False)
    assert not (tmp_path / "x" / "train_state.pt").exists()
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="--replan-steps must be an int >= 1"):
            TrainConfig(out=str(tmp_path / "y"), replan_steps=bad, **common)
    from oxygen_gym.cli import main

    # an adapter has no action head to declare a horizon for: refused before anything is read
    assert main(["train", "--adapter", "memory", "--data", str(data), "--out", str(tmp_path / "a"),
                 "--replan-steps", "3"]) == 2
    assert not (tmp_path / "a").exists()


def test_the_declared_noise_scale_is_exported_and_checked_before_training(tmp_path):
    from oxygen_gym.cli import main
    from oxygen_gym.policies.checkpoints.noise_scale import declared_noise_scale

    data = tmp_path / "data"
    _write_data(data, n=1)
    common = dict(data=str(data), batch_size=2, warmup=1, checkpoint_every=1, threads=1, device="cpu")
    folder = train(TrainConfig(out=str(tmp_path / "m"), steps=1, noise_scale=[0, 0, 0, 0, 0, 0, 1], **common),
                   progress=False)
    assert declared_noise_scale(folder) == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    assert json.loads((folder / "training.json").read_text())["train_config"]["noise_scale"] == [0, 0, 0, 0, 0, 0, 1]
    folder = train(TrainConfig(out=str(tmp_path / "m"), steps=2, noise_scale=0.5, **common), progress=False)
    assert declared_noise_scale(folder) == 0.5  # export only: the run resumed and rewrote it
    assert declared_noise_scale(train(TrainConfig(out=str(tmp_path / "n"), steps=1, **common), progress=False)) is None
    with pytest.raises(ValueError, match="40 scales but head 'actions' has 32 action dims"):
        train(TrainConfig(out=str(tmp_path / "x"), steps=1, noise_scale=[1.0] * 40, **common), progress=False)
    assert not (tmp_path / "x" / "train_state.pt").exists()
    with pytest.raises(ValueError, match="--noise-scale must be a number >= 0"):
        TrainConfig(out=str(tmp_path / "y"), noise_scale=-1, **common)
    assert main(["train", "--adapter", "memory", "--data", str(data), "--out", str(tmp_path / "a"),
                 "--noise-scale", "0,1"]) == 2
    assert not (tmp_path / "a").exists()


def test_a_reader_holding_the_file_open_delays_the_next_write_instead_of_failing_it(tmp_path):
    """HDF5 locks a file while any process reads it; a user looking into a collection mid-run must not kill it."""
    import subprocess
    import sys

    from oxygen_gym.train.collect import libero_hdf5

    path = tmp_path / "demos.hdf5"
    libero_hdf5.write_demo(path, "demo_0", synthetic_demo(0, size=16), {"suite": "s"})
    reader = subprocess.Popen([sys.executable, "-c", "import h5py, sys, time\nf = h5py.File(sys.argv[1], 'r')\n"
                               "print('open', flush=True)\ntime.sleep(3)\nf.close()", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        with pytest.raises(BlockingIOError):  # what the writer met before it waited
            libero_hdf5._open_for_append(path, wait_s=0.0)
        libero_hdf5.write_demo(path, "demo_1", synthetic_demo(1, size=16), {"suite": "s"})
    finally:
        reader.wait(timeout=30)
    assert libero_hdf5.demo_names(path) == ["demo_0", "demo_1"]


def test_compact_128_trains_on_128_px_images_in_64_patches_per_camera():
    cfg, tok = PI05Config.named("compact-128"), builtin_tokenizer()
    assert cfg.vision.num_patches == 64 and PI05Config.named("compact").vision.num_patches == 36
    demos = [synthetic_demo(0, steps=4, size=256)]
    ds = DemoDataset(demos, cfg, tok, "What is the robot doing?", compute_norm_stats(demos), progress=False)
    batch = ds.batch(torch.arange(2))
    assert batch.images[0].shape == (2, 3, 128, 128)
    model = build_model(cfg, seed=0, device="cpu", dtype=torch.float32)
    from oxygen_gym.model.pi05.training import losses

    assert torch.isfinite(losses(model, batch, torch.Generator().manual_seed(0))["action"])
