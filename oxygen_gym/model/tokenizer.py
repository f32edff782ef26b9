"""Text <-> token ids. Two SentencePiece models with the same conventions (pad 0, eos 1, bos 2, unk 3):

- PaliGemma's SentencePiece model (vocab 257152) for real pi0.5 checkpoints. It is never downloaded at run time:
  `find_tokenizer` searches the checkpoint folder, $OXYGEN_GYM_TOKENIZER, openpi's cache and the Hugging Face cache.
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


class StandInTokenizer(SentencePieceTokenizer):
    """The built-in tokenizer standing in for a random-weight model of a larger vocabulary (a `pi05` built-in where no
    PaliGemma tokenizer is installed). Random weights sample ids past its 1024 pieces; those decode as `<id N>` instead
    of failing, so language decoding (a server's replies, narration) runs end to end."""

    def __init__(self, model_vocab: int) -> None:
        path = resources.files("oxygen_gym") / "assets" / BUILTIN_TOKENIZER_FILE
        with resources.as_file(path) as file:
            super().__init__(file, name="builtin")
        self.model_vocab = int(model_vocab)

    def decode(self, ids) -> str:
        out, run = [], []
        for i in (int(i) for i in ids):
            if i < self.vocab_size:
                run.append(i)
                continue
            out.append(self._sp.decode(run))
            out.append(f"<id {i}>")
            run = []
        out.append(self._sp.decode(run))
        return "".join(out)

    def piece(self, token_id: int) -> str:
        return super().piece(token_id) if int(token_id) < self.vocab_size else f"<id {int(token_id)}>"


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


TOKENIZER_ENV = "OXYGEN_GYM_TOKENIZER"
CHECKPOINT_TOKENIZER_FILES = ("tokenizer.model", PALIGEMMA_TOKENIZER_FILE)
PALIGEMMA_HUB_ID = "google/paligemma-3b-pt-224"  # what lerobot's processor loads (`tokenizer_name`)


def tokenizer_candidates(checkpoint_dir: str | Path | None = None) -> list[tuple[str, Path | None]]:
    """Where a PaliGemma tokenizer is looked for, in order: (description, file or None when not resolvable).

    The checkpoint folder; `$OXYGEN_GYM_TOKENIZER` (a file or a folder holding one); openpi's download cache
    (`$OPENPI_DATA_HOME`, default ~/.cache/openpi, + big_vision/paligemma_tokenizer.model: openpi
    `shared/download.py`); huggingface_hub's local cache of google/paligemma-3b-pt-224 (`local_files_only`, never
    the network).
    """
    import os

    out: list[tuple[str, Path | None]] = []
    if checkpoint_dir is not None:
        for name in CHECKPOINT_TOKENIZER_FILES:
            out.append((f"checkpoint folder: {Path(checkpoint_dir) / name}", Path(checkpoint_dir) / name))
    env = os.environ.get(TOKENIZER_ENV)
    if env:
        p = Path(env).expanduser()
        if p.is_dir():
            for name in CHECKPOINT_TOKENIZER_FILES:
                out.append((f"${TOKENIZER_ENV}: {p / name}", p / name))
        else:
            out.append((f"${TOKENIZER_ENV}: {p}", p))
    else:
        out.append((f"${TOKENIZER_ENV} (not set)", None))
    openpi_home = Path(os.environ.get("OPENPI_DATA_HOME", "~/.cache/openpi")).expanduser()
    out.append((f"openpi cache: {openpi_home / 'big_vision' / PALIGEMMA_TOKENIZER_FILE}",
                openpi_home / "big_vision" / PALIGEMMA_TOKENIZER_FILE))
    out.append((f"Hugging Face cache: {PALIGEMMA_HUB_ID}/tokenizer.model", _hf_cached_tokenizer()))
    return out


def _hf_cached_tokenizer() -> Path | None:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(PALIGEMMA_HUB_ID, "tokenizer.model", local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (or hub not installed): simply not found there
        return None


def find_tokenizer(
    vocab_size: int, checkpoint_dir: str | Path | None = None, tokenizer=None, *, builtin_default: bool = True
) -> tuple[Tokenizer, str]:
    """(tokenizer, where it came from) for a model of `vocab_size`, checked against it.

    `tokenizer` may be a path (file, or folder holding `tokenizer.model` / `paligemma_tokenizer.model`) or an object
    with the `Tokenizer` protocol. Otherwise: the built-in one for vocab 1024 (when the folder has no tokenizer and
    `builtin_default`), else the places of `tokenizer_candidates`. A PaliGemma-vocab model needs a tokenizer of
    exactly that vocabulary; any other needs one no larger than the model's.
    """
    from .pi05.config import BUILTIN_VOCAB

    if tokenizer is not None:
        if isinstance(tokenizer, (str, Path)):
            p = Path(tokenizer).expanduser()
            files = [p / n for n in CHECKPOINT_TOKENIZER_FILES] if p.is_dir() else [p]
            file = next((f for f in files if f.is_file()), None)
            if file is None:
                raise TokenizerNotFoundError(f"tokenizer: no SentencePiece model at {p}"
                                             + (f" (looked for {', '.join(CHECKPOINT_TOKENIZER_FILES)})" if p.is_dir() else ""))
            tok, source = SentencePieceTokenizer(file), f"tokenizer= argument: {file}"
        elif isinstance(tokenizer, Tokenizer):
            tok, source = tokenizer, f"tokenizer= argument: {type(tokenizer).__name__}"
        else:
            raise ValueError(f"tokenizer must be a path or an object with encode/decode/bos_id/eos_id/pad_id/vocab_size, "
                             f"got {type(tokenizer).__name__}")
    else:
        candidates = tokenizer_candidates(checkpoint_dir)
        in_folder = [(d, f) for d, f in candidates[: len(CHECKPOINT_TOKENIZER_FILES) if checkpoint_dir else 0]
                     if f is not None and f.is_file()]
        if vocab_size == BUILTIN_VOCAB and builtin_default and not in_folder:
            tok, source = builtin_tokenizer(), "built-in (vocab 1024, oxygen_gym/assets/builtin_tokenizer.model)"
        else:
            found = next(((d, f) for d, f in candidates if f is not None and f.is_file()), None)
            if found is None:
                searched = "\n  ".join(d for d, _ in candidates)
                raise TokenizerNotFoundError(
                    f"no tokenizer for this checkpoint (vocab {vocab_size}). Searched, in order:\n  {searched}\n"
                    f"Pass tokenizer=PATH (--tokenizer PATH) to PaliGemma's SentencePiece model: `tokenizer.model` of "
                    f"{PALIGEMMA_HUB_ID} or gs://big_vision/{PALIGEMMA_TOKENIZER_FILE}, or copy it into the checkpoint "
                    f"folder, or set ${TOKENIZER_ENV}."
                )
            tok, source = SentencePieceTokenizer(found[1]), found[0]
    check_tokenizer_vocab(tok, vocab_size, source)
    return tok, source


def check_tokenizer_vocab(tok: Tokenizer, vocab_size: int, source: str = "tokenizer") -> None:
    """PaliGemma-vocab models need PaliGemma's exact vocabulary; others one that fits in their embedding."""
    n = int(tok.vocab_size)
    if vocab_size == PALIGEMMA_VOCAB and n != PALIGEMMA_VOCAB:
        raise ValueError(f"tokenizer from {source} has {n} pieces, but this checkpoint has PaliGemma's vocabulary "
                         f"({PALIGEMMA_VOCAB}); pass PaliGemma's tokenizer (tokenizer=PATH)")
    if n > vocab_size:
        raise ValueError(f"tokenizer from {source} has {n} pieces but the model's vocab_size is {vocab_size}")


def tokenizer_for(vocab_size: int, checkpoint_dir: str | Path | None = None) -> SentencePieceTokenizer:
    """The tokenizer that matches a model's vocabulary (see `find_tokenizer`)."""
    return find_tokenizer(vocab_size, checkpoint_dir)[0]
