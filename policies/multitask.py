"""MultiTaskPolicy: `act(obs) -> (actions, language_updates)` over one shared KV cache (docs/api.md)."""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from oxygen_gym.engine.budget import make_budget
from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.modes import ALL_MODES
from oxygen_gym.engine.parallel import ParallelExecutor
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool, default_num_slots
from oxygen_gym.engine.stats import DEFAULT_WINDOW, FrameLog
from oxygen_gym.engine.timing import peak_memory_bytes, peak_rss_bytes
from oxygen_gym.model.pi05.config import BUILTIN, PI05Config
from oxygen_gym.model.pi05.modeling import PI05Model

from . import normalize
from .inputs import build_prefix_inputs, check_observation
from .language import LanguageTask, LanguageUpdate, TextStream, task_prompt_ids
from .robots import RobotSpec, get_robot

if TYPE_CHECKING:
    from .checkpoints import ConventionOverrides

POLICY_MODES = ALL_MODES  # engine/modes.py: one definition


def _seed_for(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0] >> 1)


class MultiTaskPolicy:
    """Actions every call, plus language from the same observation through one shared prefill.

    Use `from_pretrained`; the constructor takes an already-built model.
    """

    def __init__(
        self,
        model: PI05Model,
        tokenizer,
        *,
        robot: str | RobotSpec = "libero",
        tasks: list[LanguageTask] | tuple[LanguageTask, ...] = (),
        decode_budget: int | str = 5,
        target_action_hz: float | None = None,
        language_deadline_s: float | None = None,
        mode: str = "oxygen",
        seed: int = 0,
        norm_stats: dict | None = None,
        action_horizon: int | None = None,
        num_steps: int | None = None,
        num_slots: int | None = None,
        chunk: int | None = None,
        camera_slots: dict[str, str] | None = None,
        state_normalizer: normalize.Normalizer | None = None,
        action_normalizer: normalize.Normalizer | None = None,
        image_resize: str = "pil",
    ) -> None:
        """`action_horizon`: actions act() returns (default: the robot's); `chunk`: actions denoised (default
        `action_horizon`; a checkpoint's own chunk via from_pretrained). `camera_slots`: robot camera -> model image
        slot (default: the robot's openpi slots). Normalisers default to openpi's quantiles over `norm_stats`."""
        self.robot = robot if isinstance(robot, RobotSpec) else get_robot(robot)
        if mode not in POLICY_MODES:
            raise ValueError(f"mode: unknown mode {mode!r}; expected one of {POLICY_MODES}")
        tasks = list(tasks)
        for t in tasks:
            if not isinstance(t, LanguageTask):
                raise ValueError(f"tasks must be LanguageTask objects, got {type(t).__name__}")
        if len({t.name for t in tasks}) != len(tasks):
            raise ValueError(f"tasks: names must be unique, got {[t.name for t in tasks]}")
        self.model, self.tokenizer, self.tasks, self.mode, self.seed = model, tokenizer, tasks, mode, int(seed)
        cfg = model.config
        self.horizon = int(action_horizon or self.robot.horizon)
        if self.horizon <= 0:
            raise ValueError(f"action_horizon must be > 0, got {self.horizon}")
        self.chunk = int(chunk or self.horizon)
        if self.chunk < self.horizon:
            raise ValueError(f"chunk ({self.chunk}) must be >= action_horizon ({self.horizon}): actions are cut from it")
        self.camera_slots = dict(camera_slots) if camera_slots is not None else dict(self.robot.cameras)
        self.image_resize = image_resize
        if self.robot.action_dim > cfg.action_dim:
            raise ValueError(f"robot {self.robot.name!r} needs {self.robot.action_dim} action dims; model has {cfg.action_dim}")
        self.num_steps = int(num_steps or cfg.num_steps)
        self.budget = make_budget(
            decode_budget, target_action_hz=target_action_hz, horizon=self.horizon, language_deadline_s=language_deadline_s
        )
        self.state_norm = state_normalizer or normalize.from_stats(norm_stats, "state", "observation.state")
        self.action_norm = action_normalizer or normalize.from_stats(norm_stats, "actions", "action")
        self._task_prompt_ids = {t.name: task_prompt_ids(tokenizer, t.prompt) for t in tasks}
        self.model_slots = tuple(s for s in cfg.image_slots)
        self.action_head = next(iter(model.action_heads))  # the head act() returns
        max_cont = max((len(self._task_prompt_ids[t.name]) + t.max_new_tokens for t in tasks), default=0)
        capacity = model.max_prefix_length() + max(self.chunk, max_cont)
        kv = model.kv_layout
        per_slot = kv.row_bytes(capacity, model.dtype)
        if num_slots is None:
            num_slots = default_num_slots(per_slot, model.device)
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        pool_args = dict(
            num_slots=num_slots, capacity=capacity, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim,
            device=model.device, dtype=model.dtype,
        )
        if mode == "parallel":
            self.engine = ParallelExecutor(model, pool_args, num_steps=self.num_steps)
            self._pool_bytes = 2 * per_slot * (num_slots + 1)  # one pool per worker
        else:
            self.pool = SlotPool(**pool_args)
            self.engine = FrameScheduler(model, self.pool, mode, num_steps=self.num_steps)
            self._pool_bytes = self.pool.nbytes()
        self._model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.conventions = None  # a checkpoint's resolved conventions (from_pretrained), for inspection
        self._start_session_state()

    def _start_session_state(self, window: int = DEFAULT_WINDOW) -> None:
        """What one robot's stream of act() calls owns (a server session gets its own, see `session`)."""
        self._next_request_id = 0
        self._streams: dict[int, TextStream] = {}
        self._started_at: dict[int, float] = {}
        self._records = FrameLog(window)  # running totals + the last frames only: memory stays flat on long runs
        self.frame = 0
        self.last_frame: dict | None = None
        self._closed = False

    def session(self, engine) -> "MultiTaskPolicy":
        """A policy for one robot over a shared `engine` (a server session: anything with this policy's engine's
        `run`, `in_flight`, `reset`, `close`). It shares this policy's model, tokenizer, robot, tasks and normalisers
        (read-only) and has its own frame counter, request ids, text streams, decode budget and stats; it holds no
        KV pool of its own."""
        p = copy.copy(self)
        p.engine = engine
        p.pool = None
        p._pool_bytes = 0
        p.budget = copy.deepcopy(self.budget)
        p._start_session_state(self._records.window)
        return p

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path = "tiny",
        *,
        robot: str | RobotSpec = "libero",
        tasks=(),
        decode_budget: int | str = 5,
        target_action_hz: float | None = None,
        language_deadline_s: float | None = None,
        mode: str = "oxygen",
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        seed: int = 0,
        tokenizer=None,
        norm_stats=None,
        asset_id: str | None = None,
        camera_map: dict | None = None,
        discrete_state: bool | None = None,
        action_horizon: int | None = None,
        family: str | None = None,
        image_resize: str | None = None,
        revision: str | None = None,
        **kwargs,
    ) -> "MultiTaskPolicy":
        """A built-in model name (`tiny`, `small`, `pi05`: random weights from `seed`), a shipped trained model
        (`libero-spatial`, model/trained.py), or a pi0.5 checkpoint folder / hub id of any family that
        policies/checkpoints knows (ours, lerobot, openpi). A checkpoint's cameras, normalisation, chunk, prompt
        format and tokenizer are resolved before its weights load, as its authors' own eval does; every guess is a
        `CheckpointGuessWarning` naming the argument that overrides it (`oxygen-gym inspect` lists them)."""
        import warnings

        from oxygen_gym.model.pi05.init import default_dtype

        from .checkpoints import CheckpointGuessWarning, ConventionOverrides, resolve_conventions

        if mode not in POLICY_MODES:
            raise ValueError(f"mode: unknown mode {mode!r}; expected one of {POLICY_MODES}")
        robot_spec = robot if isinstance(robot, RobotSpec) else get_robot(robot)
        overrides = ConventionOverrides(
            tokenizer=tokenizer, norm_stats=norm_stats, asset_id=asset_id, camera_map=camera_map,
            discrete_state=discrete_state, action_horizon=action_horizon, family=family, image_resize=image_resize,
            revision=revision,
        )
        dev = torch.device(device)
        dtype = dtype or default_dtype(dev)
        if isinstance(name_or_path, str) and name_or_path in BUILTIN:
            return cls._builtin(
                name_or_path, robot_spec, dev, dtype, overrides, seed=seed, tasks=tasks, decode_budget=decode_budget,
                target_action_hz=target_action_hz, language_deadline_s=language_deadline_s, mode=mode, **kwargs,
            )
        from oxygen_gym.model.pi05.loading import load_pretrained

        conv = resolve_conventions(name_or_path, robot_spec, overrides)
        for message in conv.warnings:
            warnings.warn(f"{conv.root.name}: {message}", CheckpointGuessWarning, stacklevel=2)
        model = load_pretrained(conv.root, config=conv.config, device=dev, dtype=dtype, asset_id=conv.asset_id)
        policy = cls(
            model, conv.tokenizer, robot=robot_spec, tasks=tasks, decode_budget=decode_budget,
            target_action_hz=target_action_hz, language_deadline_s=language_deadline_s, mode=mode, seed=seed,
            action_horizon=conv.n_actions, chunk=conv.config.action_horizon, camera_slots=conv.camera_slots,
            state_normalizer=conv.state_norm, action_normalizer=conv.action_norm, image_resize=conv.image_resize,
            **kwargs,
        )
        policy.conventions = conv
        return policy

    @classmethod
    def _builtin(cls, name: str, robot: RobotSpec, dev, dtype, overrides: ConventionOverrides, *, seed: int,
                 **kwargs) -> "MultiTaskPolicy":
        """A random-weight built-in model: the robot's slots and horizon, no statistics unless given. Of the
        overrides (already validated), the ones a built-in has use for apply; asset_id, family, revision do not."""
        from oxygen_gym.model.pi05.init import build_model
        from oxygen_gym.model.tokenizer import find_tokenizer

        from .checkpoints import map_cameras
        from .checkpoints.resolve import _stats

        o = overrides
        cfg = PI05Config.named(name)
        if o.discrete_state is not None:
            cfg = PI05Config(**{**cfg.to_dict(), "discrete_state": bool(o.discrete_state)})
        slots = map_cameras(robot, cfg.image_slots, o.camera_map)[0] if o.camera_map is not None else None
        stats = _stats(Path("."), "ours", o.norm_stats, None)[0] if o.norm_stats is not None else None
        tok = find_tokenizer(cfg.vocab_size, None, o.tokenizer)[0]
        model = build_model(cfg, seed=seed, device=dev, dtype=dtype)
        kwargs.setdefault("action_horizon", o.action_horizon)
        return cls(model, tok, robot=robot, seed=seed, norm_stats=stats, camera_slots=slots,
                   image_resize=o.image_resize or "pil", **kwargs)

    # ------------------------------------------------------------------ the loop
    def model_inputs(self, obs: dict):
        """What act() feeds the model for `obs`: images per slot (absent ones masked), prompt tokens and mask
        (`PrefixInputs`). Checks the observation; touches no engine state."""
        images, state, prompt = check_observation(obs, self.robot)
        cfg = self.model.config
        return build_prefix_inputs(
            images, state, prompt, robot=self.robot, model_slots=self.model_slots, image_size=cfg.vision.image_size,
            tokenizer=self.tokenizer, max_token_len=cfg.max_token_len, discrete_state=cfg.discrete_state,
            state_normalizer=self.state_norm, state_pad_to=cfg.state_pad_to, device=self.model.device,
            camera_slots=self.camera_slots, image_resize=self.image_resize,
        )

    def act(self, obs: dict) -> tuple[np.ndarray, list[LanguageUpdate]]:
        if self._closed:
            raise RuntimeError("policy is closed")
        cfg = self.model.config
        prefix = self.model_inputs(obs)
        frame = self.frame
        noise_gen = torch.Generator().manual_seed(_seed_for(self.seed, frame))
        noise = {self.action_head: torch.randn(1, self.chunk, cfg.action_dim, generator=noise_gen).to(self.model.device)}
        new = [self._new_request(t, frame) for t in self.tasks if frame % t.every == 0]
        in_flight = self.engine.in_flight() + new
        now = time.perf_counter()
        k = self.budget.choose(
            len(in_flight), [r.remaining for r in in_flight], [now - self._started_at.get(r.request_id, now) for r in in_flight]
        )
        result = self.engine.run(FrameInput(frame, prefix, noise, new), k)
        self.frame += 1
        for r in new:
            self._started_at[r.request_id] = now
        self.budget.observe(result.stats.stage_ms, result.stats.batch_sizes, result.stats.stage_ms["decode"])
        actions = result.head_actions[self.action_head][0, : self.horizon, : self.robot.action_dim].float().cpu().numpy()
        actions = self.robot.actions_from_model(self.action_norm.unnormalize(actions)).astype(np.float32)
        updates = [self._update(r, toks) for r, toks in result.advanced]
        self._record(result.stats, k)
        return actions, updates

    def _new_request(self, task: LanguageTask, frame: int) -> Request:
        rid = self._next_request_id
        self._next_request_id += 1
        self._streams[rid] = TextStream(self.tokenizer.decode, frozenset({self.tokenizer.eos_id}))
        return Request(
            request_id=rid, task=task.name, frame=frame, prompt_ids=list(self._task_prompt_ids[task.name]),
            max_new_tokens=task.max_new_tokens, eos_id=self.tokenizer.eos_id, temperature=task.temperature,
            seed=_seed_for(self.seed, rid, 1),
        )

    def _update(self, r: Request, tokens: list[int]) -> LanguageUpdate:
        stream = self._streams[r.request_id]
        delta = stream.push(tokens, r.done)
        if r.done:
            del self._streams[r.request_id]
            self._started_at.pop(r.request_id, None)
        return LanguageUpdate(r.request_id, r.task, r.frame, tuple(tokens), delta, stream.text, r.done)

    def _record(self, stats, k: int) -> None:
        rec = {
            "frame": stats.frame,
            "frame_ms": stats.frame_ms,
            "stage_ms": dict(stats.stage_ms),
            "tokens": stats.tokens,
            "batch_sizes": list(stats.batch_sizes),
            "batch_size": max(stats.batch_sizes, default=0),
            "k": k,
            "active": stats.active,
            "queued": stats.queued,
        }
        self._records.append(rec)
        self.last_frame = rec

    # ------------------------------------------------------------------ bookkeeping
    def reset(self, seed: int | None = None) -> None:
        """Episode boundary: drop in-flight requests; the frame counter restarts at 0. A new `seed` changes the
        action noise and sampling from here on (a built-in model's weights stay those of the original seed)."""
        if seed is not None:
            self.seed = int(seed)
        self.engine.reset()
        self._streams.clear()
        self._started_at.clear()
        self.frame = 0

    def stats(self) -> dict:
        """Means and rates over every frame since construction; `frame_ms` p50/p99 over the last
        `self._records.window` frames (the log keeps only those, so a long run's memory stays flat)."""
        out = {
            **self._records.summary(self.horizon),
            "peak_memory_bytes": peak_memory_bytes(self.model.device),
            "held_memory_bytes": self._model_bytes + self._pool_bytes,  # computed: weights + KV pool
            "peak_rss_bytes": peak_rss_bytes(),
            "mode": self.mode,
            "queued_requests": int(getattr(self.engine, "total_queued", 0)),
            "deadline_misses": int(getattr(self.budget, "deadline_misses", 0)),
        }
        return out

    def close(self) -> None:
        if not self._closed:
            close = getattr(self.engine, "close", None)
            if close:
                close()
            self._closed = True

    def __enter__(self) -> "MultiTaskPolicy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
