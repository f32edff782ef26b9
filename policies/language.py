"""Language tasks, the updates act() reports, and text deltas that are exact for multi-byte characters and
SentencePiece word boundaries (decode the whole sequence, emit what was added)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class LanguageTask:
    """A language request is started every `every` frames on that frame's shared prefix plus `prompt`.
    `adapter`: the name of a loaded LoRA adapter its prompt and generated tokens go through (None: base weights);
    the shared prefill and the action heads never see it."""

    name: str
    prompt: str
    max_new_tokens: int = 30
    every: int = 1
    temperature: float = 0.0
    adapter: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("LanguageTask.name must be a non-empty string")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"LanguageTask({self.name!r}).prompt must be a non-empty string")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ValueError(f"LanguageTask({self.name!r}).max_new_tokens must be a positive int, got {self.max_new_tokens!r}")
        if not isinstance(self.every, int) or self.every <= 0:
            raise ValueError(f"LanguageTask({self.name!r}).every must be a positive int, got {self.every!r}")
        if not self.temperature >= 0:
            raise ValueError(f"LanguageTask({self.name!r}).temperature must be >= 0, got {self.temperature!r}")
        if self.adapter is not None and (not isinstance(self.adapter, str) or not self.adapter):
            raise ValueError(f"LanguageTask({self.name!r}).adapter must be None or an adapter name, got {self.adapter!r}")


def task_prompt_ids(tokenizer, prompt: str) -> list[int]:
    """A language task's prompt as it continues the shared prefix: a leading space, the prompt, a newline.
    The trainer (train/dataset.py) builds its language targets with this same function."""
    return tokenizer.encode(" " + prompt.strip() + "\n")


@dataclass(frozen=True)
class LanguageUpdate:
    request_id: int
    task: str
    frame: int
    new_token_ids: tuple[int, ...]
    new_text: str
    text: str
    done: bool


class TextStream:
    """Turns a growing token sequence into text deltas whose concatenation is always the full text.

    Trailing replacement characters (an incomplete UTF-8 sequence from byte-fallback pieces) are held back
    until the bytes complete or the request ends.
    """

    def __init__(self, decode: Callable[[list[int]], str], skip_ids: frozenset[int] = frozenset()) -> None:
        self._decode = decode
        self._skip = skip_ids
        self.ids: list[int] = []
        self.text = ""

    def push(self, new_ids: list[int], done: bool) -> str:
        self.ids.extend(new_ids)
        full = self._decode([i for i in self.ids if i not in self._skip])
        stable = full if done else full.rstrip(REPLACEMENT)
        if not stable.startswith(self.text):  # decoding revised earlier text: keep what was emitted
            stable = self.text + stable[len(self.text) :] if len(stable) > len(self.text) else self.text
        delta = stable[len(self.text) :]
        self.text = stable
        return delta
