"""`oxygen-gym bench`: every execution mode side by side on one machine, same inputs; ratios, ideal times, plots.

    oxygen-gym bench --model small --robot libero --N 5,30 --k 1,5 --out bench/x
    oxygen-gym bench --preset gpu --out bench/h200
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .sweep_config import KERNELS, PRESETS, BenchConfig, BenchConfigError, with_preset
from .records import ALL_MODES


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _onoff(text: str) -> bool | None:
    table = {"auto": None, "on": True, "off": False}
    if text not in table:
        raise argparse.ArgumentTypeError(f"expected auto, on or off, got {text!r}")
    return table[text]


# option -> (BenchConfig field, argparse kwargs)
OPTIONS = {
    "--model": ("model", dict(help="built-in model (random weights): tiny | small | pi05 | multi-tiny | multi-small | xr0-tiny | xr0-small | xr0")),
    "--robot": ("robot", dict(help="observation shapes: libero (2 cameras) | droid (2) | aloha (3)")),
    "--device": ("device", dict(help="cpu | cuda | cuda:N")),
    "--dtype": ("dtype", dict(help="float32 | bfloat16 (default: float32 on CPU, bfloat16 on CUDA)")),
    "--threads": ("threads", dict(type=int, help="torch intra-op threads (default: all cores)")),
    "--modes": ("modes", dict(type=_names, help=f"comma list of {','.join(ALL_MODES)}")),
    "--N": ("N", dict(type=_ints, help="tokens per request, comma list")),
    "--k": ("k", dict(type=_ints, help="decode steps per frame (oxygen, upper_bound), comma list")),
    "--S": ("S", dict(type=_ints, help="denoise steps; the first is the main sweep's, the rest add heatmap columns")),
    "--heads": ("heads", dict(type=_ints, help="action experts fanned out from each prefill (the model's first E heads), comma list")),
    "--workloads": ("workloads", dict(type=_names, help="fixed[:R], uniform:R, poisson:R, mixed:S/L[:p] (comma list)")),
    "--frames": ("frames", dict(type=int, help="measured frames per point, after warm-up")),
    "--warmup": ("warmup", dict(type=int, help="warm-up frames per point (default: until the batch is full, +2)")),
    "--chunk": ("chunk", dict(type=int, help="frames each point runs per turn when points interleave")),
    "--seed": ("seed", dict(type=int, help="weights, observations, noise and arrivals")),
    "--kernels": ("kernels", dict(choices=KERNELS, help="CPU linear path for small-row calls (auto: onednn)")),
    "--cuda-graphs": ("cuda_graphs", dict(type=_onoff, help="auto | on | off (off: eager fallback)")),
    "--soak-frames": ("soak_frames", dict(type=int, help="frames of the D.3 fluctuating-load soak (0: skip)")),
    "--soak-k": ("soak_k", dict(type=int, help="decode budget k during the soak")),
    "--soak-slots": ("soak_slots", dict(type=int, help="KV slots during the soak (the most active requests)")),
    "--observations": ("observations", dict(type=int, help="distinct synthetic observations cycled through")),
    "--task-prompt": ("task_prompt", dict(help="a task prompt after the shared prefix (default: one token)")),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json, results.md, plots/")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="gpu: pi05 dims on CUDA; cpu: the docs' small sweep; xr0-cpu / heads-cpu: paper Tables 1 and 4 on a CPU; smoke: tiny, seconds")
    for flag, (_, kwargs) in OPTIONS.items():
        parser.add_argument(flag, default=None, **kwargs)
    parser.add_argument("--no-calibrate", action="store_true", help="skip the per-kernel-path decode scaling")
    parser.add_argument("--no-plots", action="store_true", help="results.json and results.md only")
    parser.add_argument("--render", action="store_true", help="only redraw plots/ and results.md from --out's results.json")


def config_from_args(args: argparse.Namespace, argv: list[str] | None = None) -> BenchConfig:
    explicit = {field for flag, (field, _) in OPTIONS.items() if getattr(args, flag[2:].replace("-", "_")) is not None}
    cfg = BenchConfig(out=args.out, calibrate=not args.no_calibrate, plots=not args.no_plots)
    cfg = with_preset(cfg, args.preset, explicit)
    for flag, (field, _) in OPTIONS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            setattr(cfg, field, value)
    if cfg.device.startswith("cuda") and "dtype" not in explicit:
        cfg.dtype = None
    argv = sys.argv[1:] if argv is None else argv
    cfg.command = "oxygen-gym " + " ".join(shlex.quote(a) for a in argv) if argv and argv[0] == "bench" else "oxygen-gym bench " + " ".join(shlex.quote(a) for a in argv)
    return cfg.check()


def run(args: argparse.Namespace) -> int:
    from .sweep import render, run_bench

    if args.render:
        return render(args.out)

    try:
        cfg = config_from_args(args)
    except BenchConfigError as e:
        print(f"oxygen-gym bench: {e}", file=sys.stderr)
        return 2
    results = run_bench(cfg)
    print((cfg.out / "results.md").read_text())
    failed = [p for p in results["points"] if p.get("error")]
    if failed:
        print(f"oxygen-gym bench: {len(failed)} point(s) failed; see results.json", file=sys.stderr)
        return 1
    return 0
