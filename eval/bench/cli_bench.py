"""`oxygen-gym bench cli`: how long `oxygen-gym ... --help` takes for every command, each run in a fresh process (the
import cost a user meets before the first line), and which heavy packages its parser pulled in.

    oxygen-gym bench cli --out bench/cli
    oxygen-gym bench cli --repeats 5 --commands "eval libero,serve" --out bench/cli-some

Writes results.json (`config`, `python_startup_s`, `points`: per command `command`, `times_s`, `median_s`, `min_s`,
`max_s`, `returncode`, `heavy_imports`, `over_target`) and results.md. Exits 1 when a command's --help failed.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

# What a parser must not import: each costs from 0.3 s (websockets, scipy) to several seconds (torch, transformers).
HEAVY = ("torch", "transformers", "mujoco", "gymnasium", "robosuite", "libero", "ray", "websockets", "matplotlib",
         "scipy", "safetensors", "h5py", "cv2")
TARGET_S = 1.5  # the budget for any `--help` (docs/benchmarks.md, "Command-line start-up")

# Runs the command's --help in this process, then prints the heavy top-level packages it imported.
_PROBE = """
import json, sys
from oxygen_gym.cli import main
try:
    main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(__HEAVY__))
sys.stderr.write("HEAVY=" + json.dumps(heavy) + "\\n")
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("bench/cli"), help="folder for results.json and results.md "
                                                                            "(default bench/cli)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per command; the median is reported "
                                                               "(default 3)")
    parser.add_argument("--commands", default=None, metavar="LIST",
                        help="comma list of commands to time, e.g. \"eval libero,serve\" (default: every command, "
                             "and `oxygen-gym` alone)")


def _commands(text: str | None) -> list[tuple[str, ...]]:
    from oxygen_gym.cli import command_paths

    every = command_paths()
    if text is None:
        return every
    wanted = [tuple(c.split()) for c in text.split(",") if c.strip()]
    unknown = [" ".join(w) for w in wanted if w not in every]
    if unknown:
        raise ValueError(f"--commands: unknown {unknown}; expected some of "
                         f"{[' '.join(w) for w in every if w]}")
    return wanted


def _time(argv: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc.returncode


def heavy_imports(words: tuple[str, ...]) -> list[str]:
    """The heavy packages `oxygen-gym WORDS --help` imports, from a fresh interpreter."""
    probe = _PROBE.replace("__HEAVY__", repr(HEAVY))
    proc = subprocess.run([sys.executable, "-c", probe, *words], capture_output=True, text=True)
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY=")), None)
    if line is None:
        raise RuntimeError(f"oxygen-gym {' '.join(words)} --help: the import probe failed:\n{proc.stderr[-2000:]}")
    return json.loads(line[len("HEAVY="):])


def measure(words: tuple[str, ...], repeats: int) -> dict:
    """`python -m oxygen_gym.cli WORDS --help`, `repeats` fresh processes (what the `oxygen-gym` script runs)."""
    runs = [_time([sys.executable, "-m", "oxygen_gym.cli", *words, "--help"]) for _ in range(repeats)]
    times = [t for t, _ in runs]
    median = statistics.median(times)
    return {"command": " ".join(("oxygen-gym", *words, "--help")), "times_s": [round(t, 3) for t in times],
            "median_s": round(median, 3), "min_s": round(min(times), 3), "max_s": round(max(times), 3),
            "returncode": max(rc for _, rc in runs), "heavy_imports": heavy_imports(words),
            "over_target": median > TARGET_S}


def render(results: dict) -> str:
    cfg = results["config"]
    lines = [
        "# `oxygen-gym ... --help` start-up",
        "",
        f"Each command's `--help` in a fresh process, {cfg['repeats']} runs, median (min-max) seconds; target "
        f"{TARGET_S} s. Python {cfg['python']} on {cfg['machine']}; a bare `python -c pass` took "
        f"{results['python_startup_s']:.3f} s.",
        "",
        "| command | median s | min-max s | heavy imports | |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in results["points"]:
        flag = "over target" if p["over_target"] else ("failed" if p["returncode"] else "")
        lines.append(f"| `{p['command']}` | {p['median_s']:.2f} | {p['min_s']:.2f}-{p['max_s']:.2f} | "
                     f"{', '.join(p['heavy_imports']) or 'none'} | {flag} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        if args.repeats < 1:
            raise ValueError(f"--repeats: {args.repeats}; expected >= 1")
        commands = _commands(args.commands)
    except ValueError as e:
        print(f"oxygen-gym bench cli: error: {e}", file=sys.stderr)
        return 2
    startup = statistics.median(_time([sys.executable, "-c", "pass"])[0] for _ in range(args.repeats))
    points = []
    for words in commands:
        points.append(measure(words, args.repeats))
        p = points[-1]
        print(f"{p['command']:<45} {p['median_s']:6.2f} s  heavy: {', '.join(p['heavy_imports']) or 'none'}",
              file=sys.stderr, flush=True)
    results = {"config": {"repeats": args.repeats, "python": platform.python_version(), "machine": platform.machine(),
                          "command": " ".join(sys.argv)},
               "python_startup_s": round(startup, 3), "points": points}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "results.md").write_text(render(results))
    print(render(results))
    return 1 if any(p["returncode"] for p in points) else 0
