"""MultiTaskPolicy: `act(obs) -> (actions, language_updates)` over one shared KV cache (docs/api.md)."""
from __future__ import annotations

import copy
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from oxygen_gym.engine.budget import make_budget
from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.modes import ALL_MODES
from oxygen_gym.engine.parallel import ParallelExecutor
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.rtc import RTCConfig
from oxygen_gym.engine.scheduler import FrameScheduler
from oxygen_gym.engine.slots import SlotPool, default_num_slots
from oxygen_gym.engine.stats import DEFAULT_WINDOW, FrameLog
from oxygen_gym.engine.timing import peak_memory_bytes, peak_rss_bytes
from oxygen_gym.engine.model_api import EngineModel

from . import normalize, task_adapters  # noqa: F401 - the families register when model_io's lookups first run
from .inputs import check_observation
from .language import LanguageTask, LanguageUpdate, TextStream
from .action_noise import NoiseScale, check_noise_scale, noise_multiplier
from .model_io import ModelIO, builtin_names, checkpoint_family, family_of_builtin, io_for
from .robots import RobotSpec, get_robot
from .numeric_range import NonFiniteActionsError, check_finite_actions
from .rtc_inputs import check_delay, check_prev_actions, chunk_guidance

if TYPE_CHECKING:
    from .checkpoints import ConventionOverrides

POLICY_MODES = ALL_MODES  # engine/modes.py: one definition


def _seed_for(*parts: int) -> int:
    # Python int arithmetic: numpy 1.x promotes `uint64 >> int` to float64 and raises (numpy 2 keeps uint64)
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint64)[0]) >> 1


def head_noise_seed(seed: int, frame: int, head: str) -> int:
    """The seed of `head`'s noise at `frame`: by name, not by place, so a head's actions do not change when other
    heads are added or dropped, and every mode draws the same noise."""
    return _seed_for(seed, frame, zlib.crc32(head.encode()))


class MultiTaskPolicy:
    """Actions every call, plus language from the same observation through one shared prefill.

    Use `from_pretrained`; the constructor takes an already-built model.
    """

    def __init__(
        self,
        model: EngineModel,
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
        heads: list[str] | tuple[str, ...] | None = None,
        model_io: ModelIO | None = None,
        rtc: RTCConfig | None = None,
        adapters: dict | None = None,
        merge_adapters: list | None = None,
        noise_scale: NoiseScale | list[float] = 1.0,
        replan_steps: int | None = None,
        declared_tasks: list[LanguageTask] | tuple[LanguageTask, ...] = (),
    ) -> None:
        """`action_horizon`: actions act() returns (default: the robot's); `chunk`: actions denoised (default
        `action_horizon`; a checkpoint's own chunk via from_pretrained). `heads`: the action heads act() runs and
        returns (default: every head of the model, in its order); a head other than the model's first denoises
        min(chunk, its own horizon) actions. `camera_slots`: robot camera -> model image
        slot (default: the robot's openpi slots). Normalisers default to openpi's quantiles over `norm_stats`.
        `model_io`: the family's observation and text conventions (default: the one registered for the model's class,
        policies/model_io.py). `rtc`: how `act(obs, prev_actions=...)` inpaints a chunk (real-time chunking,
        engine/rtc.py; default `RTCConfig()`). `adapters`: per-task LoRA adapters, name -> PEFT folder (a task names
        one with `LanguageTask(adapter=)`); `merge_adapters`: PEFT folders over the whole model, merged into the
        weights first (policies/task_adapters.py). `noise_scale`: scale of the flow-matching heads' starting noise
        (policies/action_noise.py: 1 = the reference sampler, 0 = one deterministic chunk per observation), or one
        scale per action dimension (a head's first n dims; the rest keep 1). `replan_steps`: actions of each chunk
        to execute per call (1..action_horizon; None: not said), read by `envs.run_episode` and the server's metadata;
        `declared_tasks`: the language tasks the checkpoint was trained to answer (from_pretrained fills both from
        config.json)."""
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
        self.horizon = int(action_horizon or self.robot.horizon)
        if self.horizon <= 0:
            raise ValueError(f"action_horizon must be > 0, got {self.horizon}")
        self.replan_steps = _check_replan_steps(replan_steps, self.horizon)
        self.declared_tasks = _check_declared_tasks(declared_tasks)
        self.chunk = int(chunk or self.horizon)
        if self.chunk < self.horizon:
            raise ValueError(f"chunk ({self.chunk}) must be >= action_horizon ({self.horizon}): actions are cut from it")
        self.image_resize = image_resize
        if rtc is not None and not isinstance(rtc, RTCConfig):
            raise ValueError(f"rtc: expected an RTCConfig, got {type(rtc).__name__}")
        self.rtc = rtc or RTCConfig()
        self.action_heads = _select_heads(list(model.action_heads), heads)
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
        self.noise_scale = noise_scale  # checked against every head now, not at the first act()
        self.num_steps = int(num_steps) if num_steps else None  # None: each head's own steps
        self.budget = make_budget(
            decode_budget, target_action_hz=target_action_hz, horizon=self.horizon, language_deadline_s=language_deadline_s
        )
        self.state_norm = state_normalizer or normalize.from_stats(norm_stats, "state", "observation.state")
        self.action_norm = action_normalizer or normalize.from_stats(norm_stats, "actions", "action")
        self.io = model_io or io_for(
            model, tokenizer, robot=self.robot, camera_slots=camera_slots, state_normalizer=self.state_norm,
            image_resize=image_resize,
        )
        self.camera_slots = self.io.camera_slots  # robot camera -> the model's slot / view (the family's default)
        self._task_prompt_ids = {t.name: self.io.task_prompt_ids(t.prompt) for t in tasks}
        if mode == "parallel" and (adapters or any(t.adapter for t in tasks)):
            raise ValueError("adapters: mode='parallel' runs language in a worker process; use another mode")
        self.adapters = task_adapters.setup(self, adapters, merge_adapters, tasks)
        max_cont = max((len(self._task_prompt_ids[t.name]) + t.max_new_tokens for t in tasks), default=0)
        # every head writes its chunk after the prefix (one at a time); heads beyond the first have no larger chunk
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
        vlm_config: str | Path | None = None,
        heads: list[str] | tuple[str, ...] | None = None,
        noise_scale: NoiseScale | list[float] | None = None,
        adapters: dict[str, str | Path] | list[str] | None = None,
        rtc: RTCConfig | None = None,
        replan_steps: int | None = None,
        **kwargs,
    ) -> "MultiTaskPolicy":
        """A built-in model name (`tiny`, `small`, `pi05`: random weights from `seed`), a shipped trained model
        (`libero-spatial`, model/trained.py), or a checkpoint folder / hub id: pi0.5 of any family that
        policies/checkpoints knows (ours, lerobot, openpi), or Xiaomi-Robotics-0 (`xr0`: its config.json has
        MiBoTConfig's fields; `asset_id=` selects its robot_type's statistics). The folder's family is told from its
        files by the registry (policies/model_io.py `checkpoint_family`; `family=` names it instead). A
        checkpoint's cameras, normalisation, chunk, prompt format and tokenizer are resolved before its weights load,
        as its authors' own eval does; every guess is a `CheckpointGuessWarning` naming the argument that overrides
        it (`oxygen-gym inspect` lists them). What a checkpoint declares for its own execution in config.json is
        used unless given: `noise_scale=` (None: its `noise_scale`, else 1; policies/checkpoints/noise_scale.py),
        `replan_steps=` (None: its `replan_steps`, else None; policies/checkpoints/replan_steps.py); its
        `language_tasks` become `declared_tasks` (policies/checkpoints/language_tasks.py). `adapters=`: per-task
        LoRA adapters, {name: PEFT folder} or a list of the checkpoint's own `adapters/<name>/`; `rtc=`: the
        `RTCConfig` of `act(prev_actions=)`. Other keywords go to the constructor. A StarVLA run folder
        (`starvla`: config.yaml + checkpoints/) takes `vlm_config=` (its backbone's folder, when not in the Hugging
        Face cache) and `heads=` (load only these)."""
        import warnings

        from oxygen_gym.model.pi05.init import default_dtype

        from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError

        from .checkpoints import CheckpointGuessWarning, ConventionOverrides, checkpoint_root
        from .checkpoints.language_tasks import declared_language_tasks
        from .checkpoints.noise_scale import resolved_noise_scale
        from .checkpoints.replan_steps import declared_replan_steps

        if mode not in POLICY_MODES:
            raise ValueError(f"mode: unknown mode {mode!r}; expected one of {POLICY_MODES}")
        robot_spec = robot if isinstance(robot, RobotSpec) else get_robot(robot)
        overrides = ConventionOverrides(
            tokenizer=tokenizer, norm_stats=norm_stats, asset_id=asset_id, camera_map=camera_map,
            discrete_state=discrete_state, action_horizon=action_horizon, family=family, image_resize=image_resize,
            revision=revision, vlm_config=vlm_config, heads=heads,
        )
        kwargs["heads"] = heads  # the heads act() runs (a StarVLA checkpoint also loads only these)
        kwargs.update(rtc=rtc, replan_steps=replan_steps)
        dev = torch.device(device)
        dtype = dtype or default_dtype(dev)
        if isinstance(name_or_path, str) and name_or_path in builtin_names():
            if noise_scale is not None:  # None: the reference sampler (a built-in declares nothing)
                kwargs["noise_scale"] = noise_scale
            return cls._builtin(
                name_or_path, robot_spec, dev, dtype, overrides, seed=seed, tasks=tasks, decode_budget=decode_budget,
                target_action_hz=target_action_hz, language_deadline_s=language_deadline_s, mode=mode,
                adapters=adapters, **kwargs,
            )
        root = checkpoint_root(name_or_path, overrides.revision)
        # what config.json declares for the checkpoint's own execution, read (and checked) before any weight: the
        # given scale, else its sampling noise, else 1; its replan_steps unless given; its language tasks
        kwargs["noise_scale"] = resolved_noise_scale(root, noise_scale)
        declared_replan = declared_replan_steps(root) if replan_steps is None else None
        kwargs["declared_tasks"] = declared_language_tasks(root)
        model, tok, family_kwargs, conv = checkpoint_family(root, overrides.family).load(
            root, robot_spec, overrides, dev, dtype
        )
        for message in conv.warnings:
            warnings.warn(f"{conv.root.name}: {message}", CheckpointGuessWarning, stacklevel=2)
        # a list names the checkpoint's own adapters/<name>/ folders
        kwargs["adapters"] = task_adapters.checkpoint_adapters(root, adapters)
        policy = cls(
            model, tok, robot=robot_spec, tasks=tasks, decode_budget=decode_budget, target_action_hz=target_action_hz,
            language_deadline_s=language_deadline_s, mode=mode, seed=seed, **family_kwargs, **kwargs,
        )
        policy.conventions = conv
        if declared_replan is not None:
            if declared_replan > policy.horizon:
                policy.close()
                raise CheckpointError(
                    f"{root / CONFIG_FILE}: 'replan_steps' is {declared_replan} but this policy returns "
                    f"{policy.horizon} actions per call; pass replan_steps= (1..{policy.horizon})"
                )
            policy.replan_steps = declared_replan
        return policy

    @classmethod
    def _builtin(cls, name: str, robot: RobotSpec, dev, dtype, overrides: ConventionOverrides, *, seed: int,
                 **kwargs) -> "MultiTaskPolicy":
        """A random-weight built-in model of any registered family (policies/model_io.py)."""
        model, tok, family_kwargs = family_of_builtin(name).build_builtin(name, robot, dev, dtype, overrides, seed)
        kwargs.setdefault("action_horizon", overrides.action_horizon)
        return cls(model, tok, robot=robot, seed=seed, **family_kwargs, **kwargs)

    # ------------------------------------------------------------------ the loop
    def model_inputs(self, obs: dict):
        """What act() feeds the model for `obs` (the family's prefix bundle: for pi0.5 images per slot, absent ones
        masked, prompt tokens and mask). Checks the observation; touches no engine state."""
        images, state, prompt = check_observation(obs, self.robot)
        return self.io.prefix_inputs(images, state, prompt)

    @property
    def noise_scale(self) -> NoiseScale:
        """The heads' starting-noise scale: one number, or one per action dimension (policies/action_noise.py)."""
        return self._noise_scale

    @noise_scale.setter
    def noise_scale(self, value: NoiseScale | list[float]) -> None:
        self._noise_scale = check_noise_scale(value)
        self._head_noise = {h: noise_multiplier(self._noise_scale, self._head_dims[h], h) for h in self.action_heads}

    def frame_noise(self, frame: int) -> dict[str, torch.Tensor]:
        """Each head's noise `[1, chunk, action_dim]` for `frame`, from a generator seeded by (seed, frame, head),
        times `noise_scale` (per action dimension where it is a sequence)."""
        out = {}
        for h in self.action_heads:
            gen = torch.Generator().manual_seed(head_noise_seed(self.seed, frame, h))
            noise = torch.randn(1, self.head_chunks[h], self._head_dims[h], generator=gen)
            out[h] = (noise * self._head_noise[h]).to(self.model.device)  # x 1.0 is exact: the reference sampler
        return out

    def act(
        self,
        obs: dict,
        *,
        prev_actions: np.ndarray | dict[str, np.ndarray] | None = None,
        inference_delay: int = 0,
        on_actions: Callable[[np.ndarray | dict[str, np.ndarray]], None] | None = None,
    ) -> tuple[np.ndarray | dict[str, np.ndarray], list[LanguageUpdate]]:
        """One frame: actions (robot units) and the language updates it advanced. A one-head policy returns one
        array `(action_horizon, action_dim)`; with several heads, a dict head name -> array (`action_heads`).

        Real-time chunking: `prev_actions` (robot units, `(n, action_dim)`; a dict per head for several heads) are the
        previous chunk's actions not yet executed when `obs` was taken, index 0 the next to run; the new chunk's
        index i is guided towards `prev_actions[i]` with weights 1 below `inference_delay` (control steps that
        pass while this call runs), ramping to 0 at `rtc.execution_horizon` (`self.rtc`). Without them act() is
        plain denoising. `on_actions(actions)`: called as soon as the action heads finish, before the frame's
        language decode steps, so actions can be dispatched while decoding runs.

        Numeric safety (policies/numeric_range.py): `state` and `prev_actions` must be finite and within +-1e6 robot
        units (ValueError naming the field). Actions that come out NaN or inf are never returned nor passed to
        `on_actions`: the frame completes (its language requests advance as usual) and act() raises
        `NonFiniteActionsError`; the policy stays usable."""
        entered = time.perf_counter()
        if self._closed:
            raise RuntimeError("policy is closed")
        prefix = self.model_inputs(obs)
        frame = self.frame
        noise = self.frame_noise(frame)
        guidance = self._guidance(prev_actions, inference_delay)
        new = [self._new_request(t, frame) for t in self.tasks if frame % t.every == 0]
        in_flight = self.engine.in_flight() + new
        now = time.perf_counter()
        k = self.budget.choose(
            len(in_flight), [r.remaining for r in in_flight], [now - self._started_at.get(r.request_id, now) for r in in_flight]
        )
        ready: dict = {}

        def dispatch(head_actions: dict[str, torch.Tensor]) -> None:
            per_head = {h: self._robot_actions(head_actions[h]) for h in self.action_heads}
            ready["actions"] = per_head[self.action_head] if len(per_head) == 1 else per_head
            ready["ms"] = (time.perf_counter() - entered) * 1e3
            try:
                check_finite_actions(per_head, guided=bool(guidance))
            except NonFiniteActionsError as e:  # withheld; raised once the engine has finished its frame
                ready["refused"] = e
                return
            if on_actions is not None:
                on_actions(ready["actions"])

        result = self.engine.run(FrameInput(frame, prefix, noise, new, guidance=guidance), k, on_actions=dispatch)
        self.frame += 1
        for r in new:
            self._started_at[r.request_id] = now
        self.budget.observe(result.stats.stage_ms, result.stats.batch_sizes, result.stats.stage_ms["decode"])
        if "actions" not in ready:  # an engine that did not call back (it must hand the actions out once)
            dispatch(result.head_actions)
        updates = [self._update(r, toks) for r, toks in result.advanced]
        self._record(result.stats, k, ready["ms"])
        if "refused" in ready:
            raise ready["refused"]
        return ready["actions"], updates

    def _guidance(self, prev_actions, inference_delay) -> dict:
        """Per head, the RTC guidance of this frame's `prev_actions` (see `act`)."""
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
        out = {}
        for h, prev in per_head.items():
            field = "prev_actions" if not isinstance(prev_actions, dict) else f"prev_actions[{h!r}]"
            a = check_prev_actions(prev, self.robot.action_dim, field)
            d = check_delay(inference_delay, self.head_chunks[h])
            g = chunk_guidance(
                a, d, config=self.rtc, chunk=self.head_chunks[h], model_dim=self._head_dims[h],
                default_horizon=self.horizon, robot=self.robot, normalizer=self.action_norm,
            )
            if g is not None:
                out[h] = g.to(self.model.device)
        return out

    def _robot_actions(self, model_actions: torch.Tensor) -> np.ndarray:
        """One head's `[1, chunk, dim]` model-space actions as `(horizon, robot action_dim)` in robot units."""
        a = model_actions[0, : self.horizon, : self.robot.action_dim].float().cpu().numpy()
        return self.robot.actions_from_model(self.action_norm.unnormalize(a)).astype(np.float32)

    def _new_request(self, task: LanguageTask, frame: int) -> Request:
        rid = self._next_request_id
        self._next_request_id += 1
        self._streams[rid] = TextStream(self.io.decode, frozenset({self.io.eos_id}))
        return Request(
            request_id=rid, task=task.name, frame=frame, prompt_ids=list(self._task_prompt_ids[task.name]),
            max_new_tokens=task.max_new_tokens, eos_id=self.io.eos_id, temperature=task.temperature,
            seed=_seed_for(self.seed, rid, 1), adapter=self.adapters.slot_of(task),
        )

    def _update(self, r: Request, tokens: list[int]) -> LanguageUpdate:
        stream = self._streams[r.request_id]
        delta = stream.push(tokens, r.done)
        if r.done:
            del self._streams[r.request_id]
            self._started_at.pop(r.request_id, None)
        return LanguageUpdate(r.request_id, r.task, r.frame, tuple(tokens), delta, stream.text, r.done)

    def _record(self, stats, k: int, obs_to_actions_ms: float) -> None:
        rec = {
            "frame": stats.frame,
            "frame_ms": stats.frame_ms,
            "obs_to_actions_ms": obs_to_actions_ms,  # act() entry -> actions handed out (on_actions)
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

    # ------------------------------------------------------------------ adapters
    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load a per-task LoRA adapter (a PEFT folder) at run time; the KV pool and in-flight requests are
        untouched. A task then uses it through `LanguageTask(adapter=name)`."""
        if self.mode == "parallel":
            raise ValueError("load_adapter: mode='parallel' runs language in a worker process; use another mode")
        self.adapters.load(name, path)

    def unload_adapter(self, name: str) -> None:
        """Free an adapter's slot; an error while an in-flight request or one of this policy's tasks uses it."""
        self.adapters.unload(name, self.engine.in_flight(), self.tasks)

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


def _select_heads(model_heads: list[str], heads) -> list[str]:
    """`heads` (None: all) checked against the model's, kept in the order given."""
    if heads is None:
        return list(model_heads)
    if isinstance(heads, str) or not heads:
        raise ValueError(f"heads: expected a non-empty list of head names out of {model_heads}, got {heads!r}")
    heads = list(heads)
    unknown = [h for h in heads if h not in model_heads]
    if unknown:
        raise ValueError(f"heads: unknown action head(s) {unknown}; this model has {model_heads}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"heads: names repeat in {heads}")
    return heads


def _check_replan_steps(value: object, horizon: int) -> int | None:
    """None, or the actions of each chunk to execute per call: an int in 1..horizon (act() returns `horizon`)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= horizon:
        raise ValueError(f"replan_steps must be an int in 1..{horizon} (the actions act() returns per call), "
                         f"got {value!r}")
    return int(value)


def _check_declared_tasks(tasks) -> tuple[LanguageTask, ...]:
    """A checkpoint's declared tasks as a tuple (read-only: server sessions share it), checked as `tasks` is."""
    if not isinstance(tasks, (list, tuple)):
        raise ValueError(f"declared_tasks: expected a list of LanguageTask, got {tasks!r}")
    for t in tasks:
        if not isinstance(t, LanguageTask):
            raise ValueError(f"declared_tasks must be LanguageTask objects, got {type(t).__name__}")
    if len({t.name for t in tasks}) != len(tasks):
        raise ValueError(f"declared_tasks: names must be unique, got {[t.name for t in tasks]}")
    return tuple(tasks)
