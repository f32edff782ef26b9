"""Text deltas: concatenated `new_text` always equals `text`, for multi-byte characters split across byte-fallback
tokens and for SentencePiece word boundaries."""
import pytest

from oxygen_gym.model.tokenizer import builtin_tokenizer
from oxygen_gym.policies.language import TextStream

SAMPLES = [
    "pick up the black bowl and place it on the plate",
    "café — naïve 東京 🤖 déjà vu",
    "  leading spaces and trailing  ",
    "ünïcödé🙂🙂 mixed with ascii words",
]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_deltas_concatenate_to_the_full_text(text, chunk):
    tok = builtin_tokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids).strip() == text.strip()
    stream = TextStream(tok.decode)
    deltas = []
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        deltas.append(stream.push(part, done=i + chunk >= len(ids)))
        assert "".join(deltas) == stream.text
        assert "\ufffd" not in stream.text  # incomplete UTF-8 is held back, never shown then revised
    assert stream.text == tok.decode(ids)


def test_multibyte_split_is_held_back_until_complete():
    tok = builtin_tokenizer()
    ids = tok.encode("🤖")
    assert len(ids) > 1, "the emoji should need several byte-fallback pieces in the built-in vocabulary"
    stream = TextStream(tok.decode)
    assert stream.push(ids[:-1], done=False) in ("", " ")
    assert stream.push(ids[-1:], done=False).endswith("🤖")
