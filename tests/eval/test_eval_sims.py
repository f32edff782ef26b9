"""`oxygen-gym eval aloha` / `eval droid`: the LIBERO loop's records, resume, summary and plots on the other sims
(real gym-aloha / robosuite envs, the built-in random-weight `tiny` model, short episodes); the plots themselves; the
checkpoint's declared language tasks run by default."""
import argparse
import json
import stat

import pytest
from oxygen_gym.cli import main
from oxygen_gym.eval.libero.results import read_records

pytestmark = pytest.mark.filterwarnings("ignore")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sim_argv(sim, out, *extra, task="0", episodes=2, max_steps=10):
    return ["eval", sim, "--tasks", task, "--episodes", str(episodes), "--max-steps", str(max_steps), "--checkpoint",
            "tiny", "--fast-render", "--no-progress", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def libero_record(tmp_path_factory):
    """One record of a real LIBERO eval (4 steps, with narration): the schema the other sims must match."""
    pytest.importorskip("libero")
    from eval_episode import run_one_episode

    record, _ = run_one_episode(tmp_path_factory.mktemp("libero") / "run", "--task", "narrate")
    return record


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000, path


def test_aloha_eval_writes_libero_records_resumes_and_plots(tmp_path, capsys, libero_record):
    pytest.importorskip("gym_aloha")
    out = tmp_path / "aloha"
    argv = sim_argv("aloha", out, "--task", "narrate")
    assert main(argv) in (0, 1)
    records = read_records(out / "episodes.jsonl")
    assert [(r["suite"], r["task_id"], r["seed"], r["episode"], r["init_state"]) for r in records] == [
        ("aloha", 0, 0, 0, 0), ("aloha", 0, 0, 1, 1)]
    for r in records:
        assert r["status"] == "ok", r.get("traceback")
        assert set(r) == set(libero_record), set(r) ^ set(libero_record)  # the same per-episode schema as LIBERO's
        assert r["task"] == "Transfer cube" and r["replan"] == 10 and r["calls"] == 1  # openpi's ALOHA client
        assert r["steps"] == 10 and r["narration"] and r["narration_accuracy"] is None  # no subtask labels
    config = json.loads((out / "config.json").read_text())
    assert (config["env"], config["robot"], config["protocol"]) == ("aloha", "aloha", "aloha")
    assert "# ALOHA evaluation" in (out / "summary.md").read_text()
    plots = {"success.png", "latency.png", "time_split.png"}
    for name in plots:
        assert_png(out / name)
    assert not (out / "narration.png").exists()  # nothing scored it
    err = capsys.readouterr().err
    assert "resuming" not in err and "--video" in err  # a fresh run with videos off says how to get them

    # the same command again: says what is done first, runs nothing, redraws the plots
    (out / "latency.png").unlink()
    before = (out / "episodes.jsonl").read_bytes()
    assert main(argv) in (0, 1)
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "resuming: 2 of 2 episodes done (nothing left to run)"
    assert (out / "episodes.jsonl").read_bytes() == before
    assert_png(out / "latency.png")
    # results are world-readable, as the videos are
    for name in ("config.json", "episodes.jsonl", "summary.json", "summary.md", "latency.png"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name


def test_droid_eval_writes_libero_records_and_video(tmp_path, libero_record):
    pytest.importorskip("robosuite")
    out = tmp_path / "droid"
    assert main(sim_argv("droid", out, "--video", "1", task="lift", max_steps=16)) in (0, 1)
    records = read_records(out / "episodes.jsonl")
    assert [(r["suite"], r["task_id"], r["episode"]) for r in records] == [("droid", 0, 0), ("droid", 0, 1)]
    for r in records:
        assert r["status"] == "ok", r.get("traceback")
        assert set(r) == set(libero_record), set(r) ^ set(libero_record)
        assert r["replan"] == 8 and r["calls"] == 2 and r["steps"] == 16  # openpi's DROID client: 8 of 15
    assert (out / records[0]["video"]).stat().st_size > 0 and records[1]["video"] is None
    for name in ("success.png", "latency.png", "time_split.png"):
        assert_png(out / name)


@pytest.mark.parametrize("argv, flag", [
    (["--tasks", "fold_laundry"], "--tasks"),
    (["--tasks", "2"], "--tasks"),
    (["--episodes", "0"], "--episodes"),
    (["--task", "narrate", "--no-language"], "--no-language"),
])
def test_bad_sim_eval_arguments_are_clear_errors(argv, flag, capsys, tmp_path):
    assert main(["eval", "aloha", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def _libero_args(*argv):
    from oxygen_gym.eval.libero.eval_command import add_libero_arguments

    parser = argparse.ArgumentParser()
    add_libero_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_checkpoints_declared_language_tasks_run_by_default():
    from oxygen_gym.eval.libero.eval_command import config_from_args
    from oxygen_gym.policies.checkpoints.language_tasks import declared_language_tasks

    declared = declared_language_tasks("libero-spatial")
    if not declared:
        pytest.skip("the shipped libero-spatial model declares no language task")
    tasks = config_from_args(_libero_args("--checkpoint", "libero-spatial")).language_tasks
    assert [(t["name"], t["prompt"], t["max_new_tokens"], t.get("adapter")) for t in tasks] == [
        (t.name, t.prompt, t.max_new_tokens, t.adapter) for t in declared]
    assert config_from_args(_libero_args("--checkpoint", "libero-spatial", "--no-language")).language_tasks == []
    explicit = config_from_args(_libero_args("--checkpoint", "libero-spatial", "--task", "plan")).language_tasks
    assert [t["name"] for t in explicit] == ["plan"]  # an explicit --task wins
    assert config_from_args(_libero_args("--checkpoint", "tiny")).language_tasks == []  # declares none


def test_plots_from_records(tmp_path):
    """Each figure from the records it needs; a figure without data is not written (and an old one removed)."""
    from oxygen_gym.eval.eval_plots import write_plots

    def record(task_id, init_state, seed, success, narration_ok):
        labels = ["pick", "pick", "place"]
        said = ["pick", "place", "place"] if narration_ok else ["x", "x", "x"]
        return {"suite": "libero_spatial", "task_id": task_id, "seed": seed, "episode": init_state,
                "init_state": init_state, "status": "ok", "success": success, "frame_ms": [10.0, 12.0, 30.0],
                "time_s": {"reset": 1.0, "physics": 2.0, "render": 3.0, "policy": 0.5, "other": 0.1},
                "narration": [{"task": "narrate", "frame": i, "text": t, "done": True} for i, t in enumerate(said)],
                "subtask_labels": labels}

    records = [record(t, i, s, (t + i + s) % 2 == 0, s == 7) for t in (0, 1) for i in range(3) for s in (7, 8)]
    records.append({"suite": "libero_spatial", "task_id": 0, "seed": 7, "episode": 9, "status": "error"})
    names = write_plots(tmp_path, records)
    assert names == ["success.png", "latency.png", "time_split.png", "narration.png"]
    for name in names:
        assert_png(tmp_path / name)
    for r in records:
        r.pop("narration", None)
    assert "narration.png" not in write_plots(tmp_path, records)
    assert not (tmp_path / "narration.png").exists()


def test_narration_over_time_counts_each_call():
    from oxygen_gym.eval.libero.narration import frame_correctness, narration_accuracy

    narration = [{"task": "narrate", "frame": 0, "text": "Pick.", "done": True},
                 {"task": "narrate", "frame": 1, "text": "pick", "done": False},
                 {"task": "narrate", "frame": 2, "text": "place", "done": True}]
    assert frame_correctness(narration, ["pick", "pick", None, "place"]) == [True, False, None, False]
    assert narration_accuracy(narration, ["pick", "pick", None, "place"]) == {
        "frames": 3, "correct": 1, "accuracy": 1 / 3}


INTERRUPTED_RESET = """
import sys
import oxygen_gym.envs.libero  # noqa: F401  (chooses EGL before robosuite is imported)
from robosuite.utils.binding_utils import MjRenderContext


def interrupted(self):  # Ctrl-C arriving while the first episode's reset makes its render context
    raise KeyboardInterrupt


MjRenderContext._set_mujoco_context_and_buffers = interrupted
from oxygen_gym.cli import main

sys.exit(main(["eval", "libero", "--tasks", "0", "--init-states", "0", "--max-steps", "2", "--fast-reset",
               "--fast-render", "--no-progress", "--out", sys.argv[1]]))
"""


@pytest.mark.slow
def test_ctrl_c_during_a_reset_exits_with_one_line(tmp_path):
    """No EGL traceback from the simulator torn down after the interrupt (eval/libero/worker.quiet_interrupt_exit)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("libero")
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_RESET)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "EGL" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == \
        "interrupted; finished episodes are saved, rerun the same command to resume"


SIMS_IN_TURN = """
import sys
from oxygen_gym.cli import main

flags = ["--tasks", "0", "--max-steps", "2", "--fast-render", "--no-progress"]
libero = ["eval", "libero", *flags, "--init-states", "0", "--fast-reset"]
assert main([*libero, "--out", sys.argv[1] + "/a"]) in (0, 1)
assert main(["eval", "aloha", *flags, "--episodes", "1", "--out", sys.argv[1] + "/b"]) in (0, 1)
assert main([*libero, "--mode", "isolated", "--out", sys.argv[1] + "/c"]) in (0, 1)
"""


@pytest.mark.slow
def test_sims_in_turn_in_one_process_exit_cleanly(tmp_path):
    """robosuite and dm_control each register an exit hook terminating the EGL display: the env still open at exit
    is closed before either runs (worker._register_exit_hook)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("libero")
    pytest.importorskip("gym_aloha")
    script = tmp_path / "sims.py"
    script.write_text(SIMS_IN_TURN)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "EGL" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]


def test_demo_runs_an_aloha_episode(tmp_path, capsys):
    pytest.importorskip("gym_aloha")
    from pathlib import Path

    out = tmp_path / "demo"
    assert main(["demo", "--env", "aloha", "--max-steps", "10", "--fast-render", "--out", str(out)]) == 0
    record = json.loads((out / "episode.json").read_text())
    assert (record["suite"], record["task_id"], record["init_state"], record["status"]) == ("aloha", 0, 0, "ok")
    assert record["steps"] == 10 and record["narration"][0]["task"] == "narrate"
    assert Path(record["video"]).stat().st_size > 0
    # the demo sized its threads by the placement rule, beside its simulator (engine/placement.py)
    from oxygen_gym.engine.placement import available_cores, choose

    assert record["placement"] == {**choose(available_cores(), simulator=True).as_record(),
                                   "applied": record["placement"]["applied"]}
    assert "RANDOM weights" in (out / "report.md").read_text()
    assert main(["demo", "--env", "aloha", "--task-id", "2", "--out", str(out)]) == 2
    assert "--task-id" in capsys.readouterr().err


def test_a_folder_from_before_sims_resumes_as_libero(tmp_path):
    from results_resume import assert_older_folder_resumes

    assert_older_folder_resumes(tmp_path, "env", {"env": "aloha", "robot": "aloha", "protocol": "aloha"}, "env was")


def test_sim_episode_i_starts_from_placement_i_beyond_libero_s_fifty():
    from oxygen_gym.eval.sims import get_sim

    specs = get_sim("aloha").episode_set(["aloha"], [1], 60, [0])
    assert len(specs) == 60 and [s.init_state for s in specs] == list(range(60))
    assert specs[-1].reset_options == {"init_state": 59}
    with pytest.raises(ValueError, match="suites"):
        get_sim("droid").episode_set(["libero_spatial"], None, 2, [0])
