"""`oxygen-gym serve`: a policy over openpi's websocket protocol; many robots, one batched engine.

    oxygen-gym serve --checkpoint tiny --robot libero --port 8000
    oxygen-gym serve --checkpoint small --robot libero --task narrate --decode-budget 5 --max-robots 4 --threads 1
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oxygen_gym import MultiTaskPolicy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", default="tiny", help="built-in model (tiny | small | pi05 | multi-tiny | xr0-tiny | ...) or a checkpoint folder")
    parser.add_argument("--robot", default="libero", choices=("libero", "droid", "aloha"), help="robot family (observation keys)")
    parser.add_argument("--task", action="append", default=None, metavar="NAME[=PROMPT]", dest="language_task",
                        help="language task(s) served with the actions (default: narrate); repeatable")
    parser.add_argument("--no-language", action="store_true", help="actions only")
    parser.add_argument("--max-new-tokens", type=int, default=30, help="token cap per language request (default 30)")
    parser.add_argument("--every", type=int, default=1, help="start a language request every N frames (default 1)")
    parser.add_argument("--decode-budget", default="5", help="language tokens per request per frame, or auto (default 5)")
    parser.add_argument("--target-action-hz", type=float, default=None, help="with --decode-budget auto")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port, printed on start)")
    parser.add_argument("--max-robots", type=int, default=8, help="connections served at once (default 8)")
    parser.add_argument("--batching", choices=("on", "off"), default="on",
                        help="on: robots' frames run as one batch; off: one robot at a time (the baseline)")
    parser.add_argument("--window-ms", type=float, default=20.0,
                        help="longest a frame waits for other robots' frames to batch with (default 20)")
    parser.add_argument("--slots", type=int, default=None, help="KV slots (default: enough that requests never queue)")
    parser.add_argument("--default-prompt", default=None, help="prompt for observations that carry none (openpi's default_prompt)")
    parser.add_argument("--max-message-mb", type=float, default=32.0, help="largest accepted message (default 32 MB)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--seed", type=int, default=0, help="weights of built-in models, action noise")
    parser.add_argument("--heads", type=lambda s: [h for h in s.split(",") if h], default=None,
                        help="action heads to run, comma list (default: every head of the model)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads; size it to the cores the server really has beside its clients")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop by itself after this long")
    from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

    ConventionOverrides.add_arguments(parser)


def build_policy(args: argparse.Namespace) -> MultiTaskPolicy:
    """The template policy every robot session copies (its model, tokenizer, robot conventions and tasks)."""
    from oxygen_gym import LanguageTask, MultiTaskPolicy
    from oxygen_gym.policies.task_args import parse_decode_budget, parse_language_task
    from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

    names = [] if args.no_language else (args.language_task or ["narrate"])
    tasks = [LanguageTask(**parse_language_task(n, args.max_new_tokens, args.every)) for n in names]
    budget = parse_decode_budget(args.decode_budget)
    return MultiTaskPolicy.from_pretrained(
        args.checkpoint, robot=args.robot, tasks=tasks, decode_budget=budget, target_action_hz=args.target_action_hz,
        mode="oxygen", device=args.device, seed=args.seed, num_slots=1, heads=args.heads,
        **ConventionOverrides.from_args(args).as_kwargs(),
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from .server import PolicyServer, ServeConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.threads is not None:
        if args.threads < 1:
            print(f"oxygen-gym serve: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    try:
        cfg = ServeConfig(
            host=args.host, port=args.port, max_robots=args.max_robots, batching=args.batching == "on",
            window_ms=args.window_ms, max_message_bytes=int(args.max_message_mb * 2**20),
            default_prompt=args.default_prompt, num_slots=args.slots,
        ).check()
        policy = build_policy(args)
        server = PolicyServer(policy, cfg)
    except ValueError as e:
        print(f"oxygen-gym serve: {e}", file=sys.stderr)
        return 2

    def ready(port: int) -> None:
        print(f"oxygen-gym serve: listening on ws://{args.host}:{port} (robot {args.robot}, model {args.checkpoint}, "
              f"batching {args.batching}, max robots {args.max_robots}, pid {os.getpid()})", flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stop)
        await server.serve(on_ready=ready, max_seconds=args.max_seconds)

    asyncio.run(main())
    return 0
