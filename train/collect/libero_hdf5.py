"""LIBERO's HDF5 demo layout, written and read in one place so our trainer reads our files and LIBERO's published ones.

    data/                      attrs: env_name, problem_info, bddl_file_name, env_args (JSON), plus ours
      demo_i/                  attrs: num_samples, init_state, ... ; datasets:
        actions (T, 7)         the expert's action at each step (the training target)
        dones, rewards (T,)
        states (T, S)          flattened MuJoCo states (LIBERO's replay format)
        obs/agentview_rgb, obs/eye_in_hand_rgb (T, H, W, 3) uint8; (K, H, W, 3) with obs/image_steps (K,), ours: the
                               steps whose cameras were rendered (`collect --image-every`), the rest carry no image
        obs/ee_states (T, 6) = eef pos + axis-angle, obs/gripper_states (T, 2), obs/joint_states (T, 7)
      ours: executed_actions (T, 7) (differs from `actions` when collection injected noise), subtasks (T,) str,
            memory (T,) str (the memory task's answer, envs/scene_memory.py; absent in older collections)

Image orientation: LIBERO's published files store the raw OpenGL renders (upside down); openpi rotates them by 180
degrees before the policy (examples/libero/main.py). Our files store what `policy.act` receives (already rotated)
and say so in `data.attrs["image_orientation"]`; the reader returns policy orientation either way.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

POLICY_ORIENTATION = "policy"  # as envs.LiberoEnv returns them: rotated 180 degrees from the raw renders
RAW_ORIENTATION = "raw_opengl"  # LIBERO's published datasets


@dataclass
class Demo:
    """One episode in memory: per-step arrays of equal length T."""

    agentview: np.ndarray  # (T, H, W, 3) uint8, policy orientation
    wrist: np.ndarray  # (T, H, W, 3) uint8
    ee_states: np.ndarray  # (T, 6)
    gripper_states: np.ndarray  # (T, 2)
    joint_states: np.ndarray  # (T, 7)
    actions: np.ndarray  # (T, 7)
    executed_actions: np.ndarray  # (T, 7)
    states: np.ndarray  # (T, S)
    subtasks: list[str]
    attrs: dict = field(default_factory=dict)
    memory: list[str] = field(default_factory=list)  # the memory task's label per step; empty when not recorded
    # the steps whose camera images are stored, increasing (`collect --image-every`: the cameras render every N-th
    # step, the bulk of a collection's time); None: every step has its images
    image_steps: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def frame_steps(self) -> np.ndarray:
        """The step of each stored image pair, in order: what a training row can be built from."""
        return np.arange(len(self)) if self.image_steps is None else self.image_steps

    @property
    def policy_state(self) -> np.ndarray:
        """The 8-d state `policy.act` gets for LIBERO: eef pos, axis-angle, gripper qpos."""
        return np.concatenate([self.ee_states, self.gripper_states], axis=1).astype(np.float32)


LOCK_WAIT_S = 600.0  # how long a writer waits for a reader's lock on the file before giving up


def _open_for_append(path: str | Path, wait_s: float = LOCK_WAIT_S) -> h5py.File:
    """The file opened for appending, waiting while another process holds it open (HDF5 locks a file while anyone
    reads it: looking into a collection mid-run must delay the next write, not kill the run and its running
    episodes)."""
    deadline, warned = time.monotonic() + wait_s, False
    while True:
        try:
            return h5py.File(path, "a")
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BlockingIOError(f"{path} stayed locked by another process for {wait_s:.0f} s; close it "
                                      "and rerun (the collection resumes)") from None
            if not warned:
                print(f"{path} is open in another process; waiting to write", file=sys.stderr, flush=True)
                warned = True
            time.sleep(1.0)


def write_demo(path: str | Path, name: str, demo: Demo, file_attrs: dict) -> None:
    """Append `demo` as `data/<name>` to the file at `path` (created if missing), flushed to disk before returning."""
    t = len(demo)
    for key in ("ee_states", "gripper_states", "joint_states", "executed_actions", "states"):
        if len(getattr(demo, key)) != t:
            raise ValueError(f"demo {name}: {key} has {len(getattr(demo, key))} steps, actions have {t}")
    frames = demo.frame_steps
    if demo.image_steps is not None and (len(frames) == 0 or frames[0] < 0 or frames[-1] >= t
                                         or np.any(np.diff(frames) <= 0)):
        raise ValueError(f"demo {name}: image_steps must be increasing steps in [0, {t}), got {frames.tolist()}")
    for key in ("agentview", "wrist"):
        if len(getattr(demo, key)) != len(frames):
            raise ValueError(f"demo {name}: {key} has {len(getattr(demo, key))} images for {len(frames)} image steps")
    if len(demo.subtasks) != t:
        raise ValueError(f"demo {name}: {len(demo.subtasks)} subtask labels for {t} steps")
    if demo.memory and len(demo.memory) != t:
        raise ValueError(f"demo {name}: {len(demo.memory)} memory labels for {t} steps")
    with _open_for_append(path) as f:
        data = f.require_group("data")
        for k, v in file_attrs.items():
            data.attrs[k] = v if isinstance(v, (str, int, float)) else json.dumps(v)
        if name in data:
            del data[name]  # a demo half-written by a killed run
        g = data.create_group(name)
        obs = g.create_group("obs")
        frame_chunks = (1, *demo.agentview.shape[1:])
        obs.create_dataset("agentview_rgb", data=demo.agentview, chunks=frame_chunks, compression="lzf")
        obs.create_dataset("eye_in_hand_rgb", data=demo.wrist, chunks=(1, *demo.wrist.shape[1:]), compression="lzf")
        obs.create_dataset("ee_states", data=demo.ee_states)
        obs.create_dataset("gripper_states", data=demo.gripper_states)
        obs.create_dataset("joint_states", data=demo.joint_states)
        if demo.image_steps is not None:
            obs.create_dataset("image_steps", data=np.asarray(demo.image_steps, np.int32))
        g.create_dataset("actions", data=demo.actions)
        g.create_dataset("executed_actions", data=demo.executed_actions)
        g.create_dataset("states", data=demo.states)
        dones = np.zeros(t, np.uint8)
        dones[-1] = 1
        g.create_dataset("dones", data=dones)
        g.create_dataset("rewards", data=dones.copy())
        g.create_dataset("subtasks", data=np.array(demo.subtasks, dtype=object), dtype=h5py.string_dtype())
        if demo.memory:
            g.create_dataset("memory", data=np.array(demo.memory, dtype=object), dtype=h5py.string_dtype())
        g.attrs["num_samples"] = t
        for k, v in demo.attrs.items():
            g.attrs[k] = v if isinstance(v, (str, int, float)) else json.dumps(v)
        data.attrs["total"] = int(sum(data[k].attrs.get("num_samples", 0) for k in data if k.startswith("demo_")))
        f.flush()


def demo_names(path: str | Path) -> list[str]:
    """Names of the complete demos in a file, in numeric order."""
    with h5py.File(path, "r") as f:
        if "data" not in f:
            return []
        names = [k for k in f["data"] if k.startswith("demo_") and "num_samples" in f["data"][k].attrs]
    return sorted(names, key=lambda n: int(n.split("_")[1]))


def read_demos(path: str | Path, names: list[str] | None = None) -> list[Demo]:
    """Demos of one file (ours or LIBERO's published ones), images in policy orientation."""
    out = []
    with h5py.File(path, "r") as f:
        data = f["data"]
        orientation = data.attrs.get("image_orientation", RAW_ORIENTATION)
        for name in names or demo_names(path):
            g = data[name]
            obs = g["obs"]
            rot = (lambda a: a[:, ::-1, ::-1]) if orientation == RAW_ORIENTATION else (lambda a: a)
            actions = g["actions"][()]
            t = len(actions)
            strings = lambda key: [s.decode() if isinstance(s, bytes) else str(s) for s in g[key][()]]  # noqa: E731
            subtasks = strings("subtasks") if "subtasks" in g else [""] * t
            out.append(Demo(
                agentview=np.ascontiguousarray(rot(obs["agentview_rgb"][()])),
                wrist=np.ascontiguousarray(rot(obs["eye_in_hand_rgb"][()])),
                ee_states=obs["ee_states"][()] if "ee_states" in obs else np.concatenate([obs["ee_pos"][()], obs["ee_ori"][()]], 1),
                gripper_states=obs["gripper_states"][()],
                joint_states=obs["joint_states"][()],
                actions=actions,
                executed_actions=g["executed_actions"][()] if "executed_actions" in g else actions,
                states=g["states"][()] if "states" in g else np.zeros((t, 0)),
                subtasks=subtasks,
                attrs={k: g.attrs[k] for k in g.attrs},
                memory=strings("memory") if "memory" in g else [],
                image_steps=obs["image_steps"][()].astype(np.int64) if "image_steps" in obs else None,
            ))
    return out


def file_attrs(path: str | Path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: f["data"].attrs[k] for k in f["data"].attrs} if "data" in f else {}
