"""tools/gpu_check.py stays runnable while nobody has a GPU: its dry run executes the whole plan on the CPU, and the
GPU plan's arguments are parsed by the real subcommands, so a renamed flag fails here rather than on a lent GPU."""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.py"


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("gpu_check") / "dry"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), "--bundle", str(out.parent / "bundle")],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    return out, proc


def test_dry_run_runs_every_part_and_writes_a_complete_summary(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    tool = _tool()
    assert summary["dry_run"] is True and summary["complete"] is True
    assert [p["name"] for p in summary["plan"]] == list(tool.BUDGETS) == list(summary["parts"])
    for name, part in summary["parts"].items():
        assert part["status"] == "ok", (name, part.get("log_tail"))
        assert (out / part["log"]).is_file()
        assert name in (out / "summary.md").read_text()
    assert summary["environment"]["torch"] and "cuda_available" in summary["environment"]


def test_dry_run_parts_report_what_they_measured(dry_run):
    out, _ = dry_run
    parts = json.loads((out / "summary.json").read_text())["parts"]
    tests = parts["gpu_tests"]["details"]
    assert tests["collected"] >= 4  # the gpu-marked tests of tests/eval/test_bench.py are collected
    import torch

    if not torch.cuda.is_available():
        assert tests["result"] == "skipped: no CUDA" and tests["skipped"] == tests["collected"]
    for name in ("bench_graphs_on", "bench_graphs_off"):
        d = parts[name]["details"]
        assert {p["mode"] for p in d["points"]} == {"isolated", "shared", "oxygen", "upper_bound"}
        assert all(p.get("error") is None and p["frame_ms_p50"] > 0 for p in d["points"])
        assert set(d["peak_memory_by_mode"]) == {"isolated", "shared", "oxygen", "upper_bound"}
    serve = parts["serve"]["details"]["points"]
    assert {(p["batching"], p["robots"]) for p in serve} == {("on", 1), ("off", 1), ("on", 2), ("off", 2)}
    for m in ("on", "off"):  # the servers' own logs are kept: an internal error's details are only there
        assert "listening on" in (out / "serve" / f"server-{m}.log").read_text()
    ep = parts["libero_episode"]["details"]
    assert ep["status"] == "ok" and ep["calls"] >= 1 and len(ep["frame_ms"]) == ep["calls"]
    assert "StageTimer" in ep["timing"] and ep["frame_ms_p50"] > 0


def test_bundle_holds_the_summaries_and_a_tarball_of_everything(dry_run):
    import tarfile

    out, _ = dry_run
    bundle = out.parent / "bundle"
    assert sorted(p.name for p in bundle.iterdir()) == ["gpu_check.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(bundle / "gpu_check.tar.gz") as tar:
        names = tar.getnames()
    assert "dry/summary.json" in names and "dry/bench-graphs-on/results.json" in names


def _parse(module_name: str, argv: list[str]) -> argparse.Namespace:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).add_arguments(parser)
    return parser.parse_args(argv)


def test_gpu_plan_fits_ten_minutes_and_its_arguments_parse(tmp_path):
    """The GPU plan as a lent machine would run it: budgets inside one 10-minute command, every flag accepted."""
    from oxygen_gym.eval.bench import bench_command
    from oxygen_gym.eval.libero import eval_command

    tool = _tool()
    parts = {p.name: p for p in tool.plan(False, tmp_path)}
    assert sum(p.budget_s for p in parts.values()) <= 540 and tool.DEADLINE_S[False] <= 540
    assert "tests/eval/test_bench.py" in parts["gpu_tests"].command
    for name, graphs in (("bench_graphs_on", True), ("bench_graphs_off", False)):
        argv = parts[name].command[3:]
        assert argv[0] == "bench"
        cfg = bench_command.config_from_args(_parse("oxygen_gym.eval.bench.bench_command", argv[1:]), argv)
        assert cfg.preset == "gpu" and cfg.model == "pi05" and cfg.device == "cuda" and cfg.cuda_graphs is graphs
        assert set(cfg.modes) == {"isolated", "shared", "oxygen", "upper_bound"} and cfg.N == ((30, 5) if graphs else (30,))
        assert cfg.k == (1, 5)
    serve = _parse("oxygen_gym.eval.bench.serve_bench_command", parts["serve"].command[5:])
    assert serve.robots == (1, 4, 16) and serve.device == "cuda" and serve.model == "pi05"
    assert serve.max_seconds < parts["serve"].budget_s
    episode = eval_command.config_from_args(_parse("oxygen_gym.eval.libero.eval_command", parts["libero_episode"].command[4:]))
    assert episode.device == "cuda" and episode.checkpoint == "pi05" and episode.episodes == 1


def test_a_part_over_budget_is_killed_with_its_children_and_one_missing_a_module_is_skipped(tmp_path):
    import time

    tool = _tool()
    (tmp_path / "logs").mkdir()
    slow = tool.Part("slow", 1.0, ["sh", "-c", "sleep 60 & sleep 60"], "sleeps past its budget")
    t0 = time.monotonic()
    rec = tool.run_part(slow, tmp_path, left_s=100)
    assert rec["status"] == "timed_out" and rec["rc"] is None and time.monotonic() - t0 < 15
    failed = tool.run_part(tool.Part("bad", 10, [sys.executable, "-c", "raise SystemExit(3)"], "exits 3"), tmp_path, 100)
    assert failed["status"] == "failed" and failed["rc"] == 3
    skipped = tool.run_part(tool.Part("x", 10, ["true"], "needs a module", ("no_such_module_here",)), tmp_path, 100)
    assert skipped["status"] == "skipped" and "no_such_module_here" in skipped["reason"]
    late = tool.run_part(tool.Part("late", 10, ["true"], "after the deadline"), tmp_path, left_s=2)
    assert late["status"] == "skipped" and "deadline" in late["reason"]
