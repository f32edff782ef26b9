"""`oxygen-gym train --data DIR --config compact --out DIR`: resumable; rerun the same command to continue."""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from oxygen_gym.policies.action_noise import noise_scale_arg



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True,
                        help="a collection folder (oxygen-gym collect) or one LIBERO HDF5 file; several joined by commas")
    parser.add_argument("--out", required=True, help="run folder: train_state.pt, log.jsonl, loss.png, model/")
    # unset numbers stay None and take TrainConfig's defaults in run (train/trainer.py imports torch: not at --help)
    parser.add_argument("--config", default=None, help="PI05Config name to train from scratch (default compact)")
    parser.add_argument("--init", default=None,
                        help="checkpoint folder to fine-tune instead (its normalisation statistics are kept)")
    for name in ("steps", "batch_size", "warmup", "seed", "checkpoint_every", "shift", "threads", "monitor_rows"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    parser.add_argument("--rtc-max-delay", type=int, default=0,
                        help="training-time real-time chunking: each row's first d <= this many actions are given "
                             "clean at flow time 0 and left out of the loss (serve with RTCConfig(method='trained'))")
    for name in ("lr", "weight_decay", "language_weight", "min_lr_ratio", "grad_clip"):
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=None)
    parser.add_argument("--ema-decay", type=float, default=0.0,
                        help="export an exponential moving average of the weights with this decay (e.g. 0.999; 0 = off)")
    parser.add_argument("--color-jitter", type=float, default=0.0,
                        help="brightness / contrast / saturation jitter of each training image, strength in [0, 1)")
    parser.add_argument("--val-scenes", default=None, metavar="RANGE",
                        help="scenes (fresh scene or init state indices, e.g. 60-69) held out of training; every "
                             "checkpoint is scored open-loop on them (monitor.jsonl) and snapshotted for choosing later")
    parser.add_argument("--data-mix", default=None, metavar="W1,W2,...",
                        help="share of each batch drawn from each --data collection, e.g. 1,1 for half and half "
                             "(default: every row equally likely, so bigger collections dominate)")
    parser.add_argument("--no-chunk-cut", dest="cut_chunks", action="store_false", default=None,
                        help="keep every chunk label as a target, even past a step whose executed gripper command "
                             "disagrees with the expert's or where the object was lost (default: cut there)")
    parser.add_argument("--gripper-weight", type=float, default=None,
                        help="weight of the gripper dim in the flow-matching loss, against 1 for each other dim "
                             "(default 1: a plain mean; > 1 puts more of the loss on when to open and close)")
    parser.add_argument("--no-snapshots", dest="snapshots", action="store_false", default=None,
                        help="do not keep every checkpoint's model under OUT/snapshots/")
    parser.add_argument("--replan-steps", type=int, default=None, metavar="N",
                        help="declare N actions executed per policy call in the exported config.json (what eval and "
                             "the demo run unless --replan is given; default: declare none)")
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="declare the sampling noise in the exported config.json: one scale, or one per action "
                             "dim, comma separated (0,0,0,0,0,0,1: a deterministic arm, a sampled gripper); what "
                             "policies sample with unless told otherwise (default: declare none)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--adapter", default=None, metavar="NAME",
                        help="train only a LoRA adapter NAME on the language continuation of a frozen base (--init, "
                             "default the shipped libero-spatial); writes a PEFT folder OUT/adapter/")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank of --adapter (default 8)")
    parser.add_argument("--alpha", type=float, default=None, help="LoRA alpha of --adapter (default 2 * rank)")
    parser.add_argument("--prompt", default=None, help="the adapter task's prompt (default the narration prompt)")
    parser.add_argument("--label", default=None, choices=("subtask", "memory"),
                        help="the adapter's target text per step: the subtask label (default) or the memory "
                             "task's answer (envs/scene_memory.py; collections record both)")
    parser.add_argument("--balance-labels", action="store_true", default=None,
                        help="--adapter: draw rows with probability 1/sqrt(their label's count), so rare answers are seen")


def run(args: argparse.Namespace) -> int:
    from .data_mix import parse_mix
    from .trainer import TrainConfig, train

    if args.adapter:
        return _run_adapter(args)
    kw = {k: v for k, v in vars(args).items() if k in {f.name for f in fields(TrainConfig)} and v is not None}
    try:
        if args.val_scenes:
            from .collect.collect_command import parse_range

            kw["val_scenes"] = parse_range(args.val_scenes, "--val-scenes")
        if args.data_mix:
            kw["data_mix"] = parse_mix(args.data_mix)
        cfg = TrainConfig(**kw)
        if cfg.steps < 1 or cfg.batch_size < 1 or cfg.lr <= 0:
            raise ValueError("--steps and --batch-size must be >= 1 and --lr > 0")
        if cfg.rtc_max_delay < 0:
            raise ValueError(f"--rtc-max-delay must be >= 0, got {cfg.rtc_max_delay}")
        folder = train(cfg)
    except ValueError as e:
        print(f"oxygen-gym train: {e}", file=sys.stderr)
        return 2
    print(f"model written to {folder}")
    return 0


def _run_adapter(args: argparse.Namespace) -> int:
    from .adapter_trainer import AdapterTrainConfig, train_adapter

    from .trainer import TrainConfig

    given = {"data": args.data, "out": args.out, "adapter": args.adapter, "rank": args.rank, "alpha": args.alpha,
             "init": args.init, "prompt": args.prompt, "label": args.label,
             "balance_labels": args.balance_labels, "device": args.device, "threads": args.threads, "seed": args.seed}
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    for name in ("steps", "batch_size", "lr", "checkpoint_every"):  # only when set: the adapter run has its own defaults
        if getattr(args, name) != defaults[name]:
            given[name] = getattr(args, name)
    if args.replan_steps is not None or args.noise_scale is not None:
        print("oxygen-gym train: --replan-steps and --noise-scale declare how the action model runs, not an --adapter",
              file=sys.stderr)
        return 2
    if args.data_mix:
        print("oxygen-gym train: --data-mix applies to the action model's training, not to --adapter",
              file=sys.stderr)
        return 2
    try:
        folder = train_adapter(AdapterTrainConfig(**{k: v for k, v in given.items() if v is not None}))
    except ValueError as e:
        print(f"oxygen-gym train: {e}", file=sys.stderr)
        return 2
    print(f"adapter written to {folder}")
    return 0
