"""The `oxygen-gym` command line: wiring only. Each command is implemented by the module its table entry names, which
exposes `add_arguments(parser)` and `run(args) -> int` (an entry `module:NAME` uses `add_NAME_arguments` and
`run_NAME` of that module instead); a command whose module is not there says so and exits 2.

Only the module of the command asked for is imported, and a command module imports nothing heavy (torch, transformers,
simulators, Ray, websockets, matplotlib) before its `run`: `oxygen-gym <cmd> --help` answers in well under a second
(`oxygen-gym bench cli` measures it; tests/project/test_cli.py checks what each parser imports). Errors in the arguments are
one line, `oxygen-gym <cmd>: error: ...` naming the flag, exit status 2 (docs/api.md section 5).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from collections.abc import Callable, Sequence

PROG = "oxygen-gym"

# command -> (module, one-line help); a None module: the command is only its second words (NESTED)
SUBCOMMANDS: dict[str, tuple[str | None, str]] = {
    "demo": ("oxygen_gym.eval.demo", "one closed-loop episode, video + timing report: LIBERO with the shipped trained model (libero-spatial) by default"),
    "eval": (None, "closed-loop evaluation: `eval libero`, `eval aloha`, `eval droid`, `eval merge` (resumable, sharded, Ray; summary and plots)"),
    "bench": ("oxygen_gym.eval.bench.bench_command", "side-by-side speed benchmarks of every execution mode (`bench serve`: the server under load)"),
    "serve": ("oxygen_gym.serve.serve_command", "serve a policy over websockets (openpi-compatible)"),
    "inspect": ("oxygen_gym.policies.inspect_command", "what a policy will feed a checkpoint: cameras, normalisation, prompt, chunk"),
    "collect": ("oxygen_gym.train.collect.collect_command", "scripted LIBERO demonstrations with subtask labels, in LIBERO's HDF5 layout"),
    "train": ("oxygen_gym.train.train_command", "train a pi0.5 config on demonstrations (flow matching + language), resumable"),
}

# `oxygen-gym bench serve ...`: a second word that selects its own module (same add_arguments/run interface).
NESTED: dict[tuple[str, str], tuple[str, str]] = {
    ("eval", "libero"): ("oxygen_gym.eval.libero.eval_command:libero", "closed-loop LIBERO evaluation: resumable, sharded, Ray; summary, plots, videos"),
    ("eval", "aloha"): ("oxygen_gym.eval.sim_command:aloha", "closed-loop ALOHA evaluation (gym-aloha sim): records, resume, summary, plots, videos as eval libero"),
    ("eval", "droid"): ("oxygen_gym.eval.sim_command:droid", "closed-loop DROID-style evaluation (robosuite Panda): records, resume, summary, plots, videos as eval libero"),
    ("eval", "merge"): ("oxygen_gym.eval.libero.eval_command:merge", "combine the --out folders of shards (or separate runs of one evaluation) into one"),
    ("bench", "serve"): ("oxygen_gym.eval.bench.serve_bench_command", "the policy server under load: batched vs one robot at a time"),
    ("bench", "live"): ("oxygen_gym.eval.bench.live_bench_command", "success rate against latency per execution strategy (live clock)"),
    ("bench", "action-latency"): ("oxygen_gym.eval.bench.action_latency", "obs -> actions with the frame's decode hidden vs the whole frame (Sec. 4.7)"),
    ("bench", "rtc"): ("oxygen_gym.eval.bench.rtc_cost", "real-time chunking's cost per denoise step: plain vs cheap vs guided"),
    ("bench", "adapters"): ("oxygen_gym.eval.bench.adapter_cost", "per-task LoRA adapters per decode step: mixed batch vs base-only vs one pass per adapter"),
    ("bench", "contention"): ("oxygen_gym.eval.bench.contention", "act() alone and beside busy processes: the package's thread placement vs torch's defaults"),
    ("bench", "cli"): ("oxygen_gym.eval.bench.cli_bench", "how long each `oxygen-gym ... --help` takes in a fresh process"),
    ("train", "open-loop"): ("oxygen_gym.train.open_loop_command", "open-loop action error of a checkpoint on recorded frames (underfit or compounding?)"),
}


class CommandParser(argparse.ArgumentParser):
    """argparse with docs/api.md section 5's error form: one line naming the flag, exit status 2."""

    def error(self, message: str):  # argparse's own: usage lines, then the message
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommandUnavailable(Exception):
    """The module of a command is not in this build."""


def version() -> str:
    """The installed distribution's version (importlib.metadata); the source tree's when it is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("oxygen-gym")
    except PackageNotFoundError:
        from oxygen_gym import __version__

        return __version__


def command_paths() -> list[tuple[str, ...]]:
    """Every command as its words: () for `oxygen-gym` itself, then each command, each followed by its second words."""
    paths: list[tuple[str, ...]] = [()]
    for name in SUBCOMMANDS:
        paths.append((name,))
        paths += [words for words in NESTED if words[0] == name]
    return paths


def _entry(target: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    """(add_arguments, run) of a table entry `module` or `module:NAME`."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (e.name == module_name or module_name.startswith(e.name + ".")):
            raise CommandUnavailable(f"not available in this build (module {module_name} is missing)") from None
        raise
    if name:
        return getattr(module, f"add_{name}_arguments"), getattr(module, f"run_{name}")
    return module.add_arguments, module.run


def _words_of(argv: Sequence[str]) -> tuple[str, ...]:
    """The command words argv starts with: (), (command,) or (command, second word)."""
    if not argv or argv[0] not in SUBCOMMANDS:
        return ()
    return tuple(argv[:2]) if tuple(argv[:2]) in NESTED else (argv[0],)


def _children_epilog(name: str) -> str:
    rows = [(f"{PROG} {a} {b}", help_text) for (a, b), (_, help_text) in NESTED.items() if a == name]
    width = max(len(r[0]) for r in rows)
    return "\n".join(["commands under it (each has its own --help):"] + [f"  {c:<{width}}  {h}" for c, h in rows])


def build_parser(words: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of `oxygen-gym WORDS...`, its module's flags added (its module imported, nothing run); its parsed
    arguments carry `_run`. Raises CommandUnavailable when the module is not in this build."""
    words = tuple(words)
    if not words:
        words_of = {name: "|".join(b for a, b in NESTED if a == name) for name, _ in NESTED}
        epilog = (f"`{PROG} COMMAND --help` lists a command's flags; commands with second words: "
                  + ", ".join(f"{a} {b}" for a, b in words_of.items()) + ".")
        parser = CommandParser(prog=PROG, description="Multi-task VLA inference with a shared KV cache.",
                               epilog=textwrap.fill(epilog, 100, break_on_hyphens=False),
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for name, (_, help_text) in SUBCOMMANDS.items():
            sub.add_parser(name, help=help_text)
        return parser
    if words in NESTED:
        target, help_text = NESTED[words]
    elif len(words) == 1 and words[0] in SUBCOMMANDS:
        target, help_text = SUBCOMMANDS[words[0]]
    else:
        raise ValueError(f"{PROG}: unknown command {' '.join(words)!r}")
    parser = CommandParser(prog=" ".join((PROG, *words)), description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    children = len(words) == 1 and any(a == words[0] for a, _ in NESTED)
    if target is None:  # only second words: list them (each one is routed to its own parser before this one)
        sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
        for (a, b), (_, child_help) in NESTED.items():
            if a == words[0]:
                sub.add_parser(b, help=child_help)
        return parser
    add_arguments, run = _entry(target)
    add_arguments(parser)
    parser.set_defaults(_run=run)
    if children:
        parser.epilog = "\n\n".join(p for p in (parser.epilog, _children_epilog(words[0])) if p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = _words_of(argv)
    if not words and argv and not argv[0].startswith("-"):
        print(f"{PROG}: error: unknown command {argv[0]!r}; expected one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    try:
        parser = build_parser(words)
    except CommandUnavailable as e:
        print(f"{PROG} {' '.join(words)}: {e}", file=sys.stderr)
        return 2
    rest = argv[len(words):]
    if not rest and (not words or (len(words) == 1 and SUBCOMMANDS[words[0]][0] is None)):
        parser.print_help()  # `oxygen-gym` or `oxygen-gym eval` alone: what it takes
        return 2
    args = parser.parse_args(rest)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
