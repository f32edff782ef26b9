"""The training loop: AdamW with warm-up and cosine decay, seeded batches, checkpoints that resume exactly
(model, optimiser, step, RNG state), a JSONL loss log written as it goes, and an exported model folder in the
layout our loader reads (`from_pretrained(out / "model")`, `oxygen-gym inspect`)."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from oxygen_gym.engine.placement import place, record_placement
from oxygen_gym.model.pi05.config import PI05Config
from oxygen_gym.model.pi05.init import build_model
from oxygen_gym.model.pi05.loading import check_replan_steps, load_pretrained, save_pretrained
from oxygen_gym.policies.action_noise import check_noise_scale, noise_multiplier
from oxygen_gym.model.tokenizer import tokenizer_for
from oxygen_gym.model.pi05.training import losses

from .data_mix import RowSampler, check_mix
from .dataset import DemoDataset, compute_norm_stats, data_paths, load_collections
from .checkpoint_monitor import CheckpointMonitor
from .loss_plot import plot_losses
from .tensorboard_log import TensorBoardLog
from .validation_split import split_by_scene

# The narration task the shipped model is trained for (and the demo runs): its prompt continues the shared prefix.
NARRATE_PROMPT = "What is the robot doing?"
STATE_FILE = "train_state.pt"
LOG_FILE = "log.jsonl"
MODEL_DIR = "model"
TRAINING_JSON = "training.json"


@dataclass(frozen=True)
class TrainConfig:
    data: str
    out: str
    config: str = "compact"  # a PI05Config name (trained from scratch) ...
    init: str | None = None  # ... or a checkpoint folder to fine-tune
    steps: int = 4000
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 200
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    language_weight: float = 0.5
    shift: int = 4  # random-shift augmentation in pixels (0 = off)
    seed: int = 0
    checkpoint_every: int = 250
    log_every: int = 10
    narrate_prompt: str = NARRATE_PROMPT
    narrate_max_new_tokens: int = 12
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    threads: int | None = None
    rtc_max_delay: int = 0  # training-time RTC (training.py `losses`): clean action prefixes of up to this many steps
    ema_decay: float = 0.0  # > 0: export an exponential moving average of the weights with this decay
    color_jitter: float = 0.0  # brightness / contrast / saturation jitter strength (image_augment.py; 0 = off)
    val_scenes: tuple[int, ...] = ()  # scenes held out of training, for choosing checkpoints (validation_split.py)
    monitor_rows: int = 256  # rows of the training set and of the validation scenes scored open-loop per checkpoint
    snapshots: bool = True  # keep every checkpoint's exported model under snapshots/step_N, to choose one later
    data_mix: tuple[float, ...] = ()  # share of each batch per --data collection (data_mix.py); () = uniform rows
    cut_chunks: bool = True  # drop chunk labels past a gripper disagreement or a lost object (chunk_cut.py)
    gripper_weight: float = 1.0  # weight of the gripper dim in the action loss (training.py `losses`; 1 = plain mean)
    # the execution horizon the exported config.json declares (policies/checkpoints/replan_steps.py), so a recipe
    # reproduces what eval and the demo run; None declares none. Export only: a run resumes with any value.
    replan_steps: int | None = None
    # the sampling noise the exported config.json declares (policies/checkpoints/noise_scale.py): one number, or one
    # per action dim; None declares none. Export only, as replan_steps.
    noise_scale: float | tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.gripper_weight > 0:
            raise ValueError(f"--gripper-weight must be > 0, got {self.gripper_weight}")
        if self.replan_steps is not None:
            check_replan_steps(self.replan_steps, None, "--replan-steps")
        if self.noise_scale is not None:
            object.__setattr__(self, "noise_scale", check_noise_scale(self.noise_scale, "--noise-scale"))
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"--ema-decay must be in [0, 1), got {self.ema_decay}")
        if not 0.0 <= self.color_jitter < 1.0:
            raise ValueError(f"--color-jitter must be in [0, 1), got {self.color_jitter}")
        object.__setattr__(self, "val_scenes", tuple(sorted(int(s) for s in self.val_scenes)))
        object.__setattr__(self, "data_mix", tuple(float(w) for w in self.data_mix))
        check_mix(self.data_mix)

    def resume_key(self) -> dict:
        """Settings a resumed run must share with the run it continues."""
        d = asdict(self)
        for k in ("steps", "checkpoint_every", "log_every", "device", "threads", "out", "monitor_rows", "snapshots",
                  "replan_steps", "noise_scale"):
            d.pop(k)
        for k in ("rtc_max_delay", "ema_decay", "color_jitter", "val_scenes", "data_mix"):
            if not d[k]:
                d.pop(k)  # runs from before the option resume unchanged
        if not d["cut_chunks"]:
            d.pop("cut_chunks")  # runs from before the option (every label kept) resume with --no-chunk-cut
        if d["gripper_weight"] == 1.0:
            d.pop("gripper_weight")  # runs from before the option resume unchanged
        for k in ("val_scenes", "data_mix"):
            if k in d:
                d[k] = list(d[k])
        return d


def gripper_weights(action_dim: int, weight: float) -> torch.Tensor | None:
    """Per-dim action-loss weights with LIBERO's gripper dim (open_loop.GRIPPER_DIM) at `weight`; None at 1."""
    from .open_loop import GRIPPER_DIM

    if weight == 1.0:
        return None
    w = torch.ones(action_dim)
    w[GRIPPER_DIM] = weight
    return w


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def relative_to_run(path: str | None, out: Path) -> str | None:
    """A path as seen from the run folder, so training.json names no machine's directories; a string that names
    nothing here (a built-in model's name) is returned as given."""
    if path is None or not Path(path).exists():
        return path
    return os.path.relpath(Path(path).resolve(), out.resolve())


def export(model, out: Path, stats, cfg: TrainConfig, step: int, dataset_info: dict, seconds: float,
           extra: dict | None = None) -> Path:
    """The trained model as a checkpoint folder of our own family, plus training.json (recipe, data, language task;
    paths relative to the run folder)."""
    # the language task it was trained to answer, declared in config.json (policies/checkpoints/language_tasks.py)
    tasks = [{"name": "narrate", "prompt": cfg.narrate_prompt, "max_new_tokens": cfg.narrate_max_new_tokens}]
    folder = save_pretrained(model, out / MODEL_DIR, stats, n_action_steps=model.config.action_horizon,
                             replan_steps=cfg.replan_steps, noise_scale=cfg.noise_scale, language_tasks=tasks)
    recipe = {**asdict(cfg), "data": data_relative_to_run(cfg.data, out), "out": ".",
              "init": relative_to_run(cfg.init, out)}
    data = {**dataset_info, "path": data_relative_to_run(dataset_info.get("path"), out)}
    info = {
        "step": step, "train_seconds": round(seconds, 1), "train_config": recipe, "data": data, **(extra or {}),
        "language_tasks": tasks,
    }
    (folder / TRAINING_JSON).write_text(json.dumps(info, indent=1))
    return folder


def data_relative_to_run(data: str | None, out: Path) -> str | None:
    """`--data`'s collections (comma-joined), each as seen from the run folder."""
    if data is None:
        return None
    return ",".join(relative_to_run(str(p), out) for p in data_paths(data))


def _collection_config(path: Path, out: Path | None) -> dict:
    """A collection's settings from its manifest (those it predates take their defaults); a DAgger policy's path is
    written relative to the run folder."""
    manifest = path / "dataset.json"
    collect = json.loads(manifest.read_text())["config"] if manifest.is_file() else {}
    if not collect:
        return {}
    from .collect.collector import CollectConfig

    collect = {**CollectConfig().to_json(), **collect}
    if out is not None:
        collect["dagger_checkpoint"] = relative_to_run(collect.get("dagger_checkpoint"), out)
    return collect


def _dataset_info(data: str, demos, out: Path | None = None) -> dict:
    inits = sorted({int(d.attrs["init_state"]) for d in demos if "init_state" in d.attrs})
    scenes = sorted({int(d.attrs["scene"]) for d in demos if "scene" in d.attrs})  # fresh scenes (collector.py)
    tasks = sorted({str(d.attrs.get("task_name", "")) for d in demos})
    collects = [_collection_config(p, out) for p in data_paths(data)]
    return {"path": str(data), "demos": len(demos), "steps": int(sum(len(d) for d in demos)),
            "rows": int(sum(len(d.frame_steps) for d in demos)),
            "init_states": inits, "scenes": scenes, "tasks": tasks,
            "collect": collects[0] if len(collects) == 1 else collects}


def train(cfg: TrainConfig, progress: bool = True) -> Path:
    """Train (or resume) and return the exported model folder."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    record_placement(place(threads=cfg.threads), out)  # threads sized to the cores this run owns (engine/placement.py)
    state_path = out / STATE_FILE
    saved = torch.load(state_path, weights_only=False) if state_path.is_file() else None
    if saved is not None and saved["resume_key"] != cfg.resume_key():
        diff = {k: (saved["resume_key"].get(k), v) for k, v in cfg.resume_key().items() if saved["resume_key"].get(k) != v}
        raise ValueError(f"--out {out} holds a run with other settings {diff}; use another --out or the same flags")

    # a LeRobotDataset must hold the subtask labels the language loss trains on (lerobot_format.py)
    collections = load_collections(cfg.data, need=("subtask",) if cfg.language_weight > 0 else ())
    source = {id(d): i for i, demos in enumerate(collections) for d in demos}
    demos, val_demos = split_by_scene([d for demos in collections for d in demos], cfg.val_scenes)
    collection_rows = [sum(len(d.frame_steps) for d in demos if source[id(d)] == i) for i in range(len(collections))]
    sampler = RowSampler(collection_rows, cfg.data_mix)  # rows are stored in this order (demos are grouped by source)
    del collections, source
    if cfg.init:
        model = load_pretrained(cfg.init, device=cfg.device, dtype=torch.float32)
    else:
        model = build_model(PI05Config.named(cfg.config), seed=cfg.seed, device=cfg.device, dtype=torch.float32)
    if cfg.replan_steps is not None:  # checked before training, not at the first export
        check_replan_steps(cfg.replan_steps, model.config.action_horizon, "--replan-steps")
    if cfg.noise_scale is not None:
        noise_multiplier(cfg.noise_scale, model.config.action_dim)
    # a fine-tune keeps the statistics its weights were trained with (new data must not move the units); a built
    # model has none
    stats = saved["norm_stats"] if saved else (model.norm_stats or compute_norm_stats(demos))
    tokenizer = tokenizer_for(model.config.vocab_size, cfg.init)
    dataset = DemoDataset(demos, model.config, tokenizer, cfg.narrate_prompt, stats, progress=progress,
                          cut_chunks=cfg.cut_chunks)
    monitor = CheckpointMonitor(out, dataset, val_demos, model.config, tokenizer, cfg, progress)
    info = _dataset_info(cfg.data, demos, out)
    extra = {"validation": monitor.describe()}
    del demos, val_demos
    model.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay)) if cfg.ema_decay else None
    gen = torch.Generator().manual_seed(cfg.seed)
    step, seconds = 0, 0.0
    if saved:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        gen.set_state(saved["generator"])
        step, seconds = saved["step"], saved["seconds"]
        if ema is not None:  # the resume key holds ema_decay, so a saved run with EMA on has its average
            ema.load_state_dict(saved["ema"])

    def checkpoint() -> None:
        _atomic_save({"model": model.state_dict(), "optimizer": opt.state_dict(), "generator": gen.get_state(),
                      "step": step, "seconds": seconds, "norm_stats": stats, "resume_key": cfg.resume_key(),
                      "ema": None if ema is None else ema.state_dict()}, state_path)
        weights = model if ema is None else ema.module  # what ships: the averaged weights when EMA is on
        weights.clear_caches()
        folder = export(weights, out, stats, cfg, step, info, seconds, extra)
        scores = monitor.record(weights, step, folder)
        if scores:
            board.scalars(step, {k: v for k, v in scores.items() if k != "step"}, "open_loop/")
        plot_losses(out / LOG_FILE, out / "loss.png")

    dim_weights = gripper_weights(model.config.action_dim, cfg.gripper_weight)
    board = TensorBoardLog(out, step)
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", disable=not progress, dynamic_ncols=True)
    with open(out / LOG_FILE, "a") as log:
        while step < cfg.steps:
            t0 = time.perf_counter()
            for group in opt.param_groups:
                group["lr"] = lr_at(step, cfg)
            index = sampler.draw(cfg.batch_size, gen)
            batch = dataset.batch(index, gen, cfg.shift, cfg.color_jitter).to(cfg.device)
            out_losses = losses(model, batch, gen, cfg.language_weight, cfg.rtc_max_delay, dim_weights)
            opt.zero_grad(set_to_none=True)
            out_losses["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            if ema is not None:
                ema.update_parameters(model)
            step += 1
            dt = time.perf_counter() - t0
            seconds += dt
            bar.update(1)
            bar.set_postfix(action=f"{float(out_losses['action']):.3f}", lang=f"{float(out_losses['language']):.3f}")
            if step % cfg.log_every == 0 or step == cfg.steps:
                rec = {"step": step, "loss": float(out_losses["loss"].detach()), "action": float(out_losses["action"]),
                       "language": float(out_losses["language"]), "lr": lr_at(step - 1, cfg), "step_s": round(dt, 3),
                       "seconds": round(seconds, 1)}
                log.write(json.dumps(rec) + "\n")
                log.flush()
                board.scalars(step, {k: rec[k] for k in ("loss", "action", "language", "lr", "step_s")}, "train/")
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint()
    bar.close()
    if saved and saved["step"] >= cfg.steps:
        checkpoint()  # a finished run asked again: make sure the export exists
    board.close()
    return out / MODEL_DIR
