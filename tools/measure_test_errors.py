"""Measure the numerical errors the tests' tolerances are set from (re-run after a change of kernels or torch).

Each section prints the largest error its test would see, so a tolerance can stay a small multiple of it:

    OMP_NUM_THREADS=1 .venv/bin/python tools/measure_test_errors.py parity [--gelu-exact]   # test_model_parity.py
    OMP_NUM_THREADS=1 .venv/bin/python tools/measure_test_errors.py cached [seeds...]       # test_model_cached.py
    OMP_NUM_THREADS=1 .venv/bin/python tools/measure_test_errors.py kernels                 # test_bench.py kernel paths

`--gelu-exact` swaps the Gemma MLP's tanh GELU for the exact one, to see how far above the tolerance that bug lands.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
torch.set_num_threads(1)


def parity(gelu_exact: bool) -> None:
    import numpy as np

    import test_model_parity as T
    from conftest import FIXTURE_DIR
    from oxygen_gym.model import layers, load_pretrained

    if gelu_exact:
        def exact(self, x):
            return layers.linear(F.gelu(layers.linear(x, self.gate_proj)) * layers.linear(x, self.up_proj), self.down_proj)
        layers.GatedMLP.forward = exact
    ref = np.load(FIXTURE_DIR / "reference.npz")
    model = load_pretrained(FIXTURE_DIR / "checkpoint", config=T.fixture_config.__wrapped__(FIXTURE_DIR), dtype=torch.float32)
    for pre in T.CASES:
        images, masks, tokens, tm = T.inputs(ref, pre)
        noise = torch.from_numpy(ref[pre + "noise"])
        rec = T.RecordVelocities(model.action_out_proj.weight)
        with rec:
            actions = model.sample_actions(images, masks, tokens, tm, noise=noise, num_steps=10)
        v = max(T.rel_err(a, b) for a, b in zip(rec.velocities, ref[pre + "v_t_per_step"]))
        print(f"{pre or 'b1_'} actions {T.rel_err(actions, ref[pre + 'actions']):.2e}  velocity (max over steps) {v:.2e}")
        prefix = model.embed_prefix(images, masks, tokens, tm)
        hidden = model.prefill(model.new_cache(tokens.shape[0], prefix.max_len), prefix)
        for b in range(tokens.shape[0]):
            n = int(prefix.lengths[b])
            h = T.rel_err(hidden[b, :n], torch.from_numpy(ref[pre + "prefix_last_hidden"])[b][prefix.valid[b]])
            lg = T.rel_err(model.lm_logits(hidden[b, n - 1]), ref[pre + "prefix_last_logits"][b])
            print(f"{pre or 'b1_'} row {b} prefix hidden {h:.2e}  last logits {lg:.2e}")
    bf16 = load_pretrained(FIXTURE_DIR / "checkpoint", dtype=torch.bfloat16)
    images, masks, tokens, tm = T.inputs(ref, "")
    out = bf16.sample_actions(images, masks, tokens, tm, noise=torch.from_numpy(ref["noise"]))
    print(f"bf16 actions {T.rel_err(out, ref['actions']):.2e}")


def cached(seeds: list[int]) -> None:
    import test_model_cached as T
    from model_reference import reference_actions, reference_forward
    from oxygen_gym.model import build_model

    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        model = build_model(T.tiny2(), seed=seed)
        images, masks, tokens, tm = T.random_batch(gen, model.config, [9, 31, 17], {0: [2], 1: [1]})
        noise = torch.randn(3, model.config.action_horizon, model.config.action_dim, generator=gen)
        a = T.rel_err(model.sample_actions(images, masks, tokens, tm, noise=noise, num_steps=10),
                      reference_actions(model, images, masks, tokens, tm, noise, num_steps=10))
        gen = torch.Generator().manual_seed(seed)
        model = build_model(T.tiny2(), seed=seed)
        c = model.config
        images, masks, tokens, tm = T.random_batch(gen, c, [40, 7, 22], {0: [1], 1: [2]})
        text = torch.randint(4, c.vocab_size, (3, 6), generator=gen)
        x_t = torch.randn(3, c.action_horizon, c.action_dim, generator=gen)
        ref = reference_forward(model, images, masks, tokens, tm, text, x_t, 1.0)
        prefix = model.embed_prefix(images, masks, tokens, tm)
        cache = model.new_cache(3, prefix.max_len + c.action_horizon)
        hidden = model.prefill(cache, prefix)
        h = max(T.rel_err(hidden[r, : int(prefix.lengths[r])], ref.prefix_hidden[r][prefix.valid[r]]) for r in range(3))
        model.denoise(cache, prefix.lengths, x_t, num_steps=10)
        e = T.rel_err(model.lm_logits(model.extend(cache.rows(0, 3), text, prefix.lengths)), ref.text_logits)
        cache = model.new_cache(3, prefix.max_len + c.action_horizon)
        model.prefill(cache, prefix)
        d = max(T.rel_err(model.decode_step(cache, text[:, i], prefix.lengths + i), ref.text_logits[:, i]) for i in range(6))
        print(f"seed {seed}: actions {a:.2e}  prefix hidden {h:.2e}  extend logits {e:.2e}  decode-step logits {d:.2e}")


def kernels() -> None:
    from engine_workloads import make_workload, run_workload
    from oxygen_gym.engine.model_api import PrefixState
    from oxygen_gym.engine.runner import ModelRunner
    from oxygen_gym.engine.slots import SlotPool
    from oxygen_gym.eval.bench.point_runner import pool_args
    from oxygen_gym.eval.bench.workloads import make_observations
    from oxygen_gym.model import cpu_kernels
    from oxygen_gym.model.pi05.init import build_model

    tiny = build_model("tiny", seed=3)
    obs = make_observations(tiny, "libero", count=5, seed=2)
    pool = SlotPool(**pool_args(tiny, 8, obs.capacity(12)))
    runner = ModelRunner(tiny, pool, cuda_graphs=False)
    lengths = [int(runner.prefill(s, 1, p).lengths[0]) for s, p in enumerate(obs.prefixes)]
    pool.active = 5
    state = PrefixState(torch.tensor([lengths[3]]), torch.tensor([lengths[3]]))
    eager = tiny.denoise_head("actions", pool.view(3, 4), state, obs.noise(0), 10)
    pool.copy(3, pool.scratch, lengths[3])
    body = runner.denoise_body("actions", 10, state, obs.noise(0))
    body.load([obs.noise(0), *state.tensors()])
    print(f"static-shape denoise vs eager: max abs {float((body.run() - eager).abs().max()):.2e}")
    tokens, positions = torch.tensor([5, 6, 7, 8, 9]), torch.tensor(lengths)
    saved = pool.cache.k.clone(), pool.cache.v.clone()
    step = runner.decode_body(8)
    pad = torch.zeros(3, dtype=torch.long)
    step.load([torch.cat([tokens, pad]), torch.cat([positions, pad]), torch.cat([positions, pad])])
    got = step.run()[:5].clone()
    pool.cache.k.copy_(saved[0])
    pool.cache.v.copy_(saved[1])
    print(f"static-shape decode vs eager: max abs {float((got - tiny.decode_step(pool.view(0, 5), tokens, positions)).abs().max()):.2e}")
    paths = ["eager"]
    if cpu_kernels.available():
        cpu_kernels.set_path(tiny, "onednn")
        layer, gen = tiny.vlm.layers[0].mlp.gate_proj, torch.Generator().manual_seed(0)
        worst = max(float((cpu_kernels.packed_linear(x, layer) - F.linear(x, layer.weight)).abs().max())
                    for x in (torch.randn(r, layer.in_features, generator=gen) for r in (1, 2, 6, 64, 65)))
        print(f"packed_linear vs F.linear: max abs {worst:.2e}")
        paths.append("onednn")
    for path in paths:
        cpu_kernels.set_path(tiny, path)
        for seed, k in ((11, 1), (12, 3), (13, 5)):
            w = make_workload(seed, frames=14, max_tasks=3)
            ref_t, ref_a, _ = run_workload(tiny, "isolated", w, k=k)
            for mode in ("shared", "oxygen"):
                t, a, _ = run_workload(tiny, mode, w, k=k)
                diff = max(float((x - y).abs().max()) for x, y in zip(a, ref_a))
                print(f"{path} seed {seed} k={k} {mode} vs isolated: same tokens {t == ref_t}, actions max abs {diff:.2e}")


if __name__ == "__main__":
    what, rest = (sys.argv[1] if len(sys.argv) > 1 else ""), sys.argv[2:]
    if what == "parity":
        parity("--gelu-exact" in rest)
    elif what == "cached":
        cached([int(s) for s in rest] or list(range(8)))
    elif what == "kernels":
        kernels()
    else:
        sys.exit(__doc__)
