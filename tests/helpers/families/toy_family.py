"""The fifth model family, written only as a test fixture: what adding a family takes, and nothing more.

A family is its model (toy_mot_model.py: an `EngineModel`), its IO (`ModelIO`: observation -> prefix bundle, prompt
text -> ids) and one `PolicyFamily` record given to `register_family` (policies/family_api.py). No engine, policy,
eval or server file learns its name: `MultiTaskPolicy.from_pretrained("toy-mot")` finds it through the registry
(policies/model_io.py `registered_families`, which returns families registered outside the family table too).

A product family registers when its module is imported, from its line in policies/checkpoints/family_names.py. This
one registers only inside `registered()`, so the rest of a pytest session sees exactly the product's families
(tests/project/test_cli.py compares them with the CLI's list of built-in names).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from oxygen_gym.policies import normalize
from oxygen_gym.policies.family_api import REGISTERED, ModelIO, PolicyFamily, register_family
from oxygen_gym.policies.inputs import ObservationError
from oxygen_gym.policies.language import task_prompt_ids
from oxygen_gym.policies.robots import RobotSpec

from .toy_mot_model import ToyMoTModel, ToyPrefix, build_toy_mot

NAME = "toy-mot"  # the family's name and its one built-in (random-weight) model


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then BOS (256) and EOS (257): the toy's whole vocabulary."""

    bos_id, eos_id, vocab_size = 256, 257, 258

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        # an incomplete or invalid sequence decodes as U+FFFD, which policies/language.py TextStream holds back
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


class ToyIO(ModelIO):
    """Cameras into the model's image slots (resized to its side, scaled to [-1, 1]), the normalised state
    zero-padded to one token, the prompt as BOS + bytes; language tasks continue the prefix as pi0.5's do."""

    def __init__(
        self,
        model: ToyMoTModel,
        tokenizer: ByteTokenizer,
        *,
        robot: RobotSpec,
        camera_slots: dict[str, str] | None,
        state_normalizer: normalize.Normalizer,
        image_resize: str = "pil",
    ) -> None:
        """`camera_slots`: robot camera -> one of the model's `image_slots` (None: the robot's cameras in order)."""
        self.model, self.tokenizer, self.robot, self.state_norm = model, tokenizer, robot, state_normalizer
        slots = model.config.image_slots
        self.camera_slots = dict(camera_slots) if camera_slots is not None else dict(zip(robot.cameras, slots))
        unknown = sorted(set(self.camera_slots.values()) - set(slots))
        if unknown or len(set(self.camera_slots.values())) != len(self.camera_slots):
            raise ValueError(f"camera_slots: expected each camera in a distinct slot of {list(slots)}, got "
                             f"{self.camera_slots}")

    def prefix_inputs(self, images: dict[str, np.ndarray], state: np.ndarray, prompt: str) -> ToyPrefix:
        c, dev = self.model.config, self.model.device
        cams = [cam for cam in self.camera_slots if cam in images]
        side = (c.image_size, c.image_size)
        pixels = [torch.from_numpy(np.ascontiguousarray(images[cam])).permute(2, 0, 1)[None].float() for cam in cams]
        frames = torch.cat([F.interpolate(p, size=side, mode="bilinear", antialias=True) for p in pixels])
        frames = frames / 127.5 - 1.0
        slots = torch.tensor([[c.image_slots.index(self.camera_slots[cam]) for cam in cams]], dtype=torch.long)
        robot_state = self.state_norm.normalize(self.robot.state_to_model(state.astype(np.float32)))
        if robot_state.shape[0] > c.state_dim:
            raise ObservationError(f"obs['state']: {robot_state.shape[0]} dims, the toy model takes {c.state_dim}")
        padded = np.zeros(c.state_dim, np.float32)
        padded[: robot_state.shape[0]] = robot_state
        ids = [self.tokenizer.bos_id, *self.tokenizer.encode(prompt)]
        if len(ids) > c.max_prompt_tokens:
            raise ObservationError(f"obs['prompt']: {len(ids)} tokens with BOS; the toy model takes at most "
                                   f"{c.max_prompt_tokens}")
        length = len(cams) * c.patches + 1 + len(ids)
        return ToyPrefix(
            frames[None].to(dev, self.model.dtype), slots.to(dev), torch.from_numpy(padded)[None].to(dev, self.model.dtype),
            torch.tensor([ids], dtype=torch.long, device=dev), torch.tensor([length], dtype=torch.long, device=dev),
        )

    def task_prompt_ids(self, prompt: str) -> list[int]:
        return task_prompt_ids(self.tokenizer, prompt)


def build_builtin(name: str, robot: RobotSpec, device, dtype, overrides, seed: int) -> tuple[ToyMoTModel, ByteTokenizer, dict]:
    """The random-weight `toy-mot`: its own byte tokenizer, identity statistics. A built-in has no files, so of the
    checkpoint-convention overrides only `camera_map` applies; the others are refused, naming the field."""
    for field in ("tokenizer", "norm_stats", "asset_id", "discrete_state", "family"):
        if getattr(overrides, field) is not None:
            raise ValueError(f"{field}: the built-in {name!r} takes no {field} (it has no checkpoint files)")
    model = build_toy_mot(seed=seed, device=device, dtype=dtype)
    return model, ByteTokenizer(), dict(camera_slots=dict(overrides.camera_map) if overrides.camera_map else None)


TOY_FAMILY = PolicyFamily(NAME, ToyMoTModel, ToyIO, (NAME,), build_builtin)


@contextmanager
def registered() -> Iterator[PolicyFamily]:
    """The toy family registered for the duration (see the module docstring for why not at import)."""
    register_family(TOY_FAMILY)
    try:
        yield TOY_FAMILY
    finally:
        REGISTERED.pop(TOY_FAMILY.name, None)
