"""Text <-> token ids. Two SentencePiece models with the same conventions (pad 0, eos 1, bos 2, unk 3):

- PaliGemma's `paligemma_tokenizer.model` (vocab 257152) for real pi0.5 checkpoints. It cannot be downloaded at
  run time: put it in the checkpoint folder or pass its path.
- the built-in one shipped in `oxygen_gym/assets/builtin_tokenizer.model` (vocab 1024, trained by
  tools/train_builtin_tokenizer.py) for the built-in random-weight models.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Protocol, runtime_checkable

import sentencepiece as spm

PALIGEMMA_TOKENIZER_FILE = "paligemma_tokenizer.model"
BUILTIN_TOKENIZER_FILE = "builtin_tokenizer.model"
PALIGEMMA_VOCAB = 257152


class TokenizerNotFoundError(ValueError, FileNotFoundError):
    """A tokenizer model file that is not where it was looked for."""


@runtime_checkable
class Tokenizer(Protocol):
    """What the model, prompts and language decoding need from a tokenizer."""

    bos_id: int
    eos_id: int
    pad_id: int
    vocab_size: int

    def encode(self, text: str, bos: bool = False) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class SentencePieceTokenizer:
    """A SentencePiece model (PaliGemma's or the built-in one) behind the `Tokenizer` protocol."""

    def __init__(self, model_file: str | Path, name: str | None = None) -> None:
        path = Path(model_file)
        if not path.is_file():
            raise TokenizerNotFoundError(f"tokenizer model not found: {path}")
        self.path = path
        self.name = name or path.name
        self._sp = spm.SentencePieceProcessor(model_file=str(path))
        self.bos_id = int(self._sp.bos_id())
        self.eos_id = int(self._sp.eos_id())
        self.pad_id = int(self._sp.pad_id())
        self.vocab_size = int(self._sp.get_piece_size())

    def encode(self, text: str, bos: bool = False) -> list[int]:
        """Token ids of `text`, with BOS first when `bos`."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        return list(self._sp.encode(text, add_bos=bos))

    def decode(self, ids) -> str:
        """Text of `ids` (special tokens dropped, byte-fallback pieces joined back into characters)."""
        return self._sp.decode([int(i) for i in ids])

    def piece(self, token_id: int) -> str:
        return self._sp.id_to_piece(int(token_id))

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({self.name!r}, vocab_size={self.vocab_size})"


def builtin_tokenizer() -> SentencePieceTokenizer:
    """The small tokenizer that ships with the package (vocab 1024, config.BUILTIN_VOCAB)."""
    path = resources.files("oxygen_gym") / "assets" / BUILTIN_TOKENIZER_FILE
    with resources.as_file(path) as file:
        return SentencePieceTokenizer(file, name="builtin")


def paligemma_tokenizer(path: str | Path) -> SentencePieceTokenizer:
    """PaliGemma's SentencePiece model from a file or from a checkpoint folder holding `paligemma_tokenizer.model`."""
    path = Path(path)
    file = path / PALIGEMMA_TOKENIZER_FILE if path.is_dir() or not path.suffix else path
    if not file.is_file():
        raise TokenizerNotFoundError(
            f"PaliGemma tokenizer not found at {file}. It cannot be downloaded at run time: copy "
            f"`{PALIGEMMA_TOKENIZER_FILE}` (gs://big_vision/paligemma_tokenizer.model, or `tokenizer.model` from the "
            f"google/paligemma-3b-pt-224 repository) into the checkpoint folder, or pass the file's path."
        )
    return SentencePieceTokenizer(file, name="paligemma")


def tokenizer_for(vocab_size: int, checkpoint_dir: str | Path | None = None) -> SentencePieceTokenizer:
    """The tokenizer that matches a model's vocabulary: the built-in one for vocab 1024, else PaliGemma's from
    `checkpoint_dir`. A mismatch between the tokenizer and the model's vocabulary is an error."""
    from .config import BUILTIN_VOCAB

    if vocab_size == BUILTIN_VOCAB and (
        checkpoint_dir is None or not (Path(checkpoint_dir) / PALIGEMMA_TOKENIZER_FILE).is_file()
    ):
        tok = builtin_tokenizer()
    elif checkpoint_dir is None:
        raise TokenizerNotFoundError(
            f"a model with vocab_size {vocab_size} needs PaliGemma's tokenizer; pass the checkpoint folder holding "
            f"`{PALIGEMMA_TOKENIZER_FILE}`"
        )
    else:
        tok = paligemma_tokenizer(checkpoint_dir)
    if tok.vocab_size > vocab_size:
        raise ValueError(f"tokenizer {tok.name!r} has {tok.vocab_size} pieces but the model's vocab_size is {vocab_size}")
    return tok
