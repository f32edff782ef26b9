"""Real callables and a real env for the live-control tests: policies whose chunks are traceable action by action,
and a wrapper that records what the simulator was actually given."""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class ChunkPolicy:
    """Each call returns a (horizon, dim) chunk of distinct actions, drawn from the observation and the call count, and
    remembers which (call, index) every action is. `sleep_s`: a deliberately slow policy (seconds per call, or a
    list cycled through). `rtc=True` makes act() take prev_actions / inference_delay and copy the first d previous
    actions into the new chunk (what guidance aims for), and records what it was given."""

    def __init__(self, horizon: int = 8, dim: int = 2, sleep_s=0.0, rtc: bool = False, frame_decode_steps: int = 0):
        self.horizon, self.dim, self.rtc = horizon, dim, rtc
        self.sleeps = list(sleep_s) if isinstance(sleep_s, (list, tuple)) else [sleep_s]
        self.frame_decode_steps = frame_decode_steps
        self.identity: dict[bytes, tuple[int, int]] = {}
        self.chunks: list[np.ndarray] = []
        self.given: list[dict] = []
        self.calls = 0
        self.last_frame = None

    def reset(self, seed=None):
        pass

    def _chunk(self, obs) -> np.ndarray:
        seed = int(abs(float(np.asarray(obs, dtype=np.float64).sum())) * 1e6) % 2**32 + 7919 * self.calls
        return np.random.default_rng(seed).uniform(-0.9, 0.9, (self.horizon, self.dim)).astype(np.float32)

    def _finish(self, chunk: np.ndarray):
        call = self.calls
        for i, a in enumerate(chunk):
            self.identity.setdefault(a.tobytes(), (call, i))
        self.chunks.append(chunk)
        self.calls += 1
        self.last_frame = {"frame": call, "frame_ms": 0.0, "stage_ms": {}, "tokens": 0,
                           "batch_sizes": [1] * self.frame_decode_steps}
        time.sleep(self.sleeps[call % len(self.sleeps)])
        return chunk.copy(), []

    def act(self, obs):
        if self.rtc:
            raise TypeError("this ChunkPolicy expects act(obs, prev_actions=..., inference_delay=...)")
        return self._finish(self._chunk(obs))


class RtcChunkPolicy(ChunkPolicy):
    """ChunkPolicy with the RTC arguments; on_actions reports the chunk before a simulated decode of `decode_s`."""

    def __init__(self, *args, decode_s: float = 0.0, **kwargs):
        super().__init__(*args, rtc=True, **kwargs)
        self.decode_s = decode_s

    def act(self, obs, prev_actions=None, inference_delay=0, on_actions=None):
        chunk = self._chunk(obs)
        self.given.append({"prev_actions": None if prev_actions is None else np.array(prev_actions),
                           "inference_delay": inference_delay})
        if prev_actions is not None:
            d = int(inference_delay)
            chunk[:d] = np.asarray(prev_actions)[:d]
        out = self._finish(chunk)
        if on_actions is not None:
            on_actions(out[0])
        time.sleep(self.decode_s)
        return out


class ActionLog(gym.Wrapper):
    """Records every action the simulator steps with (below the live clock)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.actions: list[np.ndarray] = []

    def reset(self, **kwargs):
        self.actions = []
        return self.env.reset(**kwargs)

    def step(self, action):
        self.actions.append(np.array(action, dtype=np.float32))
        return self.env.step(action)


def reacher() -> gym.Env:
    """A cheap real MuJoCo env (2-d torque action in [-1, 1], dt 0.02 s) with a step limit well above the tests'."""
    return gym.make("Reacher-v5", max_episode_steps=1000)
