"""LeRobotDataset (v3.0) data: a collection exported the way `collect --format lerobot` does reads back through
lerobot's own `LeRobotDataset` reader frame for frame, trains, and a dataset lacking what training needs is refused
naming the feature. Training writes its losses to TensorBoard as well as log.jsonl.

lerobot's dataset code runs in child processes here as in the code under test (train/lerobot_io.py says why)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from oxygen_gym.train.collect.libero_hdf5 import read_demos, write_demo
from oxygen_gym.train.lerobot_format import LEROBOT_DIR, export_lerobot, read_lerobot
from oxygen_gym.train.tensorboard_log import TENSORBOARD_DIR
from oxygen_gym.train.trainer import LOG_FILE, TrainConfig, train
from test_train_data import synthetic_demo

pytestmark = pytest.mark.timeout(900)  # each child imports lerobot, datasets and torch: slow on a loaded machine

# lerobot's own reader, frame by frame through LeRobotDataset.__getitem__ (images as its float CHW tensors)
READER = r"""
import json, sys
import numpy as np
from oxygen_gym.train.lerobot_io import lerobot_dataset_class
ds = lerobot_dataset_class()("local/check", root=sys.argv[1])
items = [ds[i] for i in range(len(ds))]
img = lambda k: np.stack([(it[k].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8) for it in items])
vec = lambda k: np.stack([it[k].numpy() for it in items])
np.savez(sys.argv[2], base=img("observation.images.image"), wrist=img("observation.images.image2"),
         state=vec("observation.state"), action=vec("action"), executed=vec("executed_action"),
         episode=np.array([int(it["episode_index"]) for it in items]), frame=np.array([int(it["frame_index"]) for it in items]))
json.dump({"task": [it["task"] for it in items], "subtask": [it["subtask"] for it in items],
           "memory": [it["memory"] for it in items], "codebase_version": ds.meta.info["codebase_version"]},
          open(sys.argv[3], "w"))
"""

# a dataset as others write it: openpi's camera names, no subtask labels
FOREIGN = r"""
import sys
import numpy as np
from oxygen_gym.train.lerobot_io import lerobot_dataset_class
image = {"dtype": "image", "shape": (16, 16, 3), "names": ["height", "width", "channel"]}
features = {"observation.images.image": image, "observation.images.wrist_image": dict(image),
            "observation.state": {"dtype": "float32", "shape": (8,), "names": None},
            "action": {"dtype": "float32", "shape": (7,), "names": None}}
ds = lerobot_dataset_class().create("local/foreign", fps=10, features=features, root=sys.argv[1], use_videos=False)
rng = np.random.default_rng(0)
for t in range(4):
    ds.add_frame({"observation.images.image": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
                  "observation.images.wrist_image": np.full((16, 16, 3), t, np.uint8),
                  "observation.state": np.full(8, t, np.float32), "action": np.full(7, -t, np.float32),
                  "task": "pick up the bowl"})
ds.save_episode()
ds.finalize()
"""


def _child(script: str, *args, tmp) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp / "hf-cache")}
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """Two HDF5 demos as `oxygen-gym collect` writes them (the second on a fresh scene, noise-injected), and their
    LeRobotDataset as `collect --format lerobot` writes it (export_lerobot into OUT/lerobot)."""
    folder = tmp_path_factory.mktemp("collection")
    for i in range(2):
        demo = synthetic_demo(i, steps=12, size=32)
        if i == 1:
            demo.attrs = {**demo.attrs, "scene": 7, "success": False}
            del demo.attrs["init_state"]
            demo.executed_actions = demo.actions + 0.25
        write_demo(folder / "libero_spatial_task0_demo.hdf5", f"demo_{i}", demo, {"image_orientation": "policy"})
    result = export_lerobot(folder, folder / LEROBOT_DIR)
    assert result == {"episodes": 2, "frames": 24, "path": str(folder / LEROBOT_DIR)}
    return folder


def test_lerobots_own_reader_returns_every_frame_written(collection, tmp_path):
    demos = read_demos(collection / "libero_spatial_task0_demo.hdf5")
    _child(READER, collection / LEROBOT_DIR, tmp_path / "frames.npz", tmp_path / "text.json", tmp=tmp_path)
    got, text = np.load(tmp_path / "frames.npz"), json.loads((tmp_path / "text.json").read_text())
    assert text["codebase_version"] == "v3.0"
    assert got["episode"].tolist() == [0] * 12 + [1] * 12 and got["frame"].tolist() == list(range(12)) * 2
    cat = lambda f: np.concatenate([f(d) for d in demos])  # noqa: E731
    assert np.array_equal(got["base"], cat(lambda d: d.agentview))
    assert np.array_equal(got["wrist"], cat(lambda d: d.wrist))
    assert np.array_equal(got["state"], cat(lambda d: d.policy_state))
    assert np.array_equal(got["action"], cat(lambda d: d.actions))
    assert np.array_equal(got["executed"], cat(lambda d: d.executed_actions))
    assert text["task"] == [d.attrs["language"] for d in demos for _ in range(len(d))]
    assert text["subtask"] == [s for d in demos for s in d.subtasks]
    assert text["memory"] == [s for d in demos for s in d.memory]


def test_training_reads_a_lerobot_dataset_and_logs_to_tensorboard(collection, tmp_path):
    demos = read_demos(collection / "libero_spatial_task0_demo.hdf5")
    back = read_lerobot(collection / LEROBOT_DIR, need=("subtask", "memory"))
    assert len(back) == 2
    for d, b in zip(demos, back):
        for key in ("agentview", "wrist", "policy_state", "actions", "executed_actions"):
            assert np.array_equal(getattr(b, key), getattr(d, key)), key
        assert b.subtasks == d.subtasks and b.memory == d.memory and b.attrs["language"] == d.attrs["language"]
    assert back[0].attrs["init_state"] == 0 and "scene" not in back[0].attrs and back[0].attrs["success"]
    assert back[1].attrs["scene"] == 7 and "init_state" not in back[1].attrs and not back[1].attrs["success"]

    run = tmp_path / "run"
    train(TrainConfig(data=str(collection / LEROBOT_DIR), out=str(run), steps=3, batch_size=4, warmup=1,
                      log_every=1, checkpoint_every=3, threads=1, device="cpu", monitor_rows=8), progress=False)
    logged = [json.loads(x) for x in (run / LOG_FILE).read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in logged)
    info = json.loads((run / "model" / "training.json").read_text())["data"]
    assert info["demos"] == 2 and info["steps"] == 24 and info["init_states"] == [0] and info["scenes"] == [7]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / TENSORBOARD_DIR))
    events.Reload()
    assert {"train/loss", "train/action", "train/language", "train/lr"} <= set(events.Tags()["scalars"])
    board = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert board == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in logged]
    assert [e.step for e in events.Scalars("open_loop/train/mse_exec")] == [3]


def test_a_foreign_dataset_maps_by_feature_name_and_names_what_it_lacks(tmp_path):
    root = tmp_path / "foreign"
    _child(FOREIGN, root, tmp=tmp_path)
    with pytest.raises(ValueError, match=r"no 'subtask' feature .*--language-weight 0"):
        read_lerobot(root, need=("subtask",))
    (demo,) = read_lerobot(root)  # actions alone need no labels
    assert demo.wrist[:, 0, 0, 0].tolist() == [0, 1, 2, 3]  # openpi's `wrist_image` is the wrist camera
    assert np.array_equal(demo.policy_state[:, 0], [0, 1, 2, 3]) and np.array_equal(demo.actions[:, 0], [0, -1, -2, -3])
    assert demo.subtasks == [""] * 4 and demo.attrs["language"] == "pick up the bowl"
    assert demo.attrs["scene"] == 0  # no scene feature: each episode is its own scene for --val-scenes
    info = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match="codebase_version 'v2.1'"):
        read_lerobot(root)


@pytest.mark.filterwarnings("ignore")
def test_eval_rollouts_keep_every_step_as_a_demo(tmp_path):
    """`oxygen-gym eval libero --save-rollouts hdf5`: the real LIBERO env and the built-in `tiny` policy, one short
    episode; every control step is recorded with both cameras rendered, labels as the policy calls saw them."""
    from oxygen_gym.cli import main
    from oxygen_gym.eval.libero.results import read_records

    out = tmp_path / "run"
    assert main(["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--max-steps", "7",
                 "--checkpoint", "tiny", "--out", str(out), "--no-progress", "--fast-reset",
                 "--save-rollouts", "hdf5"]) == 0
    (record,) = read_records(out / "episodes.jsonl")
    (demo,) = read_demos(out / "rollouts" / "libero_spatial_task0_seed7_demo.hdf5")
    assert record["status"] == "ok" and len(demo) == record["steps"] == 7
    assert demo.agentview.shape[0] == demo.wrist.shape[0] == 7
    assert all(frame.std() > 0 for frame in demo.agentview) and all(frame.std() > 0 for frame in demo.wrist)
    calls = [0, record["replan"]]  # the policy was called at these steps, on the observations recorded there
    assert [demo.subtasks[i] for i in calls] == record["subtask_labels"][:2]
    assert len(demo.memory) == 7 and demo.attrs["success"] == record["success"] and demo.attrs["init_state"] == 0
    assert np.abs(np.diff(demo.policy_state[:, :3], axis=0)).sum() > 0  # the arm moved: states are per step
