"""Our pi0.5 CPU path against lerobot 0.4.4's own `PI05Pytorch.sample_actions`: same weights, same inputs, same
process, calls interleaved, one chunk each (prefill + 10 Euler steps), one thread.

    .venv/bin/python -m oxygen_gym.eval.bench.lerobot_ratio --reference-site /path/to/site --models tiny small

Both models are built at a built-in config's dims: ours from its seed, lerobot's `PI05Pytorch` with its Gemma and
SigLIP dims patched to match and our weights copied in through the checkpoint layout (`weights.to_checkpoint`), so the
two compute the same function and the bench checks that first (the actions' max relative difference is printed and
must stay under `--max-rel-err`). Inputs are LIBERO's shape: two 224 px cameras and a prompt of `--prompt-tokens`
valid tokens padded to lerobot's 200.

lerobot's pi0.5 needs the patched transformers 4.53.2 it was written for, which this project's environment does not
hold (it has transformers 4.57). `--reference-site` names a folder put first on the child's `sys.path` holding it:

    pip install --no-deps --target SITE transformers==4.53.2 'tokenizers>=0.21,<0.22'
    pip install --target SITE pyserial deepdiff einops   # lerobot's imports the environment lacks
    # then copy openpi's src/openpi/models_pytorch/transformers_replace/* over SITE/transformers/

lerobot 0.4.4 itself and its torchvision (`.venv/lerobot-torchvision`) come from the project's environment. Each model
runs in its own child process, so the patched transformers never meets the rest of the package.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-site", default=os.environ.get("OXYGEN_GYM_LEROBOT_SITE"),
                   help="folder holding lerobot's patched transformers 4.53.2 (or $OXYGEN_GYM_LEROBOT_SITE)")
    p.add_argument("--models", nargs="+", default=["tiny", "small"], help="built-in configs (default tiny small)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved (lerobot, ours) pairs per model (default 7)")
    p.add_argument("--prompt-tokens", type=int, default=40, help="valid prompt tokens out of 200 (default 40)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--max-rel-err", type=float, default=1e-4,
                   help="largest accepted max |ours - lerobot| / max |lerobot| of the actions (default 1e-4)")
    p.add_argument("--out", type=Path, help="write every timing as JSON here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_measure(a.child, a.rounds, a.prompt_tokens, a.threads)))
        return 0
    if not a.reference_site or not (Path(a.reference_site) / "transformers" / "models" / "siglip" / "check.py").exists():
        p.error("--reference-site: a folder with lerobot's patched transformers 4.53.2 (transformers/models/siglip/"
                f"check.py), got {a.reference_site!r}; see this module's docstring")
    results = []
    for name in a.models:
        env = {**os.environ, "OMP_NUM_THREADS": str(a.threads),
               "PYTHONPATH": os.pathsep.join(filter(None, [a.reference_site, os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "oxygen_gym.eval.bench.lerobot_ratio", "--child", name, "--rounds", str(a.rounds),
               "--prompt-tokens", str(a.prompt_tokens), "--threads", str(a.threads)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode:
            sys.stderr.write(run.stderr)
            raise SystemExit(f"model {name}: the measuring child failed (exit {run.returncode})")
        r = json.loads(run.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{name}: lerobot {r['lerobot_ms']:.1f} ms, ours {r['ours_ms']:.1f} ms, ratio {r['ratio']:.2f} "
              f"(paired median {r['paired_ratio']:.2f}), actions max rel. diff {r['rel_err']:.2e}, load {r['load']}")
        if r["rel_err"] > a.max_rel_err:
            raise SystemExit(f"model {name}: actions differ from lerobot's by {r['rel_err']:.2e} > --max-rel-err")
    if a.out:
        a.out.write_text(json.dumps(results, indent=1))
    return 0


def _measure(name: str, rounds: int, prompt_tokens: int, threads: int) -> dict:
    """In the child: build both models, check they agree, time them interleaved."""
    import torch

    torch.set_num_threads(threads)
    ours = _ours(name)
    ref = _lerobot(ours)
    images, masks, tokens, token_masks, noise = _inputs(ours.config, prompt_tokens)

    def run_ref():
        with torch.inference_mode():
            return ref.sample_actions(images, masks, tokens, token_masks, noise=noise.clone())

    def run_ours():
        return ours.sample_actions(images, masks, tokens, token_masks, noise=noise.clone())

    a_ref, a_ours = run_ref(), run_ours()  # also the warm-up
    rel_err = float((a_ours - a_ref).abs().max() / a_ref.abs().max())
    t_ref, t_ours = [], []
    for _ in range(rounds):
        for fn, acc in ((run_ref, t_ref), (run_ours, t_ours)):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    m_ref, m_ours = statistics.median(t_ref), statistics.median(t_ours)
    return {
        "model": name, "threads": threads, "prompt_tokens": prompt_tokens, "rounds": rounds,
        "lerobot_ms": m_ref * 1e3, "ours_ms": m_ours * 1e3, "ratio": m_ref / m_ours,
        "paired_ratio": statistics.median(r / o for r, o in zip(t_ref, t_ours)), "rel_err": rel_err,
        "lerobot_s": t_ref, "ours_s": t_ours, "load": [round(x, 2) for x in os.getloadavg()],
    }


def _ours(name: str):
    from oxygen_gym.model import build_model

    return build_model(name, seed=0)


def _lerobot(ours):
    """lerobot's PI05Pytorch at `ours`' dims, holding `ours`' weights."""
    from oxygen_gym.train.lerobot_io import _import_torchvision

    _import_torchvision()  # lerobot imports torchvision; the environment keeps lerobot's aside (train/lerobot_io.py)
    import lerobot.policies.pi05.modeling_pi05 as mp
    from lerobot.policies.pi05.configuration_pi05 import PI05Config as LerobotConfig

    from oxygen_gym.model.pi05.weights import to_checkpoint

    c = ours.config

    def gemma_config(variant: str):  # lerobot's two variant names -> our backbone and expert dims
        d = c.vlm if variant == "gemma_2b" else c.expert
        return mp.GemmaConfig(d.width, d.depth, d.mlp_dim, d.num_heads, d.num_kv_heads, d.head_dim)

    class PaliGemma(mp.PaliGemmaForConditionalGeneration):  # lerobot hard-codes So400m's vision dims and the vocab
        def __init__(self, config):
            v = config.vision_config
            v.hidden_size, v.intermediate_size = c.vision.width, c.vision.mlp_dim
            v.num_hidden_layers, v.num_attention_heads = c.vision.depth, c.vision.num_heads
            v.patch_size, v.projection_dim = c.vision.patch_size, c.vlm.width
            config.text_config.vocab_size = config._vocab_size = c.vocab_size
            super().__init__(config)

    mp.get_gemma_config, mp.PaliGemmaForConditionalGeneration = gemma_config, PaliGemma
    cfg = LerobotConfig(dtype="float32", chunk_size=c.action_horizon, n_action_steps=c.action_horizon,
                        num_inference_steps=c.num_steps)
    model = mp.PI05Pytorch(cfg).eval()
    state = {k.removeprefix("model."): t for k, t in to_checkpoint(ours).items() if "gemma_expert.lm_head" not in k}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # the input embedding is tied to lm_head (loaded); the expert's lm_head is never used
    allowed = {"paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight",
               "paligemma_with_expert.gemma_expert.lm_head.weight"}
    if unexpected or set(missing) - allowed:
        raise RuntimeError(f"lerobot model does not take our weights: missing {missing}, unexpected {unexpected}")
    return model


def _inputs(c, prompt_tokens: int):
    import torch

    g = torch.Generator().manual_seed(0)
    n = 200  # lerobot's tokenizer_max_length
    if not 1 <= prompt_tokens <= n:
        raise ValueError(f"--prompt-tokens must be in [1, {n}], got {prompt_tokens}")
    images = [torch.rand(1, 3, c.vision.image_size, c.vision.image_size, generator=g) * 2 - 1 for _ in range(2)]
    masks = [torch.ones(1, dtype=torch.bool) for _ in range(2)]
    tokens = torch.zeros(1, n, dtype=torch.long)
    tokens[:, :prompt_tokens] = torch.randint(4, c.vocab_size, (1, prompt_tokens), generator=g)
    tokens[:, 0] = 2  # BOS
    token_masks = torch.zeros(1, n, dtype=torch.bool)
    token_masks[:, :prompt_tokens] = True
    noise = torch.randn(1, c.action_horizon, c.action_dim, generator=g)
    return images, masks, tokens, token_masks, noise


if __name__ == "__main__":
    raise SystemExit(main())
