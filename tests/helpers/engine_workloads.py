"""Seeded engine workloads shared by the engine tests: random observations and request arrivals."""
from __future__ import annotations

import numpy as np
import torch

from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.model.pi05.prefix_inputs import PrefixInputs
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool


def random_prefix(rng: np.random.Generator, cameras: int = 2, vocab: int = 1024, max_len: int = 48) -> PrefixInputs:
    images = [torch.from_numpy(rng.uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)) for _ in range(cameras)]
    masks = [torch.tensor([bool(i == 0 or rng.random() < 0.8)]) for i in range(cameras)]
    n = int(rng.integers(5, max_len))
    tokens = torch.zeros(1, max_len, dtype=torch.long)
    tokens[0, :n] = torch.from_numpy(rng.integers(4, vocab, n))
    token_masks = torch.zeros(1, max_len, dtype=torch.bool)
    token_masks[0, :n] = True
    return PrefixInputs(images, masks, tokens, token_masks)


def make_workload(seed: int, frames: int, *, max_tasks: int = 3, horizon: int = 10, vocab: int = 1024):
    """Per frame: (prefix inputs, noise, [(task, prompt ids, max_new_tokens), ...]) with 0..max_tasks arrivals."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(frames):
        prefix = random_prefix(rng, vocab=vocab)
        noise = torch.from_numpy(rng.standard_normal((1, horizon, 32)).astype(np.float32))
        arrivals = []
        for t in range(int(rng.integers(0, max_tasks + 1))):
            prompt = rng.integers(4, vocab, int(rng.integers(1, 6))).tolist()
            arrivals.append((f"task{t}", prompt, int(rng.choice([1, 3, 7, 12, 20]))))
        out.append((prefix, noise, arrivals))
    return out


def run_workload(model, mode: str, workload, *, k: int = 3, num_slots: int = 64, capacity: int = 800, check=None):
    """Run every frame, then drain in-flight requests with observation-free... frames of the last observation.

    Returns ({request_id: generated tokens}, [actions per frame], scheduler)."""
    cfg = model.config
    pool = SlotPool(num_slots, capacity, layers=cfg.vlm.depth, kv_heads=cfg.vlm.num_kv_heads, head_dim=cfg.vlm.head_dim)
    sched = FrameScheduler(model, pool, mode)
    tokens: dict[int, list[int]] = {}
    actions = []
    rid = 0
    for f, (prefix, noise, arrivals) in enumerate(workload):
        reqs = []
        for task, prompt, n in arrivals:
            reqs.append(Request(rid, task, f, list(prompt), max_new_tokens=n, eos_id=1))
            rid += 1
        res = sched.run(FrameInput(f, prefix, noise, reqs), k)
        actions.append(res.actions)
        for r, new in res.advanced:
            tokens.setdefault(r.request_id, []).extend(new)
        if check:
            check(sched)
    last_prefix, last_noise, _ = workload[-1]
    f = len(workload)
    while sched.in_flight():
        res = sched.run(FrameInput(f, last_prefix, last_noise, []), k)
        for r, new in res.advanced:
            tokens.setdefault(r.request_id, []).extend(new)
        f += 1
    return tokens, actions, sched
