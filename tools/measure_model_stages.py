"""Parameter counts of the built-in configs and CPU stage times (prefill, denoise, one decode step).

The setting of the paper's stage split (prefill : denoise : decode step = 44 : 20 : 13 ms on an RTX 4090): two
224 px cameras plus a ~40-token prompt, 10 Euler steps over the config's horizon, one greedy decode step at batch 1.

    .venv/bin/python tools/measure_model_stages.py --models tiny small --threads 2 --repeats 7
    .venv/bin/python tools/measure_model_stages.py --cpu-time   # 1 thread, CPU time of this thread only

Wall-clock times on a machine shared with other busy processes are dominated by waiting for a core (two OpenMP
threads on two contended cores can be 5-10x slower); `--cpu-time` counts only the time this thread ran, which
stays meaningful under contention. Two uncontended threads run the large matmuls ~1.7x faster than one.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from tqdm import tqdm

from oxygen_gym.model import PI05Config, build_model, count_parameters

PROMPT_TOKENS = 40


CLOCK = time.perf_counter


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up (allocations, oneDNN primitive caches)
    times = []
    for _ in range(repeats):
        start = CLOCK()
        fn()
        times.append((CLOCK() - start) * 1e3)
    return statistics.median(times)


def measure(name: str, repeats: int) -> dict:
    model = build_model(name, seed=0)
    c = model.config
    gen = torch.Generator().manual_seed(0)
    images = [torch.rand(1, 3, 224, 224, generator=gen) * 2 - 1 for _ in range(2)]
    masks = [torch.ones(1, dtype=torch.bool) for _ in range(2)]
    tokens = torch.randint(4, c.vocab_size, (1, PROMPT_TOKENS), generator=gen)
    token_masks = torch.ones(1, PROMPT_TOKENS, dtype=torch.bool)
    noise = torch.randn(1, c.action_horizon, c.action_dim, generator=gen)
    prefix = model.embed_prefix(images, masks, tokens, token_masks)
    cache = model.new_cache(1, prefix.max_len + max(c.action_horizon, 64))

    def prefill():
        model.prefill(cache, model.embed_prefix(images, masks, tokens, token_masks))

    prefill_ms = median_ms(prefill, repeats)
    denoise_ms = median_ms(lambda: model.denoise(cache, prefix.lengths, noise), repeats)
    model.prefill(cache, prefix)
    step = {"i": 0}

    def decode():
        model.decode_step(cache, tokens[:, 1], prefix.lengths + step["i"] % 32)
        step["i"] += 1

    decode_ms = median_ms(decode, max(repeats * 3, 10))
    return {"prefill_ms": prefill_ms, "denoise_ms": denoise_ms, "decode_ms": decode_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "small"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cpu-time", action="store_true", help="one thread, timed by its own CPU time")
    args = parser.parse_args()
    if args.cpu_time:
        global CLOCK
        CLOCK, args.threads = time.thread_time, 1
    torch.set_num_threads(args.threads)
    tqdm.write(f"{args.threads} thread(s), {'thread CPU time' if args.cpu_time else 'wall clock'}, median of {args.repeats}")
    for name in ("tiny", "small", "pi05"):
        print(f"{name}: {count_parameters(name) / 1e6:.2f} M parameters "
              f"({count_parameters(name, include_unused=True) / 1e6:.2f} M with the unused expert LM head)")
    for name in tqdm(args.models, desc="models"):
        r = measure(name, args.repeats)
        total = r["prefill_ms"] / 44
        act5 = r["prefill_ms"] + r["denoise_ms"] + 5 * r["decode_ms"]
        tqdm.write(
            f"{name} ({PI05Config.named(name).action_horizon} steps horizon): prefill {r['prefill_ms']:.1f} ms, "
            f"denoise {r['denoise_ms']:.1f} ms, decode step {r['decode_ms']:.2f} ms -> "
            f"44 : {r['denoise_ms'] / total:.1f} : {r['decode_ms'] / total:.1f}; prefill+denoise+5 decode {act5:.0f} ms"
        )


if __name__ == "__main__":
    main()
