"""`oxygen-gym serve`: a policy over openpi's websocket protocol; many robots, one batched engine.

    oxygen-gym serve --checkpoint tiny --robot libero --port 8000
    oxygen-gym serve --checkpoint small --robot libero --task narrate --decode-budget 5 --max-robots 4 --threads 1
    OXYGEN_GYM_API_KEY=... oxygen-gym serve --checkpoint libero-spatial --host 0.0.0.0   # on the robot's network
    oxygen-gym serve --ray --replicas 2 --max-robots 4   # Ray Serve replicas, each its own engine (serve/fleet/)
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.policies.policy_config import PolicyConfig

API_KEY_ENV = "OXYGEN_GYM_API_KEY"  # serve/server.py reads the same name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from oxygen_gym.policies.action_noise import noise_scale_arg

    from oxygen_gym.policies.checkpoints.names import checkpoint_arg

    parser.add_argument("--checkpoint", default="tiny", type=checkpoint_arg,
                        help="the shipped trained model (libero-spatial), a built-in model with random weights (tiny, "
                             "small, pi05, multi-tiny, xr0-tiny, ...) or a checkpoint folder / hub id (default tiny)")
    parser.add_argument("--robot", default="libero", choices=("libero", "droid", "aloha"), help="robot family (observation keys)")
    parser.add_argument("--task", action="append", default=None, metavar="NAME[=PROMPT]", dest="language_task",
                        help="language task(s) served with the actions (default: narrate); repeatable. A name the "
                             "checkpoint declares (config.json language_tasks) gets its own prompt and token cap")
    parser.add_argument("--no-language", action="store_true", help="actions only")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="token cap per language request (default: the checkpoint's declared task's, else 30)")
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
    parser.add_argument("--max-message-mb", type=float, default=8.0,
                        help="largest accepted message; a larger one closes the connection (1009) (default 8 MB)")
    security = parser.add_argument_group("access and limits (docs/api.md section 6)")
    security.add_argument("--api-key", default=None,
                          help=f"require 'Authorization: Api-Key KEY' (openpi-client's api_key); default ${API_KEY_ENV}, "
                               "which keeps the key out of shell history")
    security.add_argument("--insecure", action="store_true",
                          help="allow a non-loopback --host without a key (anyone who reaches the port drives the robot)")
    security.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                          help="browser Origin accepted, e.g. https://dashboard.lab (repeatable; default none)")
    security.add_argument("--max-prompt-chars", type=int, default=1000, help="longest prompt in characters (default 1000)")
    security.add_argument("--max-prompt-tokens", type=int, default=256, help="longest prompt in tokens (default 256)")
    security.add_argument("--max-image-pixels", type=int, default=1920 * 1080,
                          help="most pixels (H*W) per image field (default 2073600: 1920x1080)")
    security.add_argument("--max-buffered-frames", type=int, default=2,
                          help="websocket frames read ahead per connection; beyond it the server stops reading (default 2)")
    security.add_argument("--idle-timeout-s", type=float, default=120.0,
                          help="close a session that sends no frame this long, freeing its robot slot; rejected "
                               "and control messages do not count as frames (default 120; 0: never)")
    security.add_argument("--max-invalid-messages", type=int, default=20,
                          help="close a session after this many refused messages in a row (1008) (default 20)")
    rtc = parser.add_argument_group("real-time chunking (requests with prev_actions; docs/api.md section 6)")
    rtc.add_argument("--rtc-method", choices=("guided", "cheap"), default="guided",
                     help="guided: VJP through the action expert; cheap: the plain weighted error (default guided)")
    rtc.add_argument("--rtc-schedule", choices=("zeros", "ones", "linear", "exp"), default="exp",
                     help="prefix weights between the delay and the execution horizon (default exp)")
    rtc.add_argument("--rtc-max-guidance", type=float, default=5.0, help="maximum guidance weight beta (default 5)")
    rtc.add_argument("--rtc-execution-horizon", type=int, default=None,
                     help="previous-chunk actions attended to (default: the action horizon)")
    rtc.add_argument("--control-hz", type=float, default=None,
                     help="robots' control rate, to estimate a delay a request does not send (default: the robot's, "
                          "libero 20, droid 15, aloha 50)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--seed", type=int, default=0, help="weights of built-in models, action noise")
    parser.add_argument("--noise-scale", type=noise_scale_arg, default=None, metavar="S",
                        help="scale of the action heads' starting noise, or one per action dim, comma separated "
                             "(policies/action_noise.py); default: the checkpoint's config.json noise_scale, else 1")
    parser.add_argument("--heads", type=lambda s: [h for h in s.split(",") if h], default=None,
                        help="action heads to run, comma list (default: every head of the model)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads; size it to the cores the server really has beside its clients")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop by itself after this long")
    fleet = parser.add_argument_group("a fleet on Ray Serve (docs/serve.md, A fleet on Ray)")
    fleet.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                       help="serve as Ray Serve replicas, each with its own engine; no ADDRESS starts a local Ray, or "
                            "give auto / ray://host:10001 to join a cluster. --max-robots is per replica")
    fleet.add_argument("--replicas", type=int, default=None, help="with --ray: replicas (default 2; with "
                                                                   "--max-replicas, the autoscaling floor)")
    fleet.add_argument("--max-replicas", type=int, default=None,
                       help="with --ray: autoscale between --replicas and this on robots per replica")
    fleet.add_argument("--robots-per-replica", type=float, default=None,
                       help="with --max-replicas: the autoscaling target (default: half of --max-robots)")
    fleet.add_argument("--replica-cpus", type=float, default=1.0, help="with --ray: CPUs per replica (default 1)")
    fleet.add_argument("--replica-gpus", type=float, default=None,
                       help="with --ray: GPUs per replica (default 1 with --device cuda, else 0)")
    fleet.add_argument("--drain-timeout-s", type=float, default=600.0,
                       help="with --ray: how long a replica being replaced or scaled down keeps its live robots "
                            "before it stops; robots still there then get close code 1012 (default 600)")
    fleet.add_argument("--scale-up-delay-s", type=float, default=None,
                       help="with --max-replicas: robots above the target this long add a replica (default 30)")
    fleet.add_argument("--scale-down-delay-s", type=float, default=None,
                       help="with --max-replicas: robots below the target this long remove one (default 600)")
    from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides

    ConventionOverrides.add_arguments(parser)


def policy_config(args: argparse.Namespace) -> PolicyConfig:
    """The template policy's options, as one record (policies/policy_config.py checks each, naming the field)."""
    from oxygen_gym import LanguageTask, RTCConfig
    from oxygen_gym.policies.checkpoints.language_tasks import declared_language_tasks
    from oxygen_gym.policies.checkpoints.overrides import ConventionOverrides
    from oxygen_gym.policies.policy_config import PolicyConfig
    from oxygen_gym.policies.task_args import parse_decode_budget, parse_language_task

    names = [] if args.no_language else (args.language_task or ["narrate"])
    # a trained checkpoint answers only its own prompts: its declared tasks fill what --task and --max-new-tokens
    # leave unsaid; an adapter task loads the checkpoint's own adapters/<name>/
    overrides = ConventionOverrides.from_args(args)
    declared = {t.name: asdict(t) for t in declared_language_tasks(args.checkpoint, overrides.revision)}
    tasks = [LanguageTask(**parse_language_task(n, args.max_new_tokens, args.every, trained=declared)) for n in names]
    adapters = sorted({t.adapter for t in tasks if t.adapter}) or None
    rtc = RTCConfig(
        execution_horizon=args.rtc_execution_horizon, schedule=args.rtc_schedule,
        max_guidance_weight=args.rtc_max_guidance, method=args.rtc_method,
    )
    # num_slots=1: the template never runs a frame; the server's one pool holds every robot's requests
    return PolicyConfig(
        robot=args.robot, tasks=tuple(tasks), decode_budget=parse_decode_budget(args.decode_budget),
        target_action_hz=args.target_action_hz, mode="oxygen", device=args.device, seed=args.seed, num_slots=1,
        heads=args.heads, rtc=rtc, noise_scale=args.noise_scale, adapters=adapters, conventions=overrides,
    )


def build_policy(args: argparse.Namespace) -> MultiTaskPolicy:
    """The template policy every robot session is a session of (its model, tokenizer, robot conventions, tasks)."""
    from oxygen_gym import MultiTaskPolicy

    return MultiTaskPolicy.from_pretrained(args.checkpoint, config=policy_config(args))


def run(args: argparse.Namespace) -> int:
    from oxygen_gym.engine.placement import place

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        # threads sized to the cores the server owns beside its clients, before torch loads (engine/placement.py)
        placement = None if args.ray is not None else place(threads=args.threads)
    except ValueError as e:
        print(f"oxygen-gym serve: {e}", file=sys.stderr)
        return 2
    from .observations import Limits
    from .server import PolicyServer, ServeConfig

    try:
        cfg = ServeConfig(
            host=args.host, port=args.port, max_robots=args.max_robots, batching=args.batching == "on",
            window_ms=args.window_ms, max_message_bytes=int(args.max_message_mb * 2**20),
            default_prompt=args.default_prompt, num_slots=args.slots,
            api_key=args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None),
            insecure=args.insecure, allow_origins=tuple(args.allow_origin),
            limits=Limits(max_prompt_chars=args.max_prompt_chars, max_image_pixels=args.max_image_pixels),
            max_prompt_tokens=args.max_prompt_tokens, max_buffered_frames=args.max_buffered_frames,
            idle_timeout_s=args.idle_timeout_s, max_invalid_messages=args.max_invalid_messages,
            control_hz=args.control_hz,
        ).check()
        if args.ray is not None:
            return _run_fleet(args, cfg)
        if any(getattr(args, k) is not None for k in ("replicas", "max_replicas", "robots_per_replica", "replica_gpus",
                                                       "scale_up_delay_s", "scale_down_delay_s")):
            raise ValueError("--replicas, --max-replicas, --robots-per-replica, --replica-gpus, --scale-up-delay-s "
                             "and --scale-down-delay-s need --ray")
        policy = build_policy(args)
        server = PolicyServer(policy, cfg)
        server.placement = placement.as_record()
    except ValueError as e:
        print(f"oxygen-gym serve: {e}", file=sys.stderr)
        return 2

    def ready(port: int) -> None:
        access = "API key required" if cfg.api_key else "no API key"
        print(f"oxygen-gym serve: listening on ws://{args.host}:{port} (robot {args.robot}, model {args.checkpoint}, "
              f"batching {args.batching}, max robots {args.max_robots}, {access}, {placement.threads} torch thread(s) "
              f"({placement.source}), pid {os.getpid()})", flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stop)
        await server.serve(on_ready=ready, max_seconds=args.max_seconds)

    asyncio.run(main())
    return 0


def _run_fleet(args: argparse.Namespace, cfg) -> int:
    """`--ray`: the same server as Ray Serve replicas (serve/fleet/); runs until SIGINT/SIGTERM or --max-seconds."""
    import functools
    import threading

    from .fleet.app import FleetOptions, start_fleet

    fleet_options = FleetOptions(
        replicas=args.replicas or 2, max_replicas=args.max_replicas, robots_per_replica=args.robots_per_replica,
        replica_cpus=args.replica_cpus,
        replica_gpus=args.replica_gpus if args.replica_gpus is not None else (1.0 if args.device.startswith("cuda") else 0.0),
        drain_timeout_s=args.drain_timeout_s, threads=args.threads,
        **{k: getattr(args, k) for k in ("scale_up_delay_s", "scale_down_delay_s") if getattr(args, k) is not None},
    ).check(cfg.max_robots)
    if cfg.port == 0:  # Serve's proxy needs a fixed port: take a free one of this machine
        import socket

        with socket.socket() as s:
            s.bind((cfg.host, 0))
            cfg.port = s.getsockname()[1]
    fleet = start_fleet(functools.partial(build_policy, args), cfg, fleet_options, address=args.ray)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    access = "API key required" if cfg.api_key else "no API key"
    size = (f"{fleet_options.replicas} replicas" if fleet_options.max_replicas is None else
            f"{fleet_options.replicas} to {fleet_options.max_replicas} replicas")
    print(f"oxygen-gym serve: listening on {fleet.uri} (Ray Serve, {size}, robot {args.robot}, model {args.checkpoint}, "
          f"max robots {cfg.max_robots} per replica, {access}, pid {os.getpid()})", flush=True)
    try:
        stop.wait(timeout=args.max_seconds)
    finally:
        fleet.stop()
    return 0
