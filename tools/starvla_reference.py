"""Run StarVLA's own PI_v3 (LayerwiseFM) and OFT (MLP-ResNet) head modules once, at the tiny dims of
`starvla-tiny`, and save inputs, weights and outputs as a small fixture for tests/model/starvla/test_starvla_heads.py.

StarVLA's files are read from a bare git mirror (`git show COMMIT:path`) into a temporary package; nothing of them is
copied into oxygen_gym. Needs diffusers (StarVLA's DiT is built from diffusers' Attention / FeedForward).

    .venv/bin/python tools/starvla_reference.py --repo /work/.mirror/starVLA+starVLA/repo --commit 0ed0aad \
        --out tests/fixtures/starvla_heads/reference.pt
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

FILES = [
    "starVLA/model/modules/action_model/LayerwiseFM_ActionHeader.py",
    "starVLA/model/modules/action_model/MLP_ActionHeader.py",
    "starVLA/model/modules/action_model/flow_matching_head/cross_attention_dit.py",
    "starVLA/model/modules/action_model/flow_matching_head/action_encoder.py",
]

# starvla-tiny's dims (oxygen_gym/model/starvla/starvla_config.py `_tiny`)
LAYERS, VL_WIDTH, DIT_WIDTH, HEAD_DIM = 3, 64, 32, 16
HORIZON, STEPS, FUTURE, MAX_SEQ, ACTION_DIM = 6, 3, 4, 64, 7
OFT_HORIZON = 4
ROWS, LENGTH, SHORT = 2, 9, 6  # row 1 is padded after SHORT positions


def checkout(repo: str, commit: str, root: Path) -> str:
    full = subprocess.run(["git", "-C", repo, "rev-parse", commit], check=True, capture_output=True, text=True)
    for f in FILES:
        text = subprocess.run(["git", "-C", repo, "show", f"{commit}:{f}"], check=True, capture_output=True, text=True)
        path = root / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.stdout)
        for parent in path.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()
    return full.stdout.strip()


def randomise(module: nn.Module, gen: torch.Generator, scale: float = 0.3) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)


def pi_reference(gen: torch.Generator) -> dict:
    from starVLA.model.modules.action_model.LayerwiseFM_ActionHeader import LayerwiseFlowmatchingActionHead

    dit_cfg = {  # QwenPI_v3DefaultConfig's diffusion_model_cfg after populate_layerwise_dit_cfg
        "dropout": 0.2, "final_dropout": True, "interleave_self_attention": False, "norm_type": "ada_norm",
        "positional_embeddings": None, "attention_head_dim": HEAD_DIM, "num_layers": LAYERS,
        "input_embedding_dim": DIT_WIDTH, "cross_attention_dim": DIT_WIDTH, "num_attention_heads": DIT_WIDTH // HEAD_DIM,
    }
    action = SimpleNamespace(
        diffusion_model_cfg=dit_cfg, action_dim=ACTION_DIM, action_horizon=HORIZON, num_inference_timesteps=STEPS,
        state_dim=None, num_target_vision_tokens=FUTURE, add_pos_embed=True, max_seq_len=MAX_SEQ,
        noise_beta_alpha=1.5, noise_beta_beta=1.0, noise_s=0.999, num_timestep_buckets=1000,
    )
    head = LayerwiseFlowmatchingActionHead(SimpleNamespace(framework=SimpleNamespace(action_model=action))).eval()
    project = nn.ModuleList(nn.Sequential(nn.LayerNorm(VL_WIDTH), nn.Linear(VL_WIDTH, DIT_WIDTH)) for _ in range(LAYERS))
    randomise(head, gen)
    randomise(project, gen)
    layer_hidden = [torch.randn(ROWS, LENGTH, VL_WIDTH, generator=gen) for _ in range(LAYERS)]
    mask = torch.ones(ROWS, LENGTH, dtype=torch.bool)
    mask[1, SHORT:] = False
    with torch.no_grad():
        vl = [p(h) for p, h in zip(project, layer_hidden)]  # Qwen_PI_v3._project_vl_hidden_for_action
        torch.manual_seed(7)
        chunk = head.predict_action(vl, None, encoder_attention_mask=mask)
        torch.manual_seed(7)
        noise = torch.randn(ROWS, HORIZON, ACTION_DIM)
        x, xs, vs = noise.clone(), [], []
        for step in range(STEPS):  # predict_action's loop body, recording each velocity
            t = torch.full((ROWS,), int(step / float(STEPS) * 1000), dtype=torch.long)
            feats = head.action_encoder(x, t) + head.position_embedding(torch.arange(HORIZON))[None]
            sa = torch.cat([head.future_tokens.weight[None].expand(ROWS, -1, -1), feats], 1)
            out = head.model(hidden_states=sa, encoder_hidden_states=vl, timestep=t, encoder_attention_mask=mask,
                             return_pre_output=True)
            v = head.action_decoder(out)[:, -HORIZON:]
            xs.append(x.clone())
            vs.append(v)
            x = x + v / STEPS
    return {"head": head.state_dict(), "project_layers": project.state_dict(), "layer_hidden": layer_hidden,
            "mask": mask, "noise": noise, "xs": xs, "velocities": vs, "chunk": chunk}


def oft_reference(gen: torch.Generator) -> dict:
    from starVLA.model.modules.action_model.MLP_ActionHeader import L1RegressionActionHead

    head = L1RegressionActionHead(input_dim=VL_WIDTH, hidden_dim=2 * VL_WIDTH, action_dim=ACTION_DIM,
                                  NUM_ACTIONS_CHUNK=OFT_HORIZON).eval()
    randomise(head, gen)
    hidden = torch.randn(ROWS, OFT_HORIZON, VL_WIDTH, generator=gen)
    with torch.no_grad():
        actions = head.predict_action(hidden)
    return {"head": head.state_dict(), "hidden": hidden, "actions": actions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", default="0ed0aad")
    ap.add_argument("--out", default="tests/fixtures/starvla_heads/reference.pt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        commit = checkout(args.repo, args.commit, Path(tmp))
        sys.path.insert(0, tmp)
        gen = torch.Generator().manual_seed(0)
        data = {"pi": pi_reference(gen), "oft": oft_reference(gen),
                "meta": {"starvla_commit": commit, "command": " ".join(["tools/starvla_reference.py", *sys.argv[1:]]),
                         "torch": torch.__version__}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, args.out)
    print(f"wrote {args.out} (StarVLA {commit})")


if __name__ == "__main__":
    main()
