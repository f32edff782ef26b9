"""Train a per-task LoRA adapter on a frozen pi0.5 (`oxygen-gym train --adapter NAME --rank R`): only the adapter's
A/B over the backbone's language projections learn, on the language continuation (task prompt, then the target
text). The prefix is computed by the frozen base with inference's own `prefill`, so the adapter is trained on
exactly the KV it will continue at inference; the continuation runs the same decoder layers as `extend` with the
adapter routed, differentiably. Writes a PEFT folder (`<out>/adapter/`) and resumes after a kill like train()."""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from oxygen_gym.engine.placement import place, record_placement
from oxygen_gym.model.layers import rope_cos_sin
from oxygen_gym.model.lora_bank import LANGUAGE_PROJECTIONS, LoraBank, LoraWeights, language_modules
from oxygen_gym.model.peft_adapter import write_peft
from oxygen_gym.model.pi05.loading import load_pretrained
from oxygen_gym.model.pi05.training import TrainBatch
from oxygen_gym.model.tokenizer import tokenizer_for

from .dataset import DemoDataset, load_demos
from .trainer import LOG_FILE, NARRATE_PROMPT, STATE_FILE, _atomic_save, data_relative_to_run, relative_to_run

ADAPTER_DIR = "adapter"
DEFAULT_BASE = "libero-spatial"


@dataclass(frozen=True)
class AdapterTrainConfig:
    data: str
    out: str
    adapter: str
    rank: int = 8
    alpha: float | None = None  # default 2 * rank
    init: str | None = None  # the frozen base (default: the shipped libero-spatial)
    targets: tuple[str, ...] = LANGUAGE_PROJECTIONS
    prompt: str = NARRATE_PROMPT
    label: str = "subtask"  # the per-step target text: "subtask" (narration) or "memory" (envs/scene_memory.py)
    # square-root label balancing: a row is drawn with probability ~ 1 / sqrt(its label's count), so a label's share
    # of the batches goes as sqrt(count) (a rare answer is seen: "place the bowl on the plate", 30 of 1,866 frames)
    balance_labels: bool = False
    steps: int = 300
    batch_size: int = 16
    lr: float = 2e-3
    seed: int = 0
    checkpoint_every: int = 50
    log_every: int = 10
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    threads: int | None = None

    @property
    def lora_alpha(self) -> float:
        return float(self.alpha if self.alpha is not None else 2 * self.rank)

    def resume_key(self) -> dict:
        d = asdict(self)
        for k in ("steps", "checkpoint_every", "log_every", "device", "threads", "out"):
            d.pop(k)
        d["targets"] = list(d["targets"])
        return d


def base_folder(init: str | None) -> Path:
    from oxygen_gym.policies.checkpoints import checkpoint_root

    return checkpoint_root(init or DEFAULT_BASE)


def init_lora(model, targets: tuple[str, ...], rank: int, alpha: float, seed: int) -> LoraWeights:
    """PEFT's initialisation: A Kaiming-uniform (a = sqrt(5), nn.Linear's), B zero, so training starts at the base."""
    gen = torch.Generator().manual_seed(seed)
    modules = {}
    for name, layer in language_modules(model).items():
        if any(name.endswith("." + t) for t in targets):
            bound = 1.0 / math.sqrt(layer.in_features)  # kaiming_uniform_(a=sqrt(5)) on [r, in]
            a = (torch.rand(rank, layer.in_features, generator=gen) * 2 - 1) * bound
            modules[name] = (a, torch.zeros(layer.out_features, rank))
    if not modules:
        raise ValueError(f"--targets {targets}: no language projection of the model matches")
    return LoraWeights(modules, {m: alpha / rank for m in modules})


def continuation_logits(model, bank: LoraBank, slot: int, batch: TrainBatch) -> torch.Tensor:
    """Next-token logits `[B, T - 1, vocab]` for `batch.text[:, 1:]`: the frozen base prefills the prefix (inference's
    own embed + prefill), then the text continues it through the adapter in `slot`, with grad to its A/B only."""
    prefix = model.embed_prefix(batch.images, batch.image_masks, batch.tokens, batch.token_masks)
    text = batch.text
    b, t = text.shape
    cache = model.new_cache(b, prefix.max_len + t)
    model.prefill(cache, prefix)
    # one tensor per layer, out of inference mode: each layer writes its text K/V into its own (autograd tracks
    # versions per tensor, and one layer's write must not invalidate what an earlier layer saved)
    k_all = [cache.k[i].clone() for i in range(cache.k.shape[0])]
    v_all = [cache.v[i].clone() for i in range(cache.v.shape[0])]
    lengths = prefix.lengths.clone()
    dev = text.device
    index = lengths[:, None] + torch.arange(t, device=dev)[None]
    cos, sin = rope_cos_sin(index, model.config.vlm.head_dim, model.config.rope_base)  # 1D RoPE: position = index
    read_len = prefix.max_len + t
    mask = torch.arange(read_len, device=dev)[None, None, :] <= index[:, :, None]
    rows = torch.arange(b, device=dev)[:, None]
    x = (model.embed_tokens(text) * math.sqrt(model.config.vlm.width)).to(model.dtype)
    with bank.routed(torch.full((b,), slot, dtype=torch.long, device=dev)):
        for i, layer in enumerate(model.vlm.layers):
            x = layer(x, cos, sin, k_all[i], v_all[i], (rows, index), read_len, mask)
    return model.lm_logits(model.vlm.norm(x))[:, :-1]


def language_loss(model, bank: LoraBank, slot: int, batch: TrainBatch) -> torch.Tensor:
    logits = continuation_logits(model, bank, slot, batch)
    tm = batch.text_loss_mask[:, 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.text[:, 1:].reshape(-1), reduction="none")
    return (ce * tm.reshape(-1).float()).sum() / tm.sum().clamp(min=1)


def trained_weights(bank: LoraBank, slot: int, rank: int) -> LoraWeights:
    return LoraWeights({m: (t.A[slot, :rank].detach().clone(), t.B[slot, :, :rank].detach().clone())
                        for m, t in bank.targets.items()},
                       {m: float(t.scale[slot]) for m, t in bank.targets.items()})


def row_weights(targets: list[str]) -> torch.Tensor:
    """Sampling weight of each row for square-root label balancing: 1 / sqrt(count of its label)."""
    counts = Counter(targets)
    return torch.tensor([counts[t] ** -0.5 for t in targets], dtype=torch.float64)


def _dataset_stats(model) -> dict:
    """The checkpoint's own statistics, as inference normalises with them (not recomputed from the new data)."""
    s = model.norm_stats
    if s is None:
        raise ValueError("the base checkpoint has no normaliser statistics")
    pick = lambda *keys: next(s[k] for k in keys if k in s)  # noqa: E731
    return {"state": pick("state", "observation.state"), "actions": pick("actions", "action")}


def train_adapter(cfg: AdapterTrainConfig, progress: bool = True) -> Path:
    """Train (or resume) and return the exported PEFT folder."""
    if cfg.rank < 1 or cfg.steps < 1 or cfg.batch_size < 1 or cfg.lr <= 0:
        raise ValueError("--rank, --steps and --batch-size must be >= 1 and --lr > 0")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    record_placement(place(threads=cfg.threads), out)  # threads sized to the cores this run owns (engine/placement.py)
    state_path = out / STATE_FILE
    saved = torch.load(state_path, weights_only=False) if state_path.is_file() else None
    if saved is not None and saved["resume_key"] != cfg.resume_key():
        raise ValueError(f"--out {out} holds an adapter run with other settings; use another --out or the same flags")
    root = base_folder(cfg.init)
    model = load_pretrained(root, device=cfg.device, dtype=torch.float32)
    tokenizer = tokenizer_for(model.config.vocab_size, str(root))
    dataset = DemoDataset(load_demos(cfg.data, need=(cfg.label,)), model.config, tokenizer, cfg.prompt, _dataset_stats(model), progress=progress,
                          label=cfg.label)
    bank = LoraBank(model, slots=1, max_rank=cfg.rank)
    model.lora = bank
    slot = bank.load(cfg.adapter, init_lora(model, cfg.targets, cfg.rank, cfg.lora_alpha, cfg.seed))
    params = []
    for t in bank.targets.values():
        params += [t.A.requires_grad_(True), t.B.requires_grad_(True)]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    weights = row_weights(dataset.targets) if cfg.balance_labels else None
    step = 0
    if saved:
        with torch.no_grad():
            for t, (a, b) in zip(bank.targets.values(), saved["lora"], strict=True):
                t.A.copy_(a)
                t.B.copy_(b)
        opt.load_state_dict(saved["optimizer"])
        gen.set_state(saved["generator"])
        step = saved["step"]

    def checkpoint() -> None:
        _atomic_save({"lora": [(t.A.detach(), t.B.detach()) for t in bank.targets.values()],
                      "optimizer": opt.state_dict(), "generator": gen.get_state(), "step": step,
                      "resume_key": cfg.resume_key()}, state_path)
        export(bank, slot, cfg, out, step)

    bar = tqdm(total=cfg.steps, initial=step, desc=f"adapter {cfg.adapter}", unit="step", disable=not progress)
    with open(out / LOG_FILE, "a") as log:
        while step < cfg.steps:
            t0 = time.perf_counter()
            index = (torch.multinomial(weights, cfg.batch_size, replacement=True, generator=gen) if weights is not None
                     else torch.randint(0, len(dataset), (cfg.batch_size,), generator=gen))
            loss = language_loss(model, bank, slot, dataset.batch(index).to(cfg.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            bar.update(1)
            if step % cfg.log_every == 0 or step == cfg.steps:
                log.write(json.dumps({"step": step, "language": float(loss.detach()),
                                      "step_s": round(time.perf_counter() - t0, 3)}) + "\n")
                log.flush()
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint()
    bar.close()
    if saved and saved["step"] >= cfg.steps:
        checkpoint()
    return out / ADAPTER_DIR


def export(bank: LoraBank, slot: int, cfg: AdapterTrainConfig, out: Path, step: int) -> Path:
    folder = write_peft(out / ADAPTER_DIR, trained_weights(bank, slot, cfg.rank), rank=cfg.rank, alpha=cfg.lora_alpha,
                        target_modules=[t.split(".")[-1] for t in cfg.targets],
                        base_model=relative_to_run(cfg.init, out) or DEFAULT_BASE)
    manifest = Path(cfg.data) / "dataset.json"  # an `oxygen-gym collect` folder says which init states it holds
    data = json.loads(manifest.read_text()) if manifest.is_file() else {}
    recipe = {**cfg.resume_key(), "data": data_relative_to_run(cfg.data, out),  # no machine's directories
              "init": relative_to_run(cfg.init, out)}
    (folder / "training.json").write_text(json.dumps({
        "step": step, "config": recipe, "language_task": {"prompt": cfg.prompt, "label": cfg.label},
        "data": {k: data[k] for k in ("init_states", "fresh_scenes", "tasks") if k in data}}, indent=1))
    return folder
