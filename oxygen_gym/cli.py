"""The `oxygen-gym` command line: wiring only. Each subcommand is implemented by the module named in the table below,
which exposes `add_arguments(parser)` and `run(args) -> int`; a subcommand whose module is not there says so and exits 2."""
from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("oxygen_gym.eval.demo", "one closed-loop LIBERO episode with the built-in model: video + timing report"),
    "eval": ("oxygen_gym.eval.libero.eval_command", "closed-loop LIBERO evaluation (resumable, sharded, Ray)"),
    "bench": ("oxygen_gym.eval.bench.bench_command", "side-by-side speed benchmarks of every execution mode (`bench serve`: the server under load)"),
    "serve": ("oxygen_gym.serve.serve_command", "serve a policy over websockets (openpi-compatible)"),
    "inspect": ("oxygen_gym.policies.checkpoints.report", "what a policy will feed a checkpoint: cameras, normalisation, prompt, chunk"),
    "collect": ("oxygen_gym.train.collect.collect_command", "scripted LIBERO demonstrations with subtask labels, in LIBERO's HDF5 layout"),
    "train": ("oxygen_gym.train.train_command", "train a pi0.5 config on demonstrations (flow matching + language), resumable"),
}

# `oxygen-gym bench serve ...`: a second word that selects its own module (same add_arguments/run interface).
NESTED: dict[tuple[str, str], tuple[str, str]] = {
    ("bench", "serve"): ("oxygen_gym.eval.bench.serve_bench_command", "the policy server under load: batched vs one robot at a time"),
    ("bench", "live"): ("oxygen_gym.eval.bench.live_bench_command", "success rate against latency per execution strategy (live clock)"),
    ("bench", "action-latency"): ("oxygen_gym.eval.bench.action_latency", "obs -> actions with the frame's decode hidden vs the whole frame (Sec. 4.7)"),
    ("bench", "rtc"): ("oxygen_gym.eval.bench.rtc_cost", "real-time chunking's cost per denoise step: plain vs cheap vs guided"),
    ("train", "open-loop"): ("oxygen_gym.train.open_loop_command", "open-loop action error of a checkpoint on recorded frames (underfit or compounding?)"),
    ("bench", "adapters"): ("oxygen_gym.eval.bench.adapter_cost", "per-task LoRA adapters per decode step: mixed batch vs base-only vs one pass per adapter"),
}


def _load(name: str):
    module_name = SUBCOMMANDS[name][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (e.name == module_name or module_name.startswith(e.name + ".")):
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if tuple(argv[:2]) in NESTED:
        module_name, help_text = NESTED[tuple(argv[:2])]
        nested = argparse.ArgumentParser(prog=f"oxygen-gym {argv[0]} {argv[1]}", description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(nested)
        return int(module.run(nested.parse_args(argv[2:])) or 0)
    parser = argparse.ArgumentParser(prog="oxygen-gym", description="Multi-task VLA inference with a shared KV cache.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for name, (_, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:
            module = _load(name)
            if module is None:
                print(f"oxygen-gym {name}: not available in this build (module {SUBCOMMANDS[name][0]} is missing)", file=sys.stderr)
                return 2
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    if not argv:
        parser.print_help()
        return 2
    if argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        print(f"oxygen-gym: unknown command {argv[0]!r}; expected one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
