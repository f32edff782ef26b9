"""LeRobotDataset (v3.0) folders for `oxygen-gym train --data` and `collect --format lerobot`: recognised by their
meta/info.json, converted by lerobot's own dataset code in a child process (lerobot_io.py says why a child), and
read as the same demos the LIBERO HDF5 reader returns, so training treats both alike."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .collect.libero_hdf5 import Demo, read_demos

INFO = Path("meta") / "info.json"
LEROBOT_DIR = "lerobot"  # where `collect --format lerobot` puts the dataset, inside its --out
CODEBASE_VERSION = "v3.0"  # the only LeRobotDataset version lerobot 0.4.4 reads


def is_lerobot_dataset(path: str | Path) -> bool:
    return (Path(path) / INFO).is_file()


def _check_version(path: Path) -> None:
    """A v2.x dataset would send lerobot's reader to the hub for a v3.0 revision; say what to do instead."""
    try:
        version = json.loads((path / INFO).read_text()).get("codebase_version")
    except json.JSONDecodeError as e:
        raise ValueError(f"--data {path}: {INFO} is not JSON ({e})") from None
    if version != CODEBASE_VERSION:
        raise ValueError(f"--data {path}: a LeRobotDataset of codebase_version {version!r}; this reader takes "
                         f"{CODEBASE_VERSION!r} (convert it with lerobot's datasets/v30/convert_dataset_v21_to_v30.py)")


def _run(args: list[str], scratch: Path) -> dict:
    """lerobot_io.py in a child; its one JSON line back, or its error as a ValueError."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(scratch / "hf-datasets-cache"),  # datasets' arrow copy: scratch
           "HF_HUB_OFFLINE": "1"}  # local folders only: a missing file is an error, never a download
    proc = subprocess.run([sys.executable, "-m", "oxygen_gym.train.lerobot_io", *args], capture_output=True,
                          text=True, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0 or not lines:
        detail = result.get("error") or proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise ValueError(detail if isinstance(detail, str) else detail[0])
    return result


def read_lerobot(path: str | Path, need: tuple[str, ...] = ()) -> list[Demo]:
    """The episodes of the LeRobotDataset at `path` as demos (images as stored: `policy.act`'s orientation is
    assumed). `need`: per-step labels ("subtask", "memory") the caller trains on; a dataset without one is an error
    naming the feature."""
    path = Path(path)
    _check_version(path)
    with tempfile.TemporaryDirectory(prefix="lerobot-read-") as tmp:
        out = Path(tmp) / "episodes_demo.hdf5"
        try:
            _run(["to-hdf5", str(path), str(out), "--need", ",".join(need)], Path(tmp))
        except ValueError as e:
            raise ValueError(f"--data {path}: {e}") from None
        return read_demos(out)


def export_lerobot(src: str | Path, dst: str | Path) -> dict:
    """The LIBERO HDF5 demos of `src` (a collection folder or files, comma-joined) as a new LeRobotDataset at `dst`
    (replacing one there); returns {"episodes", "frames", "path"}."""
    with tempfile.TemporaryDirectory(prefix="lerobot-write-") as tmp:
        return _run(["to-lerobot", str(src), str(dst)], Path(tmp))
