"""Benchmark inputs: model-ready observations shaped like each robot's, and language request arrivals.

Observations are synthetic and seeded: camera images already at the model's size (as the policy would resize them),
a state of the robot's size, and a LIBERO-style instruction, turned into the prefix exactly as `MultiTaskPolicy.act`
does (same camera slots and masks, same pi0.5 prompt with the discretised state). Every mode of a run sees the same
sequence: frame f uses observation f mod `num_observations` and noise seeded by (seed, f).

Requests generate exactly N tokens (`eos_id=-1`), so N is controlled. Each continues the shared prefix with a one-token
prompt by default (pi0.5's language head continues right after the prefix); `task_prompt` adds a longer one.

Arrival specs (`--workloads`):
  fixed[:R]        R new requests every frame (default 1): the paper's steady batch of N/k
  uniform:R        R requests per frame on average, evenly spaced (R may be fractional)
  poisson:R        Poisson(R) new requests per frame
  mixed:S/L[:p]    one request per frame, S tokens with probability p (default 0.5), else L (Fig. 7's short/long mix)
  soak             the D.3 fluctuating load: arrival counts repeat every 17 frames, lengths every 7 (10-90 tokens)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from oxygen_gym.engine.frame import FrameInput
from oxygen_gym.engine.model_api import EngineModel
from oxygen_gym.engine.request import Request
from oxygen_gym.model.tokenizer import builtin_tokenizer, tokenizer_for
from oxygen_gym.policies import normalize
from oxygen_gym.policies.model_io import io_for
from oxygen_gym.policies.robots import RobotSpec, get_robot

INSTRUCTIONS = (
    "pick up the black bowl between the plate and the ramekin and place it on the plate",
    "open the top drawer and put the bowl inside",
    "put the cream cheese in the bowl",
    "turn on the stove and put the moka pot on it",
    "pick up the alphabet soup and place it in the basket",
    "put both the alphabet soup and the tomato sauce in the basket",
    "stack the left bowl on the right bowl and place them in the tray",
    "push the plate to the front of the stove",
)
SOAK_ARRIVALS = (0, 1, 3, 4, 2, 1, 0, 0, 2, 5, 3, 1, 0, 4, 2, 1, 3)  # repeats every 17 frames
SOAK_LENGTHS = (10, 40, 60, 25, 90, 15, 50)  # repeats every 7 requests
KINDS = ("fixed", "uniform", "poisson", "mixed", "soak")
_OFFSET = 1 << 20  # frame indices are negative during warm-up; seeds must not be


class WorkloadError(ValueError):
    """A workload spec that cannot be parsed."""


@dataclass(frozen=True)
class Arrivals:
    """When requests arrive and how long each is. `lengths_at(frame, n)` is deterministic for a given seed."""

    kind: str
    rate: float = 1.0
    short: int = 0
    long: int = 0
    p_short: float = 0.5
    spec: str = "fixed"

    @staticmethod
    def parse(spec: str) -> "Arrivals":
        parts = spec.strip().split(":")
        kind = parts[0]
        try:
            if kind == "fixed" and len(parts) <= 2:
                rate = float(parts[1]) if len(parts) == 2 else 1.0
                if rate != int(rate) or rate < 0:
                    raise WorkloadError(f"workload {spec!r}: fixed:R needs a whole number R >= 0")
                return Arrivals("fixed", rate, spec=spec)
            if kind in ("uniform", "poisson") and len(parts) == 2:
                rate = float(parts[1])
                if not rate > 0:
                    raise WorkloadError(f"workload {spec!r}: the rate must be > 0")
                return Arrivals(kind, rate, spec=spec)
            if kind == "mixed" and len(parts) in (2, 3):
                short, long = (int(x) for x in parts[1].split("/"))
                p = float(parts[2]) if len(parts) == 3 else 0.5
                if not (0 < short and 0 < long and 0 <= p <= 1):
                    raise WorkloadError(f"workload {spec!r}: mixed:S/L[:p] needs S, L >= 1 and 0 <= p <= 1")
                return Arrivals("mixed", 1.0, short, long, p, spec=spec)
            if kind == "soak" and len(parts) == 1:
                return Arrivals("soak", spec=spec)
        except (TypeError, ValueError) as e:
            if isinstance(e, WorkloadError):
                raise
            raise WorkloadError(f"workload {spec!r}: {e}") from None
        raise WorkloadError(
            f"workload {spec!r}: expected one of fixed[:R], uniform:R, poisson:R, mixed:S/L[:p], soak"
        )

    @property
    def varies_n(self) -> bool:
        """Whether the sweep's N sets the request length (mixed and soak fix their own)."""
        return self.kind in ("fixed", "uniform", "poisson")

    def max_length(self, n: int) -> int:
        if self.kind == "mixed":
            return max(self.short, self.long)
        if self.kind == "soak":
            return max(SOAK_LENGTHS)
        return n

    def at(self, m: int, n: int, seed: int) -> list[int]:
        """Lengths of the requests arriving at measured-frame index `m` (negative during warm-up). A function of
        (seed, m) alone, so points with different warm-ups see the same arrivals on the same measured frame."""
        rng = np.random.default_rng([seed, 7, m + _OFFSET])
        if self.kind == "fixed":
            return [n] * int(self.rate)
        if self.kind == "uniform":
            return [n] * (math.floor((m + 1) * self.rate) - math.floor(m * self.rate))
        if self.kind == "poisson":
            return [n] * int(rng.poisson(self.rate))
        if self.kind == "mixed":
            return [self.short if rng.random() < self.p_short else self.long]
        count = SOAK_ARRIVALS[m % len(SOAK_ARRIVALS)]
        return [SOAK_LENGTHS[(3 * m + i) % len(SOAK_LENGTHS)] for i in range(count)]


def peak_in_flight(arrivals: Arrivals, n: int, k: int | None, frames: range, seed: int) -> int:
    """Most requests alive at once over `frames` when each stays ceil(length / k) frames (k=None: each finishes
    within its own frame). Sizes the KV pool a point needs."""
    alive: list[int] = []  # frames left per request
    peak = 0
    for m in frames:
        lengths = arrivals.at(m, n, seed)
        if k is None:
            peak = max(peak, len(lengths))
            continue
        alive += [math.ceil(x / k) for x in lengths]
        peak = max(peak, len(alive))
        alive = [a - 1 for a in alive if a > 1]
    return max(peak, 1)


@dataclass
class ObservationSet:
    """`count` model-ready observations of one robot, plus the frame noise and request factory. `prefixes` are the
    model family's own bundles (built by its policy IO, as act() builds them)."""

    robot: RobotSpec
    prefixes: list
    prefix_lengths: list[int]
    horizon: int
    action_dim: int
    task_prompt_ids: list[int]
    seed: int
    device: torch.device
    model_horizon: int
    instructions: list[str] = field(default_factory=list)
    heads: dict[str, tuple[int, int]] = field(default_factory=dict)  # head -> (horizon denoised, action_dim)

    @property
    def max_prefix_len(self) -> int:
        return max(self.prefix_lengths)

    def noise(self, frame: int) -> torch.Tensor:
        """The first head's action noise for (measured-)frame index `frame`, negative during warm-up."""
        return self._noise(frame, 0, self.horizon, self.action_dim)

    def head_noise(self, frame: int, experts: int) -> dict[str, torch.Tensor]:
        """Noise of the model's first `experts` heads (the first head's is `noise(frame)`)."""
        names = list(self.heads)[:experts]
        if len(names) < experts:
            raise ValueError(f"--heads: the model has {len(self.heads) or 1} action head(s), {experts} asked")
        return {h: self._noise(frame, i, *self.heads[h]) for i, h in enumerate(names)}

    def _noise(self, frame: int, head_index: int, horizon: int, dim: int) -> torch.Tensor:
        entropy = [self.seed, frame + _OFFSET] + ([head_index] if head_index else [])
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence(entropy).generate_state(1)[0]))
        return torch.randn(1, horizon, dim, generator=gen).to(self.device)

    def frame_input(self, frame: int, lengths: list[int], first_id: int, experts: int = 1) -> FrameInput:
        requests = [
            Request(first_id + i, "narrate", frame, list(self.task_prompt_ids), max_new_tokens=n, eos_id=-1)
            for i, n in enumerate(lengths)
        ]
        noise = self.noise(frame) if experts == 1 else self.head_noise(frame, experts)
        return FrameInput(frame, self.prefixes[frame % len(self.prefixes)], noise, requests)

    def capacity(self, max_new_tokens: int) -> int:
        """Cache positions one slot needs: the longest prefix, then the action tokens (the scheduler reserves the
        model's full action horizon) or the request's text."""
        actions = max(self.horizon, self.model_horizon)
        return self.max_prefix_len + max(actions, len(self.task_prompt_ids) - 1 + max_new_tokens)


def make_observations(
    model: EngineModel,
    robot: str,
    *,
    count: int = 8,
    seed: int = 0,
    task_prompt: str | None = None,
    horizon: int | None = None,
    tokenizer=None,
    image_size: int | None = None,
) -> ObservationSet:
    """Seeded synthetic observations for `robot` (`libero` 2 cameras, `droid` 2, `aloha` 3, all present), turned into
    the model's prefix by its family's policy IO (policies/model_io.py). `tokenizer`: the model's (None: the built-in
    pi0.5 tokenizer that fits its vocabulary); `image_size`: camera images' side (None: the model's input size)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    spec = get_robot(robot)
    tok = tokenizer if tokenizer is not None else _tokenizer(model.config.vocab_size)
    io = io_for(model, tok, robot=spec, camera_slots=None, state_normalizer=normalize.Normalizer("IDENTITY"))
    rng = np.random.default_rng([seed, 1])
    size = image_size or model.image_size
    prefixes, lengths, instructions = [], [], []
    for i in range(count):
        images = {cam: rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for cam in spec.cameras}
        state = rng.uniform(-1.0, 1.0, spec.state_dim).astype(np.float32)
        instruction = INSTRUCTIONS[i % len(INSTRUCTIONS)]
        prefix = io.prefix_inputs(images, state, instruction)
        prefixes.append(prefix)
        lengths.append(model.prefix_length(prefix))
        instructions.append(instruction)
    if task_prompt:
        prompt_ids = io.task_prompt_ids(task_prompt)
    else:
        prompt_ids = tok.encode("\n")[-1:]
    heads = model.action_heads
    first = next(iter(heads.values()))
    h = int(horizon or spec.horizon)
    per_head = {name: (h if i == 0 else min(h, a.horizon), a.action_dim) for i, (name, a) in enumerate(heads.items())}
    return ObservationSet(
        spec, prefixes, lengths, h, first.action_dim, prompt_ids, seed, model.device, first.horizon, instructions, per_head,
    )


def _tokenizer(vocab_size: int):
    """The built-in tokenizer when its ids fit the model (a random `pi05` has no PaliGemma tokenizer to load)."""
    try:
        return tokenizer_for(vocab_size)
    except ValueError:
        tok = builtin_tokenizer()
        if tok.vocab_size > vocab_size:
            raise
        return tok
