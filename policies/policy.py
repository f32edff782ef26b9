"""The shared half of a policy: the model and everything read-only around it, built once for any number of robots.

`Policy` holds the weights and model, the tokenizer and the family's observation/text conventions (`io`), the
normalisers, the tasks and their prompt tokens, the adapters, and the engine with its KV slot pool. What one robot
owns is a `PolicySession` (policies/policy_session.py), made by `new_session`. `MultiTaskPolicy`
(policies/multitask.py) is a `Policy` with a session of its own, so `policy.act(obs)` is one robot's call.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oxygen_gym.engine.budget import make_budget
from oxygen_gym.engine.parallel import ParallelExecutor
from oxygen_gym.engine.rtc import RTCConfig
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool, default_num_slots
from oxygen_gym.engine.stats import DEFAULT_WINDOW
from oxygen_gym.engine.model_api import EngineModel

from . import normalize, task_adapters  # noqa: F401 - the families register when model_io's lookups first run
from .action_noise import NoiseScale, check_noise_scale, noise_multiplier
from .frame_engine import FrameEngine
from .model_io import ModelIO, io_for
from .observation import CheckedObservation
from .policy_config import PolicyConfig, check_replan_steps, check_tasks, select_heads
from .policy_session import PolicySession, copy_budget
from .robots import RobotSpec
from .rtc_inputs import check_delay, check_prev_actions, chunk_guidance
from .seeds import head_noise_seed


class Policy:
    """The model and what every robot shares. Built from a model and a `PolicyConfig` (or its keywords); the keywords
    after `config` are what a checkpoint's family resolved (its normalisers, cameras, chunk), not user options."""

    def __init__(
        self,
        model: EngineModel,
        tokenizer: Any,
        *,
        config: PolicyConfig | None = None,
        norm_stats: dict | None = None,
        action_horizon: int | None = None,
        chunk: int | None = None,
        camera_slots: dict[str, str] | None = None,
        state_normalizer: normalize.Normalizer | None = None,
        action_normalizer: normalize.Normalizer | None = None,
        image_resize: str | None = None,
        model_io: ModelIO | None = None,
        declared_tasks: list | tuple = (),
        **options: Any,
    ) -> None:
        """`options`: `PolicyConfig` fields by name, over `config`. `config.conventions` is what `from_pretrained`
        imposes on a checkpoint's folder; here the family's resolved values come as keywords: `norm_stats` (or the
        normalisers), `action_horizon` (None: the robot's), `chunk` (`config.chunk` wins; None: `action_horizon`),
        `camera_slots`, `image_resize` (None: "pil"), `model_io`, `declared_tasks`."""
        config = config if config is not None else PolicyConfig()
        if not isinstance(config, PolicyConfig):
            raise ValueError(f"config: expected a PolicyConfig, got {type(config).__name__}")
        if options:
            config = config.replace(**options)
        self.config = config
        self.robot = config.robot_spec()
        self.model, self.tokenizer, self.tasks, self.mode = model, tokenizer, list(config.tasks), config.mode
        self.default_seed = config.seed
        self.horizon = int(action_horizon or self.robot.horizon)
        if self.horizon <= 0:
            raise ValueError(f"action_horizon must be > 0, got {self.horizon}")
        self.replan_steps = check_replan_steps(config.replan_steps, self.horizon)
        self.declared_tasks = _check_declared_tasks(declared_tasks)
        self.chunk = int(config.chunk or chunk or self.horizon)
        if self.chunk < self.horizon:
            raise ValueError(f"chunk ({self.chunk}) must be >= action_horizon ({self.horizon}): actions are cut from it")
        self.image_resize = image_resize or "pil"
        self.rtc = config.rtc or RTCConfig()
        self.action_heads = select_heads(list(model.action_heads), config.heads)
        self.action_head = self.action_heads[0]  # the head a one-array act() returns
        model_heads = model.action_heads
        for h in self.action_heads:
            if self.robot.action_dim > model_heads[h].action_dim:
                raise ValueError(
                    f"robot {self.robot.name!r} needs {self.robot.action_dim} action dims; head {h!r} has "
                    f"{model_heads[h].action_dim}"
                )
        first = next(iter(model_heads))  # the model's own first head denoises `chunk`; others at most their horizon
        self.head_chunks = {h: self.chunk if h == first else min(self.chunk, model_heads[h].horizon) for h in self.action_heads}
        self._head_dims = {h: model_heads[h].action_dim for h in self.action_heads}
        # checked against every head now, not at the first act(); None (no declaration read): the reference sampler
        self.noise_scale = 1.0 if config.noise_scale is None else config.noise_scale
        self.num_steps = config.num_steps  # None: each head's own steps
        self.budget = make_budget(
            config.decode_budget, target_action_hz=config.target_action_hz, horizon=self.horizon,
            language_deadline_s=config.language_deadline_s,
        )
        self.state_norm = state_normalizer or normalize.from_stats(norm_stats, "state", "observation.state")
        self.action_norm = action_normalizer or normalize.from_stats(norm_stats, "actions", "action")
        self.io = model_io or io_for(
            model, tokenizer, robot=self.robot, camera_slots=camera_slots, state_normalizer=self.state_norm,
            image_resize=self.image_resize,
        )
        self.camera_slots = self.io.camera_slots  # robot camera -> the model's slot / view (the family's default)
        self._task_prompt_ids = {t.name: self.io.task_prompt_ids(t.prompt) for t in self.tasks}
        adapters = list(config.adapters) if isinstance(config.adapters, tuple) else config.adapters
        if config.mode == "parallel" and (adapters or any(t.adapter for t in self.tasks)):
            raise ValueError("adapters: mode='parallel' runs language in a worker process; use another mode")
        merge = list(config.merge_adapters) if config.merge_adapters is not None else None
        self.adapters = task_adapters.setup(self, adapters, merge, self.tasks)
        max_cont = max((len(self._task_prompt_ids[t.name]) + t.max_new_tokens for t in self.tasks), default=0)
        # every head writes its chunk after the prefix (one at a time); heads beyond the first have no larger chunk
        capacity = model.max_prefix_length() + max(self.chunk, max_cont)
        kv = model.kv_layout
        self.slot_bytes = kv.row_bytes(capacity, model.dtype)  # one KV slot of this policy
        num_slots = config.num_slots if config.num_slots is not None else default_num_slots(self.slot_bytes, model.device)
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.pool_args = dict(
            num_slots=num_slots, capacity=capacity, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim,
            device=model.device, dtype=model.dtype,
        )
        # the engine and its pool are built at first use: a server's template policy never runs a frame itself, and
        # its server builds the one pool every robot's requests share (serve/server.py)
        self._engine: FrameEngine | None = None
        self._pool: SlotPool | None = None
        if config.mode == "parallel":  # worker processes start now, as they always have
            self._engine = ParallelExecutor(model, self.pool_args, num_steps=self.num_steps)
            self._pool_bytes = 2 * self.slot_bytes * (num_slots + 1)  # one pool per worker
        else:
            self._pool_bytes = self.slot_bytes * (num_slots + 1)  # SlotPool's rows: the slots and one scratch row
        self.model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.conventions = None  # a checkpoint's resolved conventions (from_pretrained), for inspection
        self._engine_closed = False

    @property
    def engine(self) -> FrameEngine:
        """This policy's own engine (built at first use): the scheduler of its mode over its own KV slot pool, or the
        `parallel` mode's workers."""
        if self._engine is None:
            self._pool = SlotPool(**self.pool_args)
            self._engine = FrameScheduler(self.model, self._pool, self.mode, num_steps=self.num_steps)
        return self._engine

    @property
    def pool(self) -> SlotPool | None:
        """The KV slot pool of this policy's own engine (built with it); None in `parallel` mode (one per worker)."""
        if self.mode == "parallel":
            return None
        return self.engine.pool if self._pool is None else self._pool

    @property
    def pool_built(self) -> bool:
        """Whether this policy's own KV pool exists (a server's template never builds one)."""
        return self._pool is not None

    # ------------------------------------------------------------------ sessions
    def new_session(self, engine: FrameEngine | None = None, *, seed: int | None = None, budget: Any = None,
                    window: int = DEFAULT_WINDOW) -> PolicySession:
        """A session for one robot. `engine`: what runs its frames (None: this policy's own engine, which one session
        at a time may use: its requests are that engine's); `seed`: its noise and sampling seed (None: the
        policy's); `budget`: a decode budget whose state it copies (None: the policy's)."""
        own = engine is None
        return PolicySession(
            self, engine, seed=self.default_seed if seed is None else seed,
            budget=copy_budget(self.budget if budget is None else budget), window=window,
            pool_bytes=self._pool_bytes if own else 0,
        )

    # ------------------------------------------------------------------ what a session's frame reads
    def model_inputs(self, obs: Any):
        """What act() feeds the model for `obs` (the family's prefix bundle: for pi0.5 images per slot, absent ones
        masked, prompt tokens and mask). Checks the observation; touches no engine state."""
        checked = obs if isinstance(obs, CheckedObservation) else CheckedObservation.check(obs, self.robot)
        return self.io.prefix_inputs(dict(checked.images), checked.state, checked.prompt)

    def frame_inputs(self, obs: Any, prev_actions, inference_delay) -> tuple[Any, dict]:
        """(prefix inputs, RTC guidance per head) of one frame. A `CheckedObservation` is taken as checked; a dict
        is checked here (the observation, then `prev_actions`), before any engine state changes."""
        if isinstance(obs, CheckedObservation):
            if obs.robot != self.robot.name:
                raise ValueError(f"obs: checked for robot {obs.robot!r}; this policy runs {self.robot.name!r}")
            if prev_actions is not None:
                raise ValueError("prev_actions: a CheckedObservation carries its own prev_actions; pass them there")
            prefix = self.io.prefix_inputs(dict(obs.images), obs.state, obs.prompt)
            if obs.prev_actions is None:
                return prefix, {}
            return prefix, self._guidance_of(dict(obs.prev_actions), obs.inference_delay)
        prefix = self.model_inputs(obs)
        return prefix, self._guidance(prev_actions, inference_delay)

    @property
    def noise_scale(self) -> NoiseScale:
        """The heads' starting-noise scale: one number, or one per action dimension (policies/action_noise.py)."""
        return self._noise_scale

    @noise_scale.setter
    def noise_scale(self, value: NoiseScale | list[float]) -> None:
        self._noise_scale = check_noise_scale(value)
        self._head_noise = {h: noise_multiplier(self._noise_scale, self._head_dims[h], h) for h in self.action_heads}

    @property
    def seed(self) -> int:
        """The seed a new session draws with (and a built-in model's weights were drawn from)."""
        return self.default_seed

    def frame_noise(self, frame: int, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Each head's noise `[1, chunk, action_dim]` for `frame`, from a generator seeded by (seed, frame, head),
        times `noise_scale` (per action dimension where it is a sequence). `seed` None: `self.seed`."""
        seed = self.seed if seed is None else seed
        out = {}
        for h in self.action_heads:
            gen = torch.Generator().manual_seed(head_noise_seed(seed, frame, h))
            noise = torch.randn(1, self.head_chunks[h], self._head_dims[h], generator=gen)
            out[h] = (noise * self._head_noise[h]).to(self.model.device)  # x 1.0 is exact: the reference sampler
        return out

    def _guidance(self, prev_actions, inference_delay) -> dict:
        """Per head, the RTC guidance of this frame's `prev_actions` (see `MultiTaskPolicy.act`), checked."""
        if prev_actions is None:
            return {}
        if isinstance(prev_actions, dict):
            unknown = [h for h in prev_actions if h not in self.action_heads]
            if unknown:
                raise ValueError(f"prev_actions: unknown action head(s) {unknown}; this policy runs {self.action_heads}")
            per_head = prev_actions
        elif len(self.action_heads) == 1:
            per_head = {self.action_head: prev_actions}
        else:
            raise ValueError(f"prev_actions: this policy runs heads {self.action_heads}; pass a dict head -> array")
        checked = {}
        for h, prev in per_head.items():
            field = "prev_actions" if not isinstance(prev_actions, dict) else f"prev_actions[{h!r}]"
            checked[h] = check_prev_actions(prev, self.robot.action_dim, field)
            delay = check_delay(inference_delay, self.head_chunks[h])
        return self._guidance_of(checked, delay) if checked else {}

    def _guidance_of(self, per_head: dict[str, np.ndarray], delay: int) -> dict:
        """Per head, the guidance of checked previous chunks (float32 `(n, action_dim)` robot units)."""
        out = {}
        for h, a in per_head.items():
            g = chunk_guidance(
                a, delay, config=self.rtc, chunk=self.head_chunks[h], model_dim=self._head_dims[h],
                default_horizon=self.horizon, robot=self.robot, normalizer=self.action_norm,
            )
            if g is not None:
                out[h] = g.to(self.model.device)
        return out

    def robot_actions(self, model_actions: torch.Tensor) -> np.ndarray:
        """One head's `[1, chunk, dim]` model-space actions as `(horizon, robot action_dim)` in robot units."""
        a = model_actions[0, : self.horizon, : self.robot.action_dim].float().cpu().numpy()
        return self.robot.actions_from_model(self.action_norm.unnormalize(a)).astype(np.float32)

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, name: str, path) -> None:
        """Load a per-task LoRA adapter (a PEFT folder) at run time; the KV pool and in-flight requests are
        untouched. A task then uses it through `LanguageTask(adapter=name)`."""
        if self.mode == "parallel":
            raise ValueError("load_adapter: mode='parallel' runs language in a worker process; use another mode")
        self.adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        """Free an adapter's slot; an error while an in-flight request or one of this policy's tasks uses it."""
        self.adapters.unload(name, self.engine.in_flight(), self.tasks)

    def close_engine(self) -> None:
        """Release the engine's workers (the `parallel` mode's processes); idempotent."""
        if not self._engine_closed:
            close = getattr(self._engine, "close", None) if self._engine is not None else None
            if close:
                close()
            self._engine_closed = True


def _check_declared_tasks(tasks) -> tuple:
    """A checkpoint's declared tasks as a tuple (read-only: sessions share it), checked as `tasks` is."""
    if not isinstance(tasks, (list, tuple)):
        raise ValueError(f"declared_tasks: expected a list of LanguageTask, got {tasks!r}")
    return check_tasks(tasks, "declared_tasks")


__all__ = ["Policy", "PolicySession", "RobotSpec"]
