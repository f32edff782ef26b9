"""A result field added after results folders existed: a folder written before it resumes as the value such runs
had, and refuses a run with another value (eval/libero/eval_loop.py check_resumable)."""
from __future__ import annotations

import json

import pytest


def assert_older_folder_resumes(tmp_path, field: str, changed: dict, message: str, base: dict | None = None) -> None:
    """`base`: settings of both runs (a field eval resolves before recording needs its resolved value here)."""
    from oxygen_gym.eval.libero.eval_config import EvalConfig
    from oxygen_gym.eval.libero.eval_loop import check_resumable
    from oxygen_gym.eval.libero.results import ResultsError, ResultsFolder

    base = base or {}
    old = EvalConfig(out=str(tmp_path), **base).to_dict()
    del old[field]  # written before the field existed
    (tmp_path / "config.json").write_text(json.dumps(old))
    with ResultsFolder(tmp_path) as folder:
        check_resumable(folder, EvalConfig(out=str(tmp_path), **base))
        with pytest.raises(ResultsError, match=message):
            check_resumable(folder, EvalConfig(out=str(tmp_path), **{**base, **changed}))
