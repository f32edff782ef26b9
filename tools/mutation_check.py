"""Targeted mutation check: do the default tests fail when the behaviour they name breaks?

Each mutation is one small deliberate bug (an exact text replacement in one source file). For each, this script
copies the working tree to a temporary folder once, applies the mutation there (the checkout is never touched),
runs only the tests that name that behaviour, and records whether they failed (caught) or passed (missed). A
baseline run of every listed test on the unmutated copy comes first: a mutation only counts if its tests pass
without it. Slow tests (`-m "not slow"`) and GPU tests stay out, as in the default run.

Not part of CI (minutes on two cores). Usage, from the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python tools/mutation_check.py                 # every mutation
    OMP_NUM_THREADS=1 .venv/bin/python tools/mutation_check.py --only gelu_exact_actions no_fsync
    .venv/bin/python tools/mutation_check.py --list

Prints a markdown table; `--json PATH` also writes the results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARITY = "tests/model/pi05/test_model_parity.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # file in the repository
    old: str  # exact text, must occur once
    new: str
    tests: tuple[str, ...]  # test files or node ids that should catch it
    why: str = ""


MUTATIONS: tuple[Mutation, ...] = (
    # --- the ones issue 15 found uncaught
    Mutation("gelu_exact_actions", "oxygen_gym/model/layers.py",
             'F.gelu(linear(x, self.gate_proj), approximate="tanh")', "F.gelu(linear(x, self.gate_proj))",
             (f"{PARITY}::test_actions_match_lerobot",), "exact GELU in the Gemma MLP; final actions only"),
    Mutation("gelu_exact_velocity", "oxygen_gym/model/layers.py",
             'F.gelu(linear(x, self.gate_proj), approximate="tanh")', "F.gelu(linear(x, self.gate_proj))",
             (f"{PARITY}::test_every_euler_step_velocity_matches_lerobot",), "exact GELU; per-step velocity test only"),
    Mutation("upper_bound_admits_none", "oxygen_gym/engine/scheduler.py",
             "        return self._oxygen(frames, noises, ks, progress)\n\n    def _shared",
             "        return self._oxygen([FrameInput(f.frame, f.prefix, f.noise, [], f.session) for f in frames], noises, ks,"
             " progress)\n\n    def _shared",
             ("tests/engine/test_engine_equivalence.py",), "upper_bound drops every new request"),
    Mutation("upper_bound_decodes_1", "oxygen_gym/engine/scheduler.py",
             "r.max_new_tokens = min(r.max_new_tokens, k)", "r.max_new_tokens = min(r.max_new_tokens, 1)",
             ("tests/engine/test_engine_equivalence.py",), "upper_bound decodes 1 token instead of k"),
    Mutation("bad_obs_shortens_budget", "policies/multitask.py",
             "        images, state, prompt = check_observation(obs, self.robot)\n",
             "        try:\n            images, state, prompt = check_observation(obs, self.robot)\n"
             "        except ValueError:\n            for r in self.engine.in_flight():\n"
             "                r.max_new_tokens -= 1\n            raise\n",
             ("tests/policy/test_policy_validation.py",), "a rejected observation takes a token from each in-flight budget"),
    Mutation("table_skips_pool_lengths", "oxygen_gym/engine/request.py",
             "            r.append(t)\n            self.pool.lengths[r.slot] = r.length\n", "            r.append(t)\n",
             ("tests/engine/test_engine_slots.py",), "decode steps not written back to pool.lengths"),
    Mutation("no_fsync", "eval/libero/results.py",
             "            view = view[n:]\n        os.fsync(self._fd)\n", "            view = view[n:]\n",
             ("tests/eval/test_eval_results.py",), "episodes appended without fsync"),
    Mutation("fsync_before_write", "eval/libero/results.py",
             "        view = memoryview(data)\n        while view:\n            n = os.write(self._fd, view)\n"
             "            view = view[n:]\n        os.fsync(self._fd)\n",
             "        view = memoryview(data)\n        os.fsync(self._fd)\n        while view:\n"
             "            n = os.write(self._fd, view)\n            view = view[n:]\n",
             ("tests/eval/test_eval_results.py",), "fsync before the record's bytes are written"),
    Mutation("no_torn_tail_repair", "eval/libero/results.py",
             "read_records(self.episodes_path, repair=True)", "read_records(self.episodes_path, repair=False)",
             ("tests/eval/test_eval_results.py",), "reopening leaves a torn last line in place"),
    Mutation("single_short_write", "eval/libero/results.py",
             "            n = os.write(self._fd, view)\n            view = view[n:]\n",
             "            n = os.write(self._fd, view)\n            break\n",
             ("tests/eval/test_eval_results.py",), "a short write is not continued"),
    # --- the ones issue 15 found caught (kept so they stay caught)
    Mutation("prefix_copy_off_by_one", "oxygen_gym/engine/scheduler.py",
             "self.pool.copy(src_row, r.slot, state.host_lengths[i])", "self.pool.copy(src_row, r.slot, state.host_lengths[i] - 1)",
             ("tests/engine/test_engine_equivalence.py",), "fan-out copies one prefix position too few"),
    Mutation("compaction_skips_copy", "oxygen_gym/engine/slots.py",
             "            self.copy(last, slot, self.lengths[last])\n", "            self.lengths[slot] = self.lengths[last]\n",
             ("tests/engine/test_engine_slots.py",), "freeing a slot moves the owner but not its KV"),
    Mutation("batched_decode_unmasked", "oxygen_gym/model/pi05/modeling.py",
             "        if static or b > 1 or t > 1:\n            mask = torch.arange(read_len",
             "        if static or t > 1:\n            mask = torch.arange(read_len",
             ("tests/model/pi05/test_model_cached.py", "tests/engine/test_engine_equivalence.py"),
             "batched decode: shorter rows attend past their own length"),
    Mutation("episode_key_drops_seed", "eval/libero/episode_set.py",
             "return (self.suite, self.task_id, self.seed, self.episode)", "return (self.suite, self.task_id, 0, self.episode)",
             ("tests/eval/test_eval_results.py",), "finished-episode keys ignore the seed"),
    Mutation("nan_state_accepted", "policies/inputs.py",
             "np.isfinite(", "np.isreal(",
             ("tests/policy/test_policy_validation.py",), "non-finite state passes validation"),
    # --- our own
    Mutation("eos_ignored", "oxygen_gym/engine/request.py",
             "        if token == self.eos_id:\n", "        if False:\n",
             ("tests/engine/test_engine_equivalence.py", "tests/policy/test_policy_validation.py"), "EOS never ends a request"),
    Mutation("budget_off_by_one", "oxygen_gym/engine/request.py",
             "        elif self.remaining <= 0:\n", "        elif self.remaining < 0:\n",
             ("tests/engine/test_engine_equivalence.py", "tests/policy/test_policy_validation.py"), "a request decodes max_new_tokens + 1"),
    Mutation("graph_decode_pads_live_rows", "oxygen_gym/engine/runner.py",
             "        if not self.graphs or size != self.pool.active:\n", "        if not self.graphs:\n",
             ("tests/engine/test_engine_runner.py",), "a decode graph replays over a partial batch, padding over live rows"),
    Mutation("graph_denoise_no_staging_copy", "oxygen_gym/engine/runner.py",
             "        if row != staging:\n", "        if False:\n",
             ("tests/engine/test_engine_runner.py",), "a denoise graph reads the staging row without the frame's prefix"),
    Mutation("graph_capture_before_inputs", "oxygen_gym/engine/runner.py",
             "        call.load(inputs)\n        if call.graph is None:\n            call.capture(self._mempool)\n",
             "        if call.graph is None:\n            call.capture(self._mempool)\n        call.load(inputs)\n",
             ("tests/engine/test_engine_runner.py",), "a graph's warm-up runs on stale buffers (writes a live row's index 0)"),
    Mutation("queue_lifo", "oxygen_gym/engine/scheduler.py",
             "for i, (r, _) in enumerate(self.waiting) if", "for i, (r, _) in reversed(list(enumerate(self.waiting))) if",
             ("tests/engine/test_engine_admission.py",), "queued requests admitted last-in first-out"),
    Mutation("batch_decodes_absent_robots", "oxygen_gym/engine/scheduler.py",
             "steps is None or steps.get(r.session, 0) > j", "steps is None or max(steps.values()) > j",
             ("tests/serve/test_serve_equivalence.py",), "a frame decodes the requests of robots not in its batch"),
    Mutation("rms_eps_large", "oxygen_gym/model/layers.py",
             "RMS_EPS = 1e-6\n", "RMS_EPS = 1e-5\n",
             (PARITY,), "RMSNorm epsilon 1e-5 instead of Gemma's 1e-6"),
    Mutation("merge_keeps_corrupt_line", "eval/libero/results.py",
             '            raise ResultsError(f"{path}:{lineno}: unreadable record ({e}); fix or remove that line") from None\n',
             "            continue\n",
             ("tests/eval/test_eval_results.py",), "a corrupt middle line is silently dropped"),
    Mutation("bench_p50_with_warmup", "eval/bench/metrics.py",
             "        frame_ms_p50=_pct(frame, 50),\n",
             "        frame_ms_p50=_pct(np.array([r.frame_ms for r in records]), 50),\n",
             ("tests/eval/test_bench.py::test_sweep_writes_every_file_and_plot",), "p50 over warm-up frames too"),
    Mutation("bench_cpu_memory_called_peak", "eval/bench/metrics.py",
             'out["peak_memory_bytes"] = int(held_bytes + max(transient)) if transient else None',
             'out["peak_memory_bytes"] = int(held_bytes + max(transient)) if transient else int(held_bytes)',
             ("tests/eval/test_bench.py::test_sweep_writes_every_file_and_plot",), "a computed CPU figure reported as peak"),
    # --- several action experts on one prefill (issue 19)
    Mutation("every_head_uses_the_first_expert", "oxygen_gym/model/pi05/modeling.py",
             "        if head == ACTION_HEAD:\n            return self\n", "        if True:\n            return self\n",
             ("tests/policy/test_multi_head.py",), "fan-out denoises every head with pi0.5's own expert"),
    Mutation("head_noise_by_position", "policies/multitask.py",
             "manual_seed(head_noise_seed(self.seed, frame, h))",
             "manual_seed(head_noise_seed(self.seed, frame, str(self.action_heads.index(h))))",
             ("tests/policy/test_multi_head.py",), "a head's noise depends on which other heads run"),
    Mutation("bench_one_denoise_for_e_experts", "eval/bench/ideal.py",
             '    d_cost = E * costs.denoise.get(S, float("nan"))', '    d_cost = costs.denoise.get(S, float("nan"))',
             ("tests/eval/test_bench_heads.py",), "the ideal frame counts one denoise however many experts run"),
    Mutation("xr0_reads_first_layers", "oxygen_gym/model/xr0/action_expert.py",
             "        first = layers - self.config.read_layers\n", "        first = 0\n",
             ("tests/model/xr0/test_xr0_expert.py",), "the DiT reads the backbone's first layers, not its last"),
    Mutation("mrope_next_position_is_length", "oxygen_gym/model/xr0/xr0_model.py",
             "return PrefixState(pre.lengths, pre.next_positions,", "return PrefixState(pre.lengths, pre.lengths.clone(),",
             ("tests/model/xr0/test_xr0_engine.py",), "continuations start at the cache length, not max M-RoPE position + 1"),
)


def _copy_tree(dst: Path) -> None:
    """Tracked and untracked-but-not-ignored files of the working tree (what the tests see), as they are now."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         check=True, capture_output=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    # The editable install maps oxygen_gym.{policies,envs,eval} to the checkout's folders; inside the copy the
    # same names must resolve to the copy's folders. With the copy first on PYTHONPATH, `oxygen_gym` comes from
    # the copy, and these links make its subpackages the copy's too.
    for sub in ("policies", "envs", "eval"):
        link = dst / "oxygen_gym" / sub
        if not link.exists():
            link.symlink_to(dst / sub, target_is_directory=True)


def _tests_at(dst: Path, rev: str) -> None:
    """Replace the copy's tests/ by those of commit `rev` (to see what an older test suite caught)."""
    shutil.rmtree(dst / "tests")
    archive = subprocess.run(["git", "archive", rev, "tests"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    # older tests/conftest.py looked for the lerobot fixture beside the checkout, in ../shared
    shared = REPO.parent / "shared"
    if shared.is_dir() and not (dst.parent / "shared").exists():
        (dst.parent / "shared").symlink_to(shared, target_is_directory=True)


def _pytest(root: Path, tests: tuple[str, ...], timeout: int) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = -1, f"timeout after {timeout}s\n{(e.stdout or b'')[-2000:]!r}"
    return rc, out, time.perf_counter() - start


def _summary_line(out: str) -> str:
    lines = [l for l in out.strip().splitlines() if l.strip()]
    fails = [l for l in lines if l.startswith(("FAILED", "ERROR"))]
    return (fails[0] if fails else (lines[-1] if lines else "")).strip()[:160]


def _imports_from_copy(root: Path) -> None:
    """Refuse to run if the copy's tests would import the checkout's package instead of the copy's."""
    code = "import oxygen_gym, oxygen_gym.policies as p, oxygen_gym.eval as e; print(oxygen_gym.__file__, p.__file__, e.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, check=True).stdout
    if any(not f.startswith(str(root)) for f in out.split()):
        raise SystemExit(f"the copy imports the checkout's package, not its own: {out}")


def run(mutations: list[Mutation], timeout: int, tests_at: str | None = None) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        _copy_tree(root)
        if tests_at:
            _tests_at(root, tests_at)
        _imports_from_copy(root)
        baseline_tests = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
        rc, out, secs = _pytest(root, baseline_tests, timeout * 2)
        print(f"baseline ({len(baseline_tests)} test targets): rc={rc} in {secs:.0f}s  {_summary_line(out)}", flush=True)
        if rc != 0:
            raise SystemExit("the listed tests fail without any mutation; fix that first:\n" + out[-3000:])
        for m in mutations:
            target = root / m.path
            original = target.read_text()
            count = original.count(m.old)
            if count != 1:
                results.append({**m.__dict__, "result": "stale", "detail": f"text found {count} times", "seconds": 0.0})
                print(f"{m.name}: stale ({count} matches)", flush=True)
                continue
            target.write_text(original.replace(m.old, m.new))
            try:
                rc, out, secs = _pytest(root, m.tests, timeout)
            finally:
                target.write_text(original)
            skipped_only = rc == 0 and " skipped" in out and " passed" not in out
            result = "caught" if rc not in (0, 5) else ("skipped" if skipped_only or rc == 5 else "MISSED")
            results.append({**m.__dict__, "result": result, "detail": _summary_line(out), "seconds": round(secs, 1)})
            print(f"{m.name}: {result} in {secs:.0f}s  {_summary_line(out)}", flush=True)
    return results


def table(results: list[dict]) -> str:
    lines = ["| mutation | file | tests run | result | first failure |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        tests = ", ".join(t.replace("tests/", "") for t in r["tests"])
        detail = r["detail"].replace("|", "\\|") if r["result"] == "caught" else ""
        lines.append(f"| {r['name']} ({r['why']}) | {r['path']} | {tests} | {r['result']} | {detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutations")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per pytest run (default 900)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--tests-at", metavar="REV", help="run the tests of commit REV against today's code (test files "
                    "that did not exist then count as a failure to collect, so name files that did)")
    args = ap.parse_args(argv)
    chosen = list(MUTATIONS)
    if args.only:
        unknown = set(args.only) - {m.name for m in MUTATIONS}
        if unknown:
            ap.error(f"--only: unknown mutation(s) {sorted(unknown)}; see --list")
        chosen = [m for m in MUTATIONS if m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:28s} {m.path:36s} {m.why}")
        return 0
    results = run(chosen, args.timeout, args.tests_at)
    print()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["result"] == "caught" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
