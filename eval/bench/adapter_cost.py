"""`oxygen-gym bench adapters`: what per-task LoRA adapters cost per decode step (model/lora_bank.py).

    oxygen-gym bench adapters --model small --rows 8 --adapters 0,1,2,4 --rank 8 --repeats 30 --out bench/adapters

One batch of `rows` language requests over prefilled frames decodes one token per row, three ways, interleaved round
by round so all three see the same machine load:

- `base`: every row on the base weights (no routing: what the engine runs when no row has an adapter);
- `mixed`: rows spread round-robin over the base and `n` adapters, one call: the base matmul once for the batch
  plus a gathered low-rank update per row (n = 0 routes every row to the zero slot: the routing's own overhead);
- `per_adapter`: each adapter's rows (and the base rows) decoded in their own batch, with that adapter merged into
  a copy of the weights: one pass per adapter, the alternative to batching them, summed.

Reported per n: ms per step (p50 over rounds) and the ratios mixed / base and mixed / per_adapter, each the median of
the per-round ratios. Writes results.json and results.md under --out after every n (a rerun keeps the n done).
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch and the model load in the functions: `oxygen-gym bench adapters --help` stays fast
    import torch

    from oxygen_gym.model.lora_bank import LoraWeights


def _counts(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--adapters: expected comma-separated counts like 0,1,2,4, got {text!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"--adapters: expected counts >= 0, got {text!r}")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="folder for results.json and results.md")
    parser.add_argument("--model", default="small", help="a built-in model (default small)")
    parser.add_argument("--rows", type=int, default=8, help="requests in the decode batch (default 8)")
    parser.add_argument("--adapters", type=_counts, default=(0, 1, 2, 4),
                        help="adapter counts to measure, each with the base rows (default 0,1,2,4)")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank of every adapter (default 8)")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved rounds per count (default 30)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")


def random_adapter(model, rank: int, seed: int) -> LoraWeights:
    """An adapter over every language projection (random A and B: the cost does not depend on the values)."""
    import torch

    from oxygen_gym.model.lora_bank import LoraWeights, language_modules

    gen = torch.Generator().manual_seed(seed)
    modules = {n: (torch.randn(rank, m.in_features, generator=gen) * 0.02, torch.randn(m.out_features, rank, generator=gen) * 0.02)
               for n, m in language_modules(model).items()}
    return LoraWeights(modules, {n: 2.0 for n in modules})


class DecodeSetup:
    """`rows` prefilled frames in one cache, each row one token into its continuation, rows grouped by slot."""

    def __init__(self, policy, rows: int) -> None:
        import torch

        self.policy, self.model = policy, policy.model
        rng = np.random.default_rng(0)
        inputs = []
        for _ in range(rows):
            obs = {"images": {c: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for c in policy.robot.cameras},
                   "state": rng.uniform(-0.5, 0.5, policy.robot.state_dim).astype(np.float32),
                   "prompt": "put the bowl on the plate"}
            inputs.append(policy.model_inputs(obs))
        self.cache = self.model.new_cache(rows, policy.pool.capacity)
        with torch.inference_mode():
            state = self.model.prefill_frame(self.cache, self.model.batch_prefix_inputs(inputs))
        self.index = state.lengths.clone()
        self.positions = state.next_positions.clone()
        self.tokens = torch.full((rows,), 2, dtype=torch.long, device=self.model.device)

    def step(self, model, start: int, stop: int, adapters: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits of rows [start, stop) (the step writes the same cache entries every time)."""
        import torch

        rows = slice(start, stop)
        with torch.inference_mode():
            return model.decode_step(self.cache.rows(start, stop), self.tokens[rows], self.positions[rows],
                                     self.index[rows], adapters=adapters)


def groups_of(rows: int, n: int) -> list[tuple[int, int, int]]:
    """(slot, start, stop) of each slot's contiguous rows: row i of the round-robin spread goes to slot i % (n + 1)."""
    sizes = [len(range(s, rows, n + 1)) for s in range(n + 1)]
    out, start = [], 0
    for slot, size in enumerate(sizes):
        if size:
            out.append((slot, start, start + size))
        start += size
    return out


def measure(setup: DecodeSetup, n: int, rank: int, repeats: int) -> dict:
    """One adapter count: base, mixed and per-adapter step times, interleaved round by round."""
    import torch

    from oxygen_gym.model.lora_bank import bank_of, merged_copy

    model = setup.model
    rows = setup.cache.num_rows
    bank = bank_of(model)
    for name in list(bank.names):
        bank.unload(name)
    weights = [random_adapter(model, rank, seed=s) for s in range(n)]
    for s, w in enumerate(weights):
        bank.load(f"a{s}", w)
    groups = groups_of(rows, n)
    slots = torch.cat([torch.full((b - a,), slot, dtype=torch.long) for slot, a, b in groups]).to(model.device)
    merged = {0: model}
    for s, w in enumerate(weights, start=1):
        if any(slot == s for slot, _, _ in groups):
            merged[s] = merged_copy(model, w.modules, w.scales)

    def base() -> torch.Tensor:
        return setup.step(model, 0, rows, None)

    def mixed() -> torch.Tensor:
        return setup.step(model, 0, rows, slots)

    def per_adapter() -> torch.Tensor:
        return torch.cat([setup.step(merged[slot], a, b, None) for slot, a, b in groups])

    # the mixed batch and the passes per adapter compute the same logits (else the timing compares different work)
    agree = float((mixed() - per_adapter()).abs().max())
    adapted = float((mixed() - base()).abs().max()) if n else 0.0

    methods = {"base": base, "mixed": mixed, "per_adapter": per_adapter}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(repeats + 1):  # round 0 warms up (allocations, the bank's first gathers)
        for m, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[m].append(1e3 * (time.perf_counter() - t0))
    t = {m: np.array(v[1:]) for m, v in times.items()}
    return {
        "adapters": n, "rows": rows, "rank": rank, "groups": [{"slot": s, "rows": b - a} for s, a, b in groups],
        "max_logit_diff_mixed_vs_per_adapter": agree, "max_logit_diff_mixed_vs_base": adapted,
        **{f"{m}_ms_p50": float(np.median(v)) for m, v in t.items()},
        "mixed_over_base_p50": float(np.median(t["mixed"] / t["base"])),
        "mixed_over_per_adapter_p50": float(np.median(t["mixed"] / t["per_adapter"])),
    }


def table(rows: list[dict]) -> str:
    lines = ["| adapters | rows per slot | base ms/step | mixed ms/step (x base) | one pass per adapter ms/step "
             "(mixed / it) |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        split = "+".join(str(g["rows"]) for g in r["groups"])
        lines.append(f"| {r['adapters']} | {split} | {r['base_ms_p50']:.2f} | {r['mixed_ms_p50']:.2f} "
                     f"({r['mixed_over_base_p50']:.2f}x) | {r['per_adapter_ms_p50']:.2f} "
                     f"({r['mixed_over_per_adapter_p50']:.2f}x) |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.rows < 1 or args.rank < 1 or args.repeats < 1:
        print("oxygen-gym bench adapters: --rows, --rank and --repeats must be >= 1", file=sys.stderr)
        return 2
    import torch

    from oxygen_gym.model.lora_bank import LANGUAGE_PROJECTIONS
    if args.threads:
        torch.set_num_threads(args.threads)
    from oxygen_gym import MultiTaskPolicy

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    config = {"command": "oxygen-gym " + shlex.join(sys.argv[1:]), "model": args.model, "rows": args.rows,
              "rank": args.rank, "repeats": args.repeats, "targets": list(LANGUAGE_PROJECTIONS),
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine()}
    done = []
    if path.exists():
        old = json.loads(path.read_text())
        same = {k: old["config"].get(k) for k in ("model", "rows", "rank")} == {k: config[k] for k in ("model", "rows", "rank")}
        if not same:
            print(f"oxygen-gym bench adapters: {path} holds another model/rows/rank; use another --out", file=sys.stderr)
            return 2
        done = old["results"]
    policy = MultiTaskPolicy.from_pretrained(args.model, robot="libero", num_slots=args.rows)
    try:
        setup = DecodeSetup(policy, args.rows)
        for n in args.adapters:
            if any(r["adapters"] == n for r in done):
                print(f"bench adapters: {n} adapter(s) already measured, kept")
                continue
            print(f"bench adapters: {n} adapter(s) ...", flush=True)
            done.append(measure(setup, n, args.rank, args.repeats))
            done.sort(key=lambda r: r["adapters"])
            path.write_text(json.dumps({"config": config, "results": done}, indent=2))
            (args.out / "results.md").write_text(f"`{config['command']}`\n\n" + table(done))
    finally:
        policy.close()
    print(table(done))
    return 0
