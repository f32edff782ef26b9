"""Closed-loop LIBERO evaluation end to end: the real LIBERO env and the real built-in `tiny` policy, short episodes."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from oxygen_gym.cli import main
from oxygen_gym.eval.libero.results import read_records

pytestmark = pytest.mark.filterwarnings("ignore")


def eval_argv(out, *extra, episodes=2, max_steps=10):
    return ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--episodes", str(episodes),
            "--max-steps", str(max_steps), "--checkpoint", "tiny", "--out", str(out), "--no-progress", "--fast-reset", *extra]


def keys(records):
    return sorted((r["suite"], r["task_id"], r["seed"], r["episode"]) for r in records)


def test_two_episode_tiny_eval_writes_results_and_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(eval_argv(out, "--task", "narrate", "--video", "1")) == 0
    records = read_records(out / "episodes.jsonl")
    assert keys(records) == [("libero_spatial", 0, 7, 0), ("libero_spatial", 0, 7, 1)]
    for r in records:
        assert r["status"] == "ok" and r["error"] is None
        assert r["init_state"] == r["episode"]
        assert r["steps"] == 10 or r["success"]  # the step cap ends every unsolved episode
        assert r["calls"] == 2 and len(r["frame_ms"]) == 2  # openpi replans every 5 steps
        assert r["action_hz"] > 0 and r["language_tokens"] > 0
        assert {n["task"] for n in r["narration"]} == {"narrate"}
    assert (out / records[0]["video"]).stat().st_size > 0 and records[1]["video"] is None  # --video 1

    summary = json.loads((out / "summary.json").read_text())
    successes = sum(r["success"] for r in records)
    assert summary["episodes"] == {"recorded": 2, "ok": 2, "error": 0, "expected": 2}
    assert summary["overall"]["successes"] == successes and summary["overall"]["success_rate"] == successes / 2
    assert summary["suites"]["libero_spatial"]["seed_success_rates"] == {"7": successes / 2}
    assert summary["speed"]["frame_ms"]["n"] == 4
    md = (out / "summary.md").read_text()
    assert f"| libero_spatial | {100 * successes / 2:.1f}% | 2 | 0 |" in md
    assert "summary.md" in capsys.readouterr().out

    # plots beside the summary (eval/eval_plots.py), narration's too: LIBERO labels subtasks
    for name in ("success.png", "latency.png", "time_split.png", "narration.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, name
        assert f"]({name})" in md

    # the same command again finds everything finished and runs nothing, and says so first
    before = (out / "episodes.jsonl").read_bytes()
    capsys.readouterr()
    assert main(eval_argv(out, "--task", "narrate", "--video", "1")) == 0
    assert (out / "episodes.jsonl").read_bytes() == before
    assert capsys.readouterr().err.splitlines()[0] == "resuming: 2 of 2 episodes done (nothing left to run)"
    # a different result-deciding setting may not resume into this folder
    assert main(eval_argv(out, "--mode", "isolated")) == 2
    assert "different evaluation" in capsys.readouterr().err


def test_sigkill_after_first_episode_then_resume_runs_each_once(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "oxygen_gym.cli", *eval_argv(out, episodes=3, max_steps=5)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = out / "episodes.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= 1:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"eval ended before it could be killed:\n{proc.stderr.read().decode()[-3000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = read_records(path)
    assert 1 <= len(first) < 3

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    final = read_records(path)
    assert keys(final) == [("libero_spatial", 0, 7, e) for e in range(3)]  # each exactly once
    assert final[: len(first)] == first  # what finished before the kill was kept, not rerun
    assert json.loads((out / "summary.json").read_text())["episodes"]["recorded"] == 3


def test_shards_merge_to_the_unsharded_run(tmp_path):
    base = eval_argv(tmp_path / "full", episodes=3, max_steps=5)
    assert main(base) == 0
    full = read_records(tmp_path / "full" / "episodes.jsonl")
    shards = []
    for i in range(3):
        out = tmp_path / f"shard{i}"
        assert main(eval_argv(out, "--shard", f"{i}/3", episodes=3, max_steps=5)) == 0
        shards.append(read_records(out / "episodes.jsonl"))
    assert all(len(s) == 1 for s in shards)
    assert main(["eval", "merge", *(str(tmp_path / f"shard{i}") for i in range(3)), "--out", str(tmp_path / "m")]) == 0
    merged = read_records(tmp_path / "m" / "episodes.jsonl")
    assert keys(merged) == keys(full) and len(merged) == 3
    # an episode's outcome does not depend on the process or shard that ran it
    outcome = lambda rs: {(r["episode"], r["success"], r["steps"], r["policy_seed"]) for r in rs}  # noqa: E731
    assert outcome(merged) == outcome(full)
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["episodes"]["expected"] == 3 and summary["overall"]["episodes"] == 3
    # merging a shard twice is refused
    assert main(["eval", "merge", str(tmp_path / "shard0"), str(tmp_path / "m"), "--out", str(tmp_path / "m2")]) == 2


def test_an_exception_inside_an_episode_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    from oxygen_gym.envs.libero import LiberoEnv

    real_step = LiberoEnv.step

    def step_failing_in_episode_0(self, action):
        if self._init_index == 0 and self._steps == 2:
            raise RuntimeError("injected simulator fault")
        return real_step(self, action)

    monkeypatch.setattr(LiberoEnv, "step", step_failing_in_episode_0)
    out = tmp_path / "run"
    assert main(eval_argv(out, max_steps=5)) == 0
    r0, r1 = sorted(read_records(out / "episodes.jsonl"), key=lambda r: r["episode"])
    assert r0["status"] == "error" and r0["error"] == "RuntimeError: injected simulator fault"
    assert "step_failing_in_episode_0" in r0["traceback"]
    assert r1["status"] == "ok" and r1["steps"] == 5  # the next episode ran on a fresh env
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"]["error"] == 1 and summary["overall"]["episodes"] == 1
    assert "injected simulator fault" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_ray_local_two_workers(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "run"
    assert main(eval_argv(out, "--ray", "--workers", "2", max_steps=5)) == 0
    records = read_records(out / "episodes.jsonl")
    assert keys(records) == [("libero_spatial", 0, 7, 0), ("libero_spatial", 0, 7, 1)]
    assert all(r["status"] == "ok" for r in records), [r.get("traceback") for r in records]
    assert len({r["worker"] for r in records}) == 2  # one policy per worker process
    assert json.loads((out / "summary.json").read_text())["episodes"]["recorded"] == 2
