"""The checkpoint-convention overrides: every argument that sets a convention the checkpoint's files would otherwise
decide (or leave to a guess), in one frozen record.

`MultiTaskPolicy.from_pretrained(..., tokenizer=, norm_stats=, ...)` takes them as keyword arguments and builds this
record once; `resolve_conventions`, `oxygen-gym inspect`, `eval`, `demo` and `serve` pass the record along, and the
command lines get the same flags from `add_arguments` / `from_args`. A field left None means "the checkpoint's own
value, or its family's default with a warning naming the field".
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .family_names import CHECKPOINT_FAMILY_NAMES


IMAGE_RESIZES = ("pil", "torch")  # PIL bilinear on uint8 (openpi's client) | torch bilinear, no antialias (lerobot)


class OverrideError(ValueError):
    """An override no checkpoint can use; `field` names it (the CLIs turn it into the flag's name)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ConventionOverrides:
    """One value per convention a caller may impose on a checkpoint; None = the checkpoint decides."""

    tokenizer: Any = None  # pi0.5: PaliGemma SentencePiece model (path or object); XR0: a Qwen tokenizer (folder or object)
    norm_stats: Any = None  # a dict, a path (norm_stats.json, a stats folder; XR0: preprocessor_config.json), or "identity"
    asset_id: str | None = None  # openpi: which assets/<id>/norm_stats.json; XR0: which robot_type's statistics
    camera_map: dict[str, str] | None = None  # robot camera -> checkpoint image feature
    discrete_state: bool | None = None  # state bins in the prompt
    action_horizon: int | None = None  # actions denoised
    family: str | None = None  # which project wrote the checkpoint (model_io.checkpoint_family_names()), not detected
    image_resize: str | None = None  # one of IMAGE_RESIZES
    revision: str | None = None  # hub revision of a hub id
    vlm_config: Any = None  # StarVLA: the backbone's folder (its config.json + tokenizer), when not found offline
    heads: tuple[str, ...] | None = None  # StarVLA: which of the checkpoint's action heads to load (serve's --heads)

    def __post_init__(self) -> None:
        _check(self)
        if self.camera_map is not None:  # a copy: the caller's dict may change later, the record may not
            object.__setattr__(self, "camera_map", dict(self.camera_map))
        if self.heads is not None:
            object.__setattr__(self, "heads", tuple(self.heads))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in order: from_pretrained's keyword arguments for checkpoint conventions."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ConventionOverrides:
        """From keyword arguments named as the fields; an unknown name is a TypeError, as in a function call."""
        unknown = sorted(set(kwargs) - set(cls.names()))
        if unknown:
            raise TypeError(f"unknown checkpoint-convention override(s) {unknown}; expected some of {cls.names()}")
        return cls(**kwargs)

    def replace(self, **changes: Any) -> ConventionOverrides:
        """A copy with `changes` applied (validated like the constructor)."""
        return ConventionOverrides.from_kwargs(**{**self.as_kwargs(), **changes})

    def as_kwargs(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """The fields that are set (None ones left out), optionally only `names`: keyword arguments for
        `from_pretrained` / `resolve_conventions`, or the convention fields of an `EvalConfig`."""
        return {n: getattr(self, n) for n in (self.names() if names is None else names) if getattr(self, n) is not None}

    # ------------------------------------------------------------------ the command-line flags
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, *, vlm_config: bool = True) -> None:
        """The checkpoint-convention flags of inspect, eval, demo and serve (dest = the field name). `vlm_config`:
        offer --vlm-config (eval and demo record no backbone folder in their results, so they leave it out)."""
        g = parser.add_argument_group("checkpoint conventions (each overrides a value read or guessed from the checkpoint)")
        g.add_argument("--tokenizer", default=None, metavar="PATH",
                       help="PaliGemma SentencePiece model (file, or folder holding tokenizer.model); XR0: a Qwen "
                            "tokenizer folder (tokenizer.json / tokenizer_config.json)")
        g.add_argument("--norm-stats", default=None, metavar="PATH|identity",
                       help="normalisation statistics (norm_stats.json or a folder), or 'identity' to run unnormalised")
        g.add_argument("--asset-id", default=None,
                       help="openpi: which assets/<id>/norm_stats.json to use; XR0: which robot_type's statistics in "
                            "preprocessor_config.json")
        g.add_argument("--camera-map", default=None, metavar="CAM=FEATURE,...",
                       help="robot camera -> checkpoint image feature, e.g. base=image,wrist=image2")
        ds = g.add_mutually_exclusive_group()
        ds.add_argument("--discrete-state", dest="discrete_state", action="store_const", const=True, default=None,
                        help="put the state bins in the prompt (pi0.5's format)")
        ds.add_argument("--no-discrete-state", dest="discrete_state", action="store_const", const=False,
                        help="prompt without state (openpi's pi05_libero)")
        g.add_argument("--action-horizon", type=int, default=None, help="actions denoised (default: the checkpoint's chunk)")
        if vlm_config:
            g.add_argument("--vlm-config", default=None, metavar="PATH",
                           help="StarVLA: the backbone folder (config.json + tokenizer) its config.yaml names by hub id")
        g.add_argument("--family", default=None,
                       help="override the detected family: ours, lerobot<=0.4.4, lerobot>=0.5, openpi, "
                            "openpi-training, xr0, starvla")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ConventionOverrides:
        """The record from the flags `add_arguments` added; a ValueError names the flag that is wrong."""
        # `heads` has no flag here: a command that selects heads (serve's --heads) passes them to from_pretrained itself
        values = {n: getattr(args, n, None) for n in cls.names() if n != "heads"}
        values["camera_map"] = parse_camera_map(values["camera_map"])
        try:
            return cls(**values)
        except OverrideError as e:
            raise ValueError(f"--{e.field.replace('_', '-')}: {e}") from None


def parse_camera_map(text: str | None) -> dict[str, str] | None:
    """`base=image,wrist=image2` -> {"base": "image", "wrist": "image2"}."""
    if text is None:
        return None
    out = {}
    for part in text.split(","):
        cam, sep, feat = part.partition("=")
        if not sep or not cam.strip() or not feat.strip():
            raise ValueError(f"--camera-map: {part!r} is not CAMERA=FEATURE (e.g. base=image,wrist=image2)")
        out[cam.strip()] = feat.strip()
    return out


def _check(o: ConventionOverrides) -> None:
    """Values no checkpoint can use fail here, before any file is read."""
    if o.discrete_state is not None and not isinstance(o.discrete_state, (bool, np.bool_)):
        raise OverrideError("discrete_state", f"discrete_state must be True, False or None, got {o.discrete_state!r}")
    h = o.action_horizon
    if h is not None and (isinstance(h, bool) or not isinstance(h, int) or h < 1):
        raise OverrideError("action_horizon", f"action_horizon must be a positive int or None, got {h!r}")
    if o.family is not None:
        if o.family not in CHECKPOINT_FAMILY_NAMES:
            raise OverrideError("family", f"family must be one of {CHECKPOINT_FAMILY_NAMES}, got {o.family!r}")
    if o.image_resize is not None and o.image_resize not in IMAGE_RESIZES:
        raise OverrideError("image_resize", f"image_resize must be one of {IMAGE_RESIZES}, got {o.image_resize!r}")
    for name in ("asset_id", "revision"):
        value = getattr(o, name)
        if value is not None and not isinstance(value, str):
            raise OverrideError(name, f"{name} must be a str, got {type(value).__name__}")
    if o.camera_map is not None and not isinstance(o.camera_map, Mapping):
        raise OverrideError("camera_map", f"camera_map must be a dict robot camera -> checkpoint image feature, got "
                                          f"{type(o.camera_map).__name__}")
    if o.vlm_config is not None and not isinstance(o.vlm_config, (str, os.PathLike)):
        raise OverrideError("vlm_config", f"vlm_config must be a folder path, got {type(o.vlm_config).__name__}")
    h = o.heads
    if h is not None and (isinstance(h, str) or not isinstance(h, Iterable) or not list(h)
                          or not all(isinstance(x, str) for x in h)):  # names are checked against the model's
        raise OverrideError("heads", f"heads: expected a non-empty list of head names, got {h!r}")
    if o.norm_stats is not None and not isinstance(o.norm_stats, (str, os.PathLike, Mapping)):
        raise OverrideError("norm_stats", f"norm_stats must be a dict, a path or 'identity', got "
                                          f"{type(o.norm_stats).__name__}")
