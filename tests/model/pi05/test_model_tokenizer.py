"""Tokenizers (built-in, PaliGemma's when absent), prompt building as lerobot/openpi do it, image preprocessing."""
import numpy as np
import pytest
import torch

from oxygen_gym.model import (
    BUILTIN_VOCAB,
    Tokenizer,
    TokenizerNotFoundError,
    builtin_tokenizer,
    discretize_state,
    paligemma_tokenizer,
    preprocess_image,
    prompt_text,
    tokenize_prompt,
    tokenizer_for,
)


@pytest.fixture(scope="module")
def tok():
    return builtin_tokenizer()


def test_builtin_follows_paligemma_conventions(tok):
    assert isinstance(tok, Tokenizer)
    assert (tok.pad_id, tok.eos_id, tok.bos_id, tok.vocab_size) == (0, 1, 2, BUILTIN_VOCAB)
    assert tok.piece(3) == "<unk>"
    assert tok.encode("\n") == [tok.encode("a\nb")[1]]  # newline is one piece of its own


@pytest.mark.parametrize(
    "text",
    [
        "pick up the black bowl between the plate and the ramekin and place it on the plate",
        "Task: open the drawer, State: 0 128 255 17;\nAction: ",
        "  double  spaces, tabs\tand trailing space ",
        "Ünïcödé façade, 東京のロボット, Привет, emoji 🤖🦾, math ∑∫≈",
        "",
    ],
)
def test_round_trip(tok, text):
    ids = tok.encode(text, bos=True)
    assert ids[:1] == [tok.bos_id]
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text)) == text


def test_multibyte_text_uses_byte_fallback(tok):
    ids = tok.encode("🦾")
    assert len(ids) == 4 and all(tok.piece(i).startswith("<0x") for i in ids)  # four UTF-8 bytes


def test_state_bins_exactly_as_lerobot():
    # np.digitize(x, linspace(-1, 1, 257)[:-1]) - 1, zero-padded to 32 before binning
    state = np.array([-1.0, 0.0, 1.0, 0.5, -0.5, 0.0078125, 0.0078124, 1.7], dtype=np.float32)
    bins = discretize_state(state)
    assert bins.tolist() == [0, 128, 255, 192, 64, 129, 128, 255] + [128] * 24
    assert discretize_state(state[:3], pad_to=None).tolist() == [0, 128, 255]  # openpi: no padding
    text = prompt_text("  pick_up the\nbowl ", state[:3])
    assert text == "Task: pick up the bowl, State: 0 128 255" + " 128" * 29 + ";\nAction: "


def test_tokenize_prompt_pi05_form(tok):
    state = np.linspace(-1, 1, 8)
    tokens, mask = tokenize_prompt(tok, "put the bowl on the plate", state, max_len=200)
    n = int(mask.sum())
    assert tokens.shape == mask.shape == (200,) and tokens.dtype == np.int64 and mask.dtype == bool
    assert mask[:n].all() and not mask[n:].any() and (tokens[n:] == 0).all()
    assert tokens[0] == tok.bos_id
    assert tokens[:n].tolist() == tok.encode(prompt_text("put the bowl on the plate", state), bos=True)
    assert tok.decode(tokens[:n]).endswith(";\nAction: ")


def test_tokenize_prompt_pi0_form(tok):
    tokens, mask = tokenize_prompt(tok, "open_the drawer\n", discrete_state=False, max_len=48)
    expected = tok.encode("open the drawer", bos=True) + tok.encode("\n")
    assert tokens[: mask.sum()].tolist() == expected
    with pytest.raises(ValueError, match="state is required"):
        tokenize_prompt(tok, "open the drawer", None, discrete_state=True)


def test_too_long_prompt_names_prompt_and_limit(tok):
    prompt = "pick up the bowl " * 30
    with pytest.raises(ValueError, match=r"max_token_len=200.*pick up the bowl"):
        tokenize_prompt(tok, prompt, np.zeros(8))


def test_missing_paligemma_tokenizer_says_where_to_put_it(tmp_path):
    with pytest.raises(TokenizerNotFoundError, match="paligemma_tokenizer.model") as err:
        paligemma_tokenizer(tmp_path)
    assert isinstance(err.value, ValueError) and str(tmp_path) in str(err.value)
    assert "cannot be downloaded" in str(err.value)
    with pytest.raises(TokenizerNotFoundError, match="paligemma_tokenizer.model"):
        tokenizer_for(257152, tmp_path)
    assert tokenizer_for(BUILTIN_VOCAB).vocab_size == BUILTIN_VOCAB


def test_paligemma_path_loads_a_sentencepiece_file(tmp_path):
    """Any SentencePiece file under the expected name loads through the PaliGemma path."""
    src = builtin_tokenizer().path
    (tmp_path / "paligemma_tokenizer.model").write_bytes(src.read_bytes())
    loaded = paligemma_tokenizer(tmp_path)
    assert loaded.encode("put the bowl", bos=True) == builtin_tokenizer().encode("put the bowl", bos=True)


def test_image_resize_with_pad_keeps_aspect_and_pads_black():
    img = np.full((100, 200, 3), 255, dtype=np.uint8)
    x = preprocess_image(img)
    assert x.shape == (3, 224, 224) and x.dtype == torch.float32
    # 100x200 scales to 112x224, centred: rows 56..167 are the image, the rest black (-1)
    assert torch.all(x[:, 56:168] == 1.0)
    assert torch.all(x[:, :56] == -1.0) and torch.all(x[:, 168:] == -1.0)
    same = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    np.testing.assert_allclose(preprocess_image(same).permute(1, 2, 0).numpy(), same / 255.0 * 2 - 1, atol=1e-6)


@pytest.mark.parametrize(
    "bad", [np.zeros((10, 10, 3), np.float32), np.zeros((10, 10), np.uint8), np.zeros((10, 10, 4), np.uint8), [1, 2]]
)
def test_bad_images_are_value_errors(bad):
    with pytest.raises(ValueError, match="image must"):
        preprocess_image(bad)


def test_random_pi05_builtin_falls_back_to_the_builtin_tokenizer_only_when_none_is_installed(tmp_path, monkeypatch):
    """`from_pretrained("pi05")` (random weights, the GPU bench's model) must build on a machine with no PaliGemma
    tokenizer; one that is installed, or one asked for, still wins."""
    from huggingface_hub import constants

    from oxygen_gym.policies.families.pi05.pi05_io import _builtin_tokenizer

    monkeypatch.delenv("OXYGEN_GYM_TOKENIZER", raising=False)
    monkeypatch.setenv("OPENPI_DATA_HOME", str(tmp_path / "openpi"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    for vocab in (257152, 2048):
        with pytest.warns(UserWarning, match="no PaliGemma tokenizer installed"):
            assert _builtin_tokenizer(vocab, None).name == "builtin"
    installed = tmp_path / "openpi" / "big_vision" / "paligemma_tokenizer.model"
    installed.parent.mkdir(parents=True)
    installed.write_bytes(builtin_tokenizer().path.read_bytes())  # 1024 pieces: fits 2048, not PaliGemma's vocab
    assert _builtin_tokenizer(2048, None).name != "builtin"
    with pytest.raises(ValueError, match="PaliGemma's vocabulary"):
        _builtin_tokenizer(257152, None)  # an installed tokenizer of the wrong vocabulary is an error, not a fallback
    with pytest.raises(TokenizerNotFoundError, match="no SentencePiece model"):
        _builtin_tokenizer(257152, tmp_path / "missing.model")


def test_stand_in_tokenizer_lets_a_larger_vocab_random_model_narrate():
    """A random `pi05` built-in without PaliGemma's tokenizer samples ids past the built-in 1024 pieces; its language
    (a server's replies) must decode them, not fail (seen on an H200: every `bench serve --model pi05` call failed)."""
    from dataclasses import replace

    from oxygen_gym import LanguageTask, MultiTaskPolicy
    from oxygen_gym.model.pi05.config import PI05Config
    from oxygen_gym.model.pi05.init import build_model
    from oxygen_gym.model.tokenizer import StandInTokenizer
    from policy_obs import make_obs

    tok = StandInTokenizer(4096)
    assert tok.decode([5, 6]) == builtin_tokenizer().decode([5, 6]) and tok.decode([3000]) == "<id 3000>"
    assert tok.decode([5, 3000, 6]) == builtin_tokenizer().decode([5]) + "<id 3000>" + builtin_tokenizer().decode([6])
    model = build_model(replace(PI05Config.named("tiny"), vocab_size=4096), seed=0)
    task = LanguageTask("narrate", "Describe what the robot is doing.", max_new_tokens=6)
    rng = np.random.default_rng(0)
    with MultiTaskPolicy(model, tok, robot="libero", tasks=[task], num_steps=2, num_slots=4) as policy:
        texts = [u.text for _ in range(3) for u in policy.act(make_obs("libero", rng))[1]]
    assert any("<id " in t for t in texts), texts
