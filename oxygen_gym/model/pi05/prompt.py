"""Model inputs from raw observations: the tokenized prompt and the preprocessed camera images.

Prompt (openpi `PaligemmaTokenizer.tokenize`, lerobot `Pi05PrepareStateTokenizerProcessorStep`):
- discrete state (pi0.5): BOS + `Task: {cleaned}, State: {bins};\\nAction: `, where bins are the state, normalised
  to [-1, 1], cut into 256 bins: `np.digitize(state, np.linspace(-1, 1, 257)[:-1]) - 1`, space separated.
  lerobot zero-pads the state to `max_state_dim` (32) before binning; openpi bins the unpadded robot state
  (`state_pad_to=None`).
- otherwise (pi0 form, e.g. openpi's pi05_libero): BOS + cleaned instruction, then `\\n` encoded on its own.
`cleaned` = instruction stripped, with `_` and newlines turned into spaces. Right-padded with 0 to `max_len`.

Images: uint8 `(H, W, 3)` -> resize with padding to 224 x 224 (keep the aspect ratio, pad black, centred) with PIL
bilinear on uint8 (openpi's client `image_tools.resize_with_pad`) or, for lerobot checkpoints, torch bilinear without
antialias on float (lerobot's `resize_with_pad_torch`) -> float in [-1, 1], `(3, 224, 224)`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..image_resize import resize_with_pad, resize_with_pad_torch  # noqa: F401 - pi0.5's names too
from ..tokenizer import Tokenizer

STATE_BINS = 256
MAX_STATE_DIM = 32  # lerobot's max_state_dim


def clean_instruction(instruction: str) -> str:
    if not isinstance(instruction, str):
        raise ValueError(f"prompt must be a str, got {type(instruction).__name__}")
    return instruction.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state, pad_to: int | None = MAX_STATE_DIM) -> np.ndarray:
    """256-bin indices (0..255) of a state already normalised to [-1, 1], zero-padded to `pad_to` first."""
    state = np.asarray(state, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(state)):
        raise ValueError(f"state must be finite, got {state}")
    if pad_to is not None:
        if state.size > pad_to:
            raise ValueError(f"state has {state.size} dims, more than the model's {pad_to}")
        state = np.pad(state, (0, pad_to - state.size))
    return np.digitize(state, bins=np.linspace(-1, 1, STATE_BINS + 1)[:-1]) - 1


def prompt_text(instruction: str, state=None, state_pad_to: int | None = MAX_STATE_DIM) -> str:
    """The pi0.5 prompt string (without BOS); with `state=None`, the pi0 form without the trailing newline."""
    cleaned = clean_instruction(instruction)
    if state is None:
        return cleaned
    bins = " ".join(map(str, discretize_state(state, state_pad_to)))
    return f"Task: {cleaned}, State: {bins};\nAction: "


def prompt_ids(
    tokenizer: Tokenizer, instruction: str, state=None, discrete_state: bool = True, state_pad_to: int | None = MAX_STATE_DIM
) -> list[int]:
    """Token ids of the prompt, BOS first, unpadded."""
    if discrete_state:
        if state is None:
            raise ValueError("state is required for a discrete-state (pi0.5) prompt")
        return tokenizer.encode(prompt_text(instruction, state, state_pad_to), bos=True)
    # pi0 form: "\n" is tokenized on its own as the "start of answer" token, as openpi does.
    return tokenizer.encode(clean_instruction(instruction), bos=True) + tokenizer.encode("\n")


def _clipped(text: str, limit: int = 200) -> str:
    """`repr(text)` of at most `limit` characters: errors name the prompt without echoing all of it."""
    shown = repr(text[:limit])
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def tokenize_prompt(
    tokenizer: Tokenizer,
    instruction: str,
    state=None,
    max_len: int = 200,
    discrete_state: bool = True,
    state_pad_to: int | None = MAX_STATE_DIM,
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int64 `(max_len,)`, mask bool `(max_len,)`), right-padded with 0. Too long is a ValueError."""
    ids = prompt_ids(tokenizer, instruction, state, discrete_state, state_pad_to)
    if len(ids) > max_len:
        raise ValueError(
            f"prompt is {len(ids)} tokens, over the model's limit of max_token_len={max_len}: {_clipped(instruction)}"
        )
    tokens = np.zeros(max_len, dtype=np.int64)
    tokens[: len(ids)] = ids
    mask = np.zeros(max_len, dtype=bool)
    mask[: len(ids)] = True
    return tokens, mask


def preprocess_image(image: np.ndarray, size: int = 224, resize: str = "pil") -> torch.Tensor:
    """uint8 `(H, W, 3)` camera image -> float32 `(3, size, size)` in [-1, 1] (SigLIP's input range).
    `resize`: "pil" (openpi's client, uint8 PIL bilinear) or "torch" (lerobot's policy, float torch bilinear)."""
    if resize == "torch":
        return resize_with_pad_torch(image, size, size) * 2.0 - 1.0
    if resize != "pil":
        raise ValueError(f"resize must be 'pil' or 'torch', got {resize!r}")
    img = resize_with_pad(image, size, size)
    x = torch.from_numpy(img.astype(np.float32)).permute(2, 0, 1)
    return x / 255.0 * 2.0 - 1.0


def missing_image(size: int = 224) -> torch.Tensor:
    """The stand-in for an absent camera: all -1 (its tokens are masked out)."""
    return torch.full((3, size, size), -1.0)
