"""LIBERO HDF5 demos <-> LeRobotDataset (v3.0), through lerobot's own `LeRobotDataset` (create / add_frame /
save_episode / finalize to write, its reader to read), so the files are lerobot's by construction.

Runs in a child process only (`python -m oxygen_gym.train.lerobot_io`, launched by lerobot_format.py): lerobot's
dataset module imports torchvision, and the project's environment has none. PyPI's x86-64 torchvision wheels are CUDA
builds whose compiled ops need CUDA torch; with the CPU torch the Makefile installs they do not load, and torchvision
0.28 then fails at import (`_meta_registrations.py` registers a fake for `torchvision::nms` unconditionally: "operator
torchvision::nms does not exist"). The Makefile installs that wheel outside the environment ($(VENV)/lerobot-torchvision,
so transformers never sees it); here it is put on the path, and where its ops do not load, the two op schemas it
registers fakes for are declared first (`_import_torchvision`): torchvision's Python-side image code, all that
lerobot's dataset code uses, then imports; its compiled ops (nms, ...) stay unavailable and fail if called.

Feature mapping (LeRobot's LIBERO names, lerobot `envs/libero.py`; the same names openpi's LIBERO conversion uses
for the wrist camera are accepted on reading, policies/checkpoints/cameras.py):
    observation.images.image   (H, W, 3) image   agentview, policy orientation (what `policy.act` receives)
    observation.images.image2  (H, W, 3) image   wrist camera
    observation.state          (8,) float32      eef position, axis-angle, 2 gripper joints (`Demo.policy_state`)
    action                     (A,) float32      the training target (the expert's command)
    executed_action            (A,) float32      what ran (differs under injected noise / DAgger); optional on reading
    subtask, memory            string            the per-step language labels; optional on reading unless needed
    libero.episode             (3,) int64        the episode's fresh scene and official init state index (-1 when
                                                 not one) and whether it succeeded (1 / 0), on every frame
    task                       lerobot's task string: the instruction (`Demo.attrs["language"]`)
Images are stored in the parquet files (dtype "image"), not as video: no codec is needed to write or read them.
(No (1,)-shaped feature: with numpy 2.4, lerobot 0.4.4's save_episode stacks them to (T, 1) and `datasets` fails to
encode those as scalars, "only 0-dimensional arrays can be converted to Python scalars"; hence one (3,) vector.)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

FPS = 20  # LIBERO's control rate
ROBOT_TYPE = "panda"
BASE, WRIST = "observation.images.image", "observation.images.image2"
STATE, ACTION, EXECUTED = "observation.state", "action", "executed_action"
LABELS = ("subtask", "memory")
EPISODE = "libero.episode"
EPISODE_NAMES = ["scene", "init_state", "success"]
STATE_NAMES = ["eef_x", "eef_y", "eef_z", "eef_axis_x", "eef_axis_y", "eef_axis_z", "gripper_0", "gripper_1"]
TORCHVISION_DIR = "lerobot-torchvision"  # under the environment's prefix (Makefile)

_TORCHVISION_SCHEMAS = None  # keeps the declared op schemas registered (a Library deregisters them when collected)


class FormatError(ValueError):
    """A dataset lacks what the conversion needs; the message names the feature."""


def _import_torchvision() -> None:
    import torch

    extra = Path(sys.prefix) / TORCHVISION_DIR
    if extra.is_dir() and str(extra) not in sys.path:
        sys.path.append(str(extra))  # after site-packages: an installed torchvision wins
    try:
        import torchvision  # noqa: F401
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
        global _TORCHVISION_SCHEMAS
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _TORCHVISION_SCHEMAS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision  # noqa: F401


def lerobot_dataset_class():
    _import_torchvision()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset


# ------------------------------------------------------------------------------------------------ HDF5 -> LeRobot
def _features(demo, memory: bool) -> dict:
    image = lambda a: {"dtype": "image", "shape": tuple(a.shape[1:]), "names": ["height", "width", "channel"]}  # noqa: E731
    vec = lambda n, names=None: {"dtype": "float32", "shape": (n,), "names": names}  # noqa: E731
    features = {BASE: image(demo.agentview), WRIST: image(demo.wrist), STATE: vec(8, STATE_NAMES),
                ACTION: vec(demo.actions.shape[1]), EXECUTED: vec(demo.actions.shape[1]),
                "subtask": {"dtype": "string", "shape": (1,), "names": None},
                EPISODE: {"dtype": "int64", "shape": (3,), "names": EPISODE_NAMES}}
    if memory:
        features["memory"] = {"dtype": "string", "shape": (1,), "names": None}
    return features


def _hdf5_files(src: str) -> list[Path]:
    files: list[Path] = []
    for part in (p.strip() for p in src.split(",") if p.strip()):
        path = Path(part)
        found = sorted(path.glob("*_demo.hdf5")) if path.is_dir() else [path]
        if not found or not all(f.is_file() for f in found):
            raise FormatError(f"{path}: no *_demo.hdf5 files")
        files += found
    return files


def to_lerobot(src: str, dst: Path) -> dict:
    """Every complete demo of the collection(s) `src` (folders or files, comma-joined) as a new LeRobotDataset at
    `dst`, written to a sibling folder first and moved into place when finalized."""
    from .collect.libero_hdf5 import demo_names, read_demos

    files = _hdf5_files(src)
    names = {f: demo_names(f) for f in files}
    if not any(names.values()):
        raise FormatError(f"{src}: the files hold no complete demos")
    LeRobotDataset = lerobot_dataset_class()
    partial = dst.with_name(dst.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    dataset, features, frames = None, None, 0
    for f in files:
        for demo in read_demos(f, names[f]):
            if dataset is None:
                features = _features(demo, memory=bool(demo.memory))
                dataset = LeRobotDataset.create(f"local/{dst.name}", fps=FPS, features=features, root=partial,
                                                robot_type=ROBOT_TYPE, use_videos=False)
            _add_episode(dataset, features, demo, f)
            frames += len(demo)
    dataset.finalize()
    if dst.exists():
        shutil.rmtree(dst)
    partial.rename(dst)
    return {"episodes": dataset.meta.total_episodes, "frames": frames, "path": str(dst)}


def _add_episode(dataset, features: dict, demo, source: Path) -> None:
    episode = demo.attrs.get("episode", "?")
    if demo.image_steps is not None:
        raise FormatError(f"{source} demo {episode}: images of {len(demo.image_steps)} of its {len(demo)} steps "
                          "(collected with --image-every); a LeRobotDataset holds every frame's images: collect with "
                          "--image-every 1 to export")
    for key, feature in ((BASE, demo.agentview), (WRIST, demo.wrist)):
        if tuple(feature.shape[1:]) != features[key]["shape"]:
            raise FormatError(f"{source} demo {episode}: {key} frames are {feature.shape[1:]}, the dataset's "
                              f"{features[key]['shape']}; a LeRobotDataset holds one image size per feature")
    if "memory" in features and not demo.memory:
        raise FormatError(f"{source} demo {episode}: no memory labels, while earlier demos have them")
    state = demo.policy_state
    success = bool(demo.attrs.get("success", True))
    scene = int(demo.attrs.get("scene", -1))
    init_state = int(demo.attrs.get("init_state", -1))
    task = str(demo.attrs.get("language", "")) or str(demo.attrs.get("task_name", ""))
    if not task:
        raise FormatError(f"{source} demo {episode}: records no instruction ('language'), LeRobot's task")
    info = np.array([scene, init_state, int(success)], dtype=np.int64)
    for t in range(len(demo)):
        frame = {BASE: demo.agentview[t], WRIST: demo.wrist[t], STATE: state[t].astype(np.float32),
                 ACTION: demo.actions[t].astype(np.float32), EXECUTED: demo.executed_actions[t].astype(np.float32),
                 "subtask": demo.subtasks[t], EPISODE: info, "task": task}
        if "memory" in features:
            frame["memory"] = demo.memory[t]
        dataset.add_frame(frame)
    dataset.save_episode()


# ------------------------------------------------------------------------------------------------ LeRobot -> HDF5
def _camera(meta, camera: str) -> str:
    from oxygen_gym.policies.checkpoints.cameras import IMAGE_PREFIX, aliases
    from oxygen_gym.policies.robots import get_robot

    wanted = aliases(get_robot("libero"), camera)
    for name in wanted:
        key = IMAGE_PREFIX + name
        if key in meta.features:
            if meta.features[key]["dtype"] == "video":
                raise FormatError(f"feature {key!r} is stored as video; this reader takes image features "
                                  "(dtype 'image', stored in the parquet files)")
            return key
    raise FormatError(f"no {camera} camera feature: expected one of {[IMAGE_PREFIX + n for n in wanted]}, the "
                      f"dataset has {meta.camera_keys}")


def to_hdf5(src: Path, dst: Path, need: tuple[str, ...] = ()) -> dict:
    """The episodes of the LeRobotDataset at `src` as demos in our LIBERO HDF5 layout, one file `dst` (policy
    orientation: images are taken as the dataset stores them). `need`: labels ("subtask", "memory") that must be
    present."""
    from .collect.libero_hdf5 import POLICY_ORIENTATION, Demo, write_demo

    LeRobotDataset = lerobot_dataset_class()
    dataset = LeRobotDataset(f"local/{src.name}", root=src)
    meta = dataset.meta
    base, wrist = _camera(meta, "base"), _camera(meta, "wrist")
    for key in (STATE, ACTION):
        if key not in meta.features:
            raise FormatError(f"the dataset has no {key!r} feature, which training needs (it has "
                              f"{sorted(meta.features)})")
    for key in need:
        if key not in meta.features:
            hint = ("train the action model alone with --language-weight 0" if key == "subtask" else
                    "`oxygen-gym collect` records it")
            raise FormatError(f"the dataset has no {key!r} feature (a string per frame), the language target this "
                              f"run trains on ({hint}); it has {sorted(meta.features)}")
    if tuple(meta.features[STATE]["shape"]) != (8,):
        raise FormatError(f"feature {STATE!r} has shape {tuple(meta.features[STATE]['shape'])}; the LIBERO model "
                          "takes the 8-d state policy.act builds (eef position, axis-angle, 2 gripper joints)")
    columns = [base, wrist, STATE, ACTION, "task_index", "episode_index", "frame_index"]
    columns += [k for k in (EXECUTED, *LABELS, EPISODE) if k in meta.features]
    table = dataset.hf_dataset.with_format("numpy", columns=columns)
    episode_of = np.asarray(table["episode_index"]).reshape(-1)
    order = np.lexsort((np.asarray(table["frame_index"]).reshape(-1), episode_of))
    tasks = {int(i): str(name) for name, i in zip(meta.tasks.index, meta.tasks["task_index"])}
    count = 0
    for ep in np.unique(episode_of):
        rows = order[episode_of[order] == ep]
        part = table[rows.tolist()] if len(rows) else {}
        col = lambda k: np.asarray(part[k])  # noqa: E731
        task_ids = np.unique(col("task_index").reshape(-1))
        if len(task_ids) != 1:
            raise FormatError(f"episode {int(ep)} has {len(task_ids)} tasks; one instruction per episode is expected")
        actions = col(ACTION).astype(np.float32)
        state = col(STATE).astype(np.float32)
        t = len(rows)
        scene, init_state, success = (int(x) for x in col(EPISODE)[0]) if EPISODE in part else (-1, -1, None)
        attrs = {"episode": f"lerobot episode {int(ep)}", "language": tasks[int(task_ids[0])],
                 "task_name": tasks[int(task_ids[0])], "lerobot_episode": int(ep)}
        if scene >= 0:
            attrs["scene"] = scene
        elif init_state >= 0:
            attrs["init_state"] = init_state
        else:
            attrs["scene"] = int(ep)  # a dataset not written by us: each episode its own scene (--val-scenes)
        if success is not None:
            attrs["success"] = bool(success)
        strings = lambda k: [str(s) for s in col(k).reshape(-1)] if k in part else []  # noqa: E731
        demo = Demo(agentview=_uint8(col(base)), wrist=_uint8(col(wrist)), ee_states=state[:, :6],
                    gripper_states=state[:, 6:], joint_states=np.zeros((t, 0), np.float32), actions=actions,
                    executed_actions=col(EXECUTED).astype(np.float32) if EXECUTED in part else actions.copy(),
                    states=np.zeros((t, 0)), subtasks=strings("subtask") or [""] * t, attrs=attrs,
                    memory=strings("memory"))
        write_demo(dst, f"demo_{count}", demo, {"image_orientation": POLICY_ORIENTATION, "source": "LeRobotDataset",
                                                 "lerobot_fps": int(meta.fps)})
        count += 1
    if not count:
        raise FormatError(f"{src}: the dataset holds no episodes")
    return {"episodes": count, "frames": int(len(episode_of))}


def _uint8(frames: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) uint8 from what `datasets` decodes (uint8 HWC for PNG/JPEG-stored frames)."""
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise FormatError(f"image frames decode to {frames.dtype} {frames.shape}; expected (T, H, W, 3) uint8")
    return np.ascontiguousarray(frames)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oxygen_gym.train.lerobot_io")
    parser.add_argument("direction", choices=("to-lerobot", "to-hdf5"))
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--need", default="", help="to-hdf5: comma-separated labels that must be present")
    args = parser.parse_args(argv)
    try:
        if args.direction == "to-lerobot":
            result = to_lerobot(args.src, Path(args.dst))
        else:
            result = to_hdf5(Path(args.src), Path(args.dst), tuple(n for n in args.need.split(",") if n))
    except FormatError as e:
        print(json.dumps({"error": str(e)}))
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
