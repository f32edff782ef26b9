"""Train the built-in SentencePiece tokenizer once: oxygen_gym/assets/builtin_tokenizer.model.

The built-in models (`tiny`, `small`, `pi05` with random weights) need a tokenizer that ships with the package,
because PaliGemma's cannot be downloaded here. It follows PaliGemma's conventions so prompts look the same to the
rest of the code: BPE, pad 0, eos 1, bos 2, unk 3, digits split one per token, byte fallback for any character
outside the vocabulary (so every string round-trips), identity normalisation and no dummy prefix. `\n` is its own
piece, as in PaliGemma, because the pi0.5 prompt uses it as the "start of answer" marker.

Corpus: tools/builtin_tokenizer_corpus.txt (task instructions and robot narration written for this project) plus
pi0.5-style prompt lines with random discretised states, so `State: 12 255 ...` tokenizes like the real thing.
Runs offline in a few seconds and is deterministic (fixed seed, one thread):

    .venv/bin/python tools/train_builtin_tokenizer.py
"""
from __future__ import annotations

import argparse
import io
import random
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tools" / "builtin_tokenizer_corpus.txt"
OUTPUT = ROOT / "oxygen_gym" / "assets" / "builtin_tokenizer.model"
VOCAB_SIZE = 1024  # oxygen_gym.model.pi05.config.BUILTIN_VOCAB


def training_lines(corpus: Path, seed: int = 0) -> list[str]:
    """Corpus lines, plus prompt-format lines for every instruction (state bins drawn with a fixed seed)."""
    rng = random.Random(seed)
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    instructions = [ln for ln in lines if ln[:1].islower() and not ln.endswith(".")]
    out = list(lines)
    for instruction in instructions:
        for _ in range(3):
            bins = " ".join(str(rng.randrange(256)) for _ in range(rng.choice((8, 14, 32))))
            out.append(f"Task: {instruction}, State: {bins};")
            out.append("Action: ")
        out.append(f"Task: {instruction}")
    rng.shuffle(out)
    return out


def train(corpus: Path = CORPUS, output: Path = OUTPUT, vocab_size: int = VOCAB_SIZE) -> Path:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines(corpus)),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        user_defined_symbols=["\n"],
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        hard_vocab_limit=True,
        num_threads=1,
        minloglevel=2,
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(model.getvalue())
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    path = train(args.corpus, args.output)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    print(f"wrote {path} ({path.stat().st_size} bytes, vocab {sp.get_piece_size()})")


if __name__ == "__main__":
    main()
