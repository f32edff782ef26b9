"""The results folder of an evaluation: `episodes.jsonl` (one line per finished episode, crash-safe), `config.json`.

Every record is written with one `write` call, then flushed and fsynced, so a run killed at any instant (SIGKILL, a
node lost) leaves whole lines plus at most one truncated tail, which the next open drops. A rerun with the same folder
reads the finished keys and skips them: no episode runs twice. A lock file stops two processes writing one folder.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .episode_set import record_key

EPISODES_FILE = "episodes.jsonl"
CONFIG_FILE = "config.json"
LOCK_FILE = ".lock"


class ResultsError(ValueError):
    """A results folder that cannot be used as asked (corrupt file, config mismatch, duplicates, busy)."""


# Results are shared like the videos beside them: mkstemp makes its file 0600, the final file is world-readable.
RESULT_MODE = 0o644


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temp file beside `path`, then rename: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, RESULT_MODE)
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=_json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, RESULT_MODE)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    """numpy scalars/arrays and paths appear in episode results; store them as plain JSON."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_records(path: Path, repair: bool = False) -> list[dict]:
    """All records of an `episodes.jsonl`. A truncated last line (no newline: the writer was killed mid-write) is
    ignored, and with `repair=True` cut off the file so appends start on a clean line. Any other unreadable line is
    an error: silently dropping finished episodes would rerun them."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    complete_end = data.rfind(b"\n") + 1  # 0 when there is no newline at all
    if complete_end < len(data) and repair:
        with open(path, "r+b") as f:
            f.truncate(complete_end)
            f.flush()
            os.fsync(f.fileno())
    records = []
    for lineno, line in enumerate(data[:complete_end].split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}:{lineno}: unreadable record ({e}); fix or remove that line") from None
        if not isinstance(rec, dict):
            raise ResultsError(f"{path}:{lineno}: expected a JSON object per line, got {type(rec).__name__}")
        records.append(rec)
    return records


def duplicate_keys(records: Iterable[dict]) -> list[tuple]:
    """Episode keys that occur more than once."""
    seen, dups = set(), []
    for r in records:
        k = record_key(r)
        if k in seen and k not in dups:
            dups.append(k)
        seen.add(k)
    return dups


class ResultsFolder:
    """An output folder that one process appends episode records to. Use as a context manager (holds the lock)."""

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.episodes_path = self.out / EPISODES_FILE
        self.config_path = self.out / CONFIG_FILE
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self.records: list[dict] = []
        self._keys: set[tuple] = set()

    def __enter__(self) -> ResultsFolder:
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.out / LOCK_FILE, os.O_RDWR | os.O_CREAT, RESULT_MODE)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise ResultsError(f"--out {self.out}: another oxygen-gym eval is writing to this folder; "
                               f"wait for it or choose another --out") from None
        self.records = read_records(self.episodes_path, repair=True)
        dups = duplicate_keys(self.records)
        if dups:
            raise ResultsError(f"{self.episodes_path}: episodes recorded more than once: {dups[:5]}")
        self._keys = {record_key(r) for r in self.records}
        self._fd = os.open(self.episodes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, RESULT_MODE)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def done_keys(self) -> set[tuple]:
        return set(self._keys)

    def read_config(self) -> dict | None:
        if not self.config_path.exists():
            return None
        return json.loads(self.config_path.read_text())

    def write_config(self, config: dict) -> None:
        write_json_atomic(self.config_path, config)

    def append(self, record: dict) -> None:
        """Append one finished episode durably (one write, then fsync) before anything else happens."""
        self.extend([record])

    def extend(self, records: list[dict]) -> None:
        """Append several records with one write and one fsync (merging thousands of episodes)."""
        if self._fd is None:
            raise RuntimeError("ResultsFolder.append outside its `with` block")
        keys = [record_key(r) for r in records]
        if len(set(keys)) != len(keys):
            raise ResultsError(f"records to append hold an episode twice: {duplicate_keys(records)[:5]}")
        for key in keys:
            if key in self._keys:
                raise ResultsError(f"episode {key} is already recorded in {self.episodes_path}")
        data = "".join(json.dumps(r, default=_json_default) + "\n" for r in records).encode()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self.records.extend(records)
        self._keys.update(keys)
