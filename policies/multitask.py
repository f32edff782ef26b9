"""MultiTaskPolicy: `act(obs) -> (actions, language_updates)` over one shared KV cache (docs/api.md).

A `MultiTaskPolicy` is a shared `Policy` (policies/policy.py: model, engine, pool, tokenizer, normalisers) with one
`PolicySession` of its own (policies/policy_session.py: frame counter, seed, in-flight language, stats), so
`policy.act(obs)` is one robot's call; `session(engine)` makes another robot's session over the same policy. Its
options are one `PolicyConfig` (policies/policy_config.py), given whole (`config=`) or by keyword.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from oxygen_gym.engine.model_api import EngineModel
from oxygen_gym.engine.stats import FrameLog

from .language import LanguageUpdate
from .model_io import builtin_names, checkpoint_family, family_of_builtin
from .policy import Policy
from .policy_config import POLICY_MODES, PolicyConfig  # noqa: F401 - POLICY_MODES: its old home
from .policy_session import PolicySession
from .robots import RobotSpec
from .seeds import head_noise_seed  # noqa: F401 - imported from here by callers
from .seeds import seed_for as _seed_for  # noqa: F401 - the old private name

from .checkpoints.overrides import ConventionOverrides

if TYPE_CHECKING:
    from .frame_engine import FrameEngine


class _Unset:
    """A keyword not given: the `PolicyConfig`'s value (or its default) holds."""

    def __repr__(self) -> str:
        return "<the config's>"


UNSET = _Unset()
# from_pretrained keywords that go to the constructor as given: what a checkpoint's family otherwise resolves
RESOLVED_KEYWORDS = ("camera_slots", "state_normalizer", "action_normalizer", "model_io")


class MultiTaskPolicy(Policy):
    """Actions every call, plus language from the same observation through one shared prefill.

    Use `from_pretrained`; the constructor takes an already-built model.
    """

    def __init__(self, model: EngineModel, tokenizer: Any, *, config: PolicyConfig | None = None, **kwargs: Any) -> None:
        """`config`: the policy's options (`PolicyConfig`); keywords of the same names override it, as do the
        resolved keywords a checkpoint's family passes (`Policy`). `action_horizon`: actions act() returns (default:
        the robot's); `chunk`: actions denoised (default `action_horizon`; a checkpoint's own chunk via
        from_pretrained). `heads`: the action heads act() runs and returns (default: every head of the model, in its
        order); a head other than the model's first denoises min(chunk, its own horizon) actions. `camera_slots`:
        robot camera -> model image slot (default: the robot's openpi slots). Normalisers default to openpi's
        quantiles over `norm_stats`. `model_io`: the family's observation and text conventions (default: the one
        registered for the model's class, policies/model_io.py). `rtc`: how `act(obs, prev_actions=...)` inpaints a
        chunk (real-time chunking, engine/rtc.py; default `RTCConfig()`). `adapters`: per-task LoRA adapters, name ->
        PEFT folder (a task names one with `LanguageTask(adapter=)`); `merge_adapters`: PEFT folders over the whole
        model, merged into the weights first (policies/task_adapters.py). `noise_scale`: scale of the flow-matching
        heads' starting noise (policies/action_noise.py: 1 = the reference sampler, 0 = one deterministic chunk per
        observation), or one scale per action dimension (a head's first n dims; the rest keep 1). `replan_steps`:
        actions of each chunk to execute per call (1..action_horizon; None: not said), read by `envs.run_episode`
        and the server's metadata; `declared_tasks`: the language tasks the checkpoint was trained to answer
        (from_pretrained fills both from config.json)."""
        super().__init__(model, tokenizer, config=config, **kwargs)
        # the policy's own robot: its engine, and the decode budget object itself (as `policy.budget` always was)
        self._session = PolicySession(self, None, seed=self.default_seed, budget=self.budget,
                                      pool_bytes=self._pool_bytes)

    # ------------------------------------------------------------------ the own session
    @property
    def seed(self) -> int:
        """Frame t's action noise comes from (seed, t), request r's sampling from (seed, r); `reset(seed=)` sets it."""
        return self._session.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._session.seed = int(value)

    @property
    def frame(self) -> int:
        """The next frame's index."""
        return self._session.frame

    @property
    def last_frame(self) -> dict | None:
        """The last call's record (docs/api.md)."""
        return self._session.last_frame

    @property
    def _records(self) -> FrameLog:
        return self._session._records

    @_records.setter
    def _records(self, log: FrameLog) -> None:
        self._session._records = log

    def session(self, engine: FrameEngine | None) -> PolicySession:
        """A session for one more robot over a shared `engine` (a `FrameEngine`, as the server's; None: this policy's
        own). It shares this policy's model, tokenizer, robot, tasks and normalisers (read-only) and has its own
        frame counter, request ids, text streams, decode budget and stats, seeded as this policy is now; it holds no
        KV pool of its own."""
        return self.new_session(engine, seed=self.seed, budget=self.budget, window=self._records.window)

    def frame_noise(self, frame: int, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Each head's noise `[1, chunk, action_dim]` for `frame`, from a generator seeded by (seed, frame, head),
        times `noise_scale` (per action dimension where it is a sequence). `seed` None: this policy's."""
        return super().frame_noise(frame, self.seed if seed is None else seed)

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
        return self._session.act(obs, prev_actions=prev_actions, inference_delay=inference_delay, on_actions=on_actions)

    def reset(self, seed: int | None = None) -> None:
        """Episode boundary: drop in-flight requests; the frame counter restarts at 0. A new `seed` changes the
        action noise and sampling from here on (a built-in model's weights stay those of the original seed)."""
        self._session.reset(seed)

    def stats(self) -> dict:
        """Means and rates over every frame since construction; `frame_ms` p50/p99 over the last
        `self._records.window` frames (the log keeps only those, so a long run's memory stays flat)."""
        return self._session.stats()

    def close(self) -> None:
        self._session.close()
        self.close_engine()

    def __enter__(self) -> MultiTaskPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a constructor that failed half way
            pass

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path = "tiny",
        *,
        config: PolicyConfig | None = None,
        robot: str | RobotSpec = UNSET,
        tasks: Any = UNSET,
        decode_budget: int | str = UNSET,
        target_action_hz: float | None = UNSET,
        language_deadline_s: float | None = UNSET,
        mode: str = UNSET,
        device: str = UNSET,
        dtype: torch.dtype | str | None = UNSET,
        seed: int = UNSET,
        tokenizer: Any = None,
        norm_stats: Any = None,
        asset_id: str | None = None,
        camera_map: dict | None = None,
        discrete_state: bool | None = None,
        action_horizon: int | None = None,
        family: str | None = None,
        image_resize: str | None = None,
        revision: str | None = None,
        vlm_config: str | Path | None = None,
        heads: list[str] | tuple[str, ...] | None = None,
        noise_scale: Any = UNSET,
        adapters: dict[str, str | Path] | list[str] | None = UNSET,
        rtc: Any = UNSET,
        replan_steps: int | None = UNSET,
        **kwargs: Any,
    ) -> MultiTaskPolicy:
        """A built-in model name (`tiny`, `small`, `pi05`: random weights from `seed`), a shipped trained model
        (`libero-spatial`, model/trained.py), or a checkpoint folder / hub id: pi0.5 of any family that
        policies/checkpoints knows (ours, lerobot, openpi), or Xiaomi-Robotics-0 (`xr0`: its config.json has
        MiBoTConfig's fields; `asset_id=` selects its robot_type's statistics). `config`: the options as one
        `PolicyConfig`; keywords (its field names, and the convention overrides' names: `tokenizer=`,
        `norm_stats=`, `asset_id=`, `camera_map=`, `discrete_state=`, `action_horizon=`, `family=`,
        `image_resize=`, `revision=`, `vlm_config=`; None there: the record's) override it. The folder's family is told from its files by the
        registry (policies/model_io.py `checkpoint_family`; `family=` names it instead). A checkpoint's cameras,
        normalisation, chunk, prompt format and tokenizer are resolved before its weights load, as its authors' own
        eval does; every guess is a `CheckpointGuessWarning` naming the argument that overrides it (`oxygen-gym
        inspect` lists them). What a checkpoint declares for its own execution in config.json is used unless given:
        `noise_scale=` (None: its `noise_scale`, else 1; policies/checkpoints/noise_scale.py), `replan_steps=`
        (None: its `replan_steps`, else None; policies/checkpoints/replan_steps.py); its `language_tasks` become
        `declared_tasks` (policies/checkpoints/language_tasks.py). `adapters=`: per-task LoRA adapters, {name: PEFT
        folder} or a list of the checkpoint's own `adapters/<name>/`; `rtc=`: the `RTCConfig` of
        `act(prev_actions=)`. A StarVLA run folder (`starvla`: config.yaml + checkpoints/) takes `vlm_config=` (its
        backbone's folder, when not in the Hugging Face cache) and `heads=` (load only these)."""
        import warnings

        from oxygen_gym.model.pi05.init import default_dtype
        from oxygen_gym.model.pi05.loading import CONFIG_FILE, CheckpointError

        from . import task_adapters
        from .checkpoints import CheckpointGuessWarning, checkpoint_root
        from .checkpoints.language_tasks import declared_language_tasks
        from .checkpoints.noise_scale import resolved_noise_scale
        from .checkpoints.replan_steps import declared_replan_steps

        named = dict(
            robot=robot,
            tasks=tasks,
            decode_budget=decode_budget,
            target_action_hz=target_action_hz,
            language_deadline_s=language_deadline_s,
            mode=mode,
            device=device,
            dtype=dtype,
            seed=seed,
            tokenizer=tokenizer,
            norm_stats=norm_stats,
            asset_id=asset_id,
            camera_map=camera_map,
            discrete_state=discrete_state,
            action_horizon=action_horizon,
            family=family,
            image_resize=image_resize,
            revision=revision,
            vlm_config=vlm_config,
            heads=heads,
            noise_scale=noise_scale,
            adapters=adapters,
            rtc=rtc,
            replan_steps=replan_steps,
        )
        # UNSET, and None for a convention (None there = the checkpoint's own): the record's value holds
        kwargs.update({k: v for k, v in named.items()
                       if v is not UNSET and not (v is None and k in ConventionOverrides.names())})
        config = config if config is not None else PolicyConfig()
        if not isinstance(config, PolicyConfig):
            raise ValueError(f"config: expected a PolicyConfig, got {type(config).__name__}")
        given = {k: kwargs.pop(k) for k in RESOLVED_KEYWORDS if k in kwargs}  # straight to the constructor
        if kwargs:
            config = config.replace(**kwargs)
        robot_spec = config.robot_spec()
        # the heads act() runs (a StarVLA checkpoint also loads only these)
        overrides = config.conventions.replace(heads=config.heads)
        dev = config.torch_device()
        dtype = config.torch_dtype() or default_dtype(dev)
        config = config.replace(robot=robot_spec)
        if isinstance(name_or_path, str) and name_or_path in builtin_names():
            return cls._builtin(name_or_path, robot_spec, dev, dtype, overrides, config=config, given=given)
        root = checkpoint_root(name_or_path, overrides.revision)
        # what config.json declares for the checkpoint's own execution, read (and checked) before any weight: the
        # given scale, else its sampling noise, else 1; its replan_steps unless given; its language tasks
        noise_scale = resolved_noise_scale(root, config.noise_scale)
        declared_replan = declared_replan_steps(root) if config.replan_steps is None else None
        declared_tasks = declared_language_tasks(root)
        model, tok, family_kwargs, conv = checkpoint_family(root, overrides.family).load(
            root, robot_spec, overrides, dev, dtype
        )
        for message in conv.warnings:
            warnings.warn(f"{conv.root.name}: {message}", CheckpointGuessWarning, stacklevel=2)
        # a list names the checkpoint's own adapters/<name>/ folders
        adapters = task_adapters.checkpoint_adapters(root, config.adapters)
        policy = cls(
            model, tok, config=config.replace(noise_scale=noise_scale, adapters=adapters),
            declared_tasks=declared_tasks, **{**family_kwargs, **given},
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
    def _builtin(cls, name: str, robot: RobotSpec, dev, dtype, overrides: ConventionOverrides, *,
                 config: PolicyConfig, given: dict) -> MultiTaskPolicy:
        """A random-weight built-in model of any registered family (policies/model_io.py)."""
        model, tok, family_kwargs = family_of_builtin(name).build_builtin(name, robot, dev, dtype, overrides, config.seed)
        family_kwargs.setdefault("action_horizon", overrides.action_horizon)
        return cls(model, tok, config=config, **{**family_kwargs, **given})
