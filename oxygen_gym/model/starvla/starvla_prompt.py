"""StarVLA's prompt (`starVLA/model/modules/vlm/QWen3.py` `build_qwenvl_inputs`): one user turn holding every camera
image, then the instruction, with the generation prompt opened (`add_generation_prompt=True`). QwenPI_v3 and QwenOFT
append the robot state as bins (`add_discretized_state_to_instruction`): `"{instruction} [STATE] {bins} [ACTION]"`,
each dim digitised into 256 uniform bins over [-1, 1] (pi0.5's convention). A language task continues the shared
prefix as a follow-up user turn after the (empty) assistant turn it opened.
"""
from __future__ import annotations

from typing import Any

import numpy as np

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


def state_bins(state: np.ndarray, bins: int = 256) -> str:
    """QwenPI_v3 `state2str_transform`: `np.digitize(state, linspace(-1, 1, bins + 1)[:-1]) - 1`, space-joined."""
    return " ".join(map(str, np.digitize(state, bins=np.linspace(-1, 1, bins + 1)[:-1]) - 1))


def instruction_with_state(instruction: str, state: np.ndarray | None, bins: int = 256) -> str:
    if state is None:
        return instruction
    return f"{instruction} [STATE] {state_bins(state, bins)} [ACTION]"


def messages(instruction: str, images: list[Any] | None, n_images: int) -> list[dict[str, Any]]:
    """The user turn as processor content items (`images[i]` placed in slot i; None: placeholders)."""
    content: list[dict[str, Any]] = [
        {"type": "image"} if images is None else {"type": "image", "image": images[i]} for i in range(n_images)
    ]
    content.append({"type": "text", "text": instruction})
    return [{"role": "user", "content": content}]


def language_turn(prompt: str) -> str:
    """A language task after the prefix (which ends with the assistant turn opened): close it, ask, reopen."""
    return f"{IM_END}\n{IM_START}user\n{prompt.strip()}{IM_END}\n{IM_START}assistant\n"
