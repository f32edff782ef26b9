"""`oxygen-gym train --adapter`: only LoRA weights learn, on the continuation of a prefix the frozen base computes
as inference does; the base is bit-for-bit unchanged, and the exported PEFT folder reloads into a policy."""
import hashlib
import json

import numpy as np
import pytest
import torch

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.cli import main
from oxygen_gym.model.lora_bank import LoraBank
from oxygen_gym.model.peft_adapter import read_peft
from oxygen_gym.model.pi05.loading import load_pretrained
from oxygen_gym.model.tokenizer import tokenizer_for
from oxygen_gym.train import adapter_trainer
from oxygen_gym.train.adapter_trainer import _dataset_stats, base_folder, continuation_logits
from oxygen_gym.train.dataset import DemoDataset
from lora_fixtures import random_lora
from policy_obs import make_obs
from test_train_data import _write_data, synthetic_demo

PROMPT = "Where is the bowl?"


def _base():
    return load_pretrained(base_folder(None), dtype=torch.float32)


def test_training_logits_are_inferences_prefill_then_adapted_extend():
    model = _base()
    bank = LoraBank(model)
    model.lora = bank
    slot = bank.load("m", random_lora(model, ("self_attn.q_proj", "mlp.down_proj"), 4, 8.0, seed=3))
    tok = tokenizer_for(model.config.vocab_size, str(base_folder(None)))
    ds = DemoDataset([synthetic_demo(0, steps=6, size=64)], model.config, tok, PROMPT, _dataset_stats(model), progress=False)
    batch = ds.batch(torch.tensor([0, 3, 5]))
    logits = continuation_logits(model, bank, slot, batch)
    for row in range(3):
        n = int((batch.text[row] != 0).sum())
        prefix = model.embed_prefix([i[row : row + 1] for i in batch.images], [m[row : row + 1] for m in batch.image_masks],
                                    batch.tokens[row : row + 1], batch.token_masks[row : row + 1])
        cache = model.new_cache(1, prefix.max_len + n)
        model.prefill(cache, prefix)
        hidden = model.extend(cache, batch.text[row : row + 1, :n], prefix.lengths, adapters=torch.tensor([slot]))
        want = model.lm_logits(hidden)[0, : n - 1]
        base = model.lm_logits(model.extend(cache, batch.text[row : row + 1, :n], prefix.lengths))[0, : n - 1]
        assert not torch.allclose(want, base, atol=1e-3), "the adapter does not change the logits: the test is blind"
        # measured max abs difference 0 for two rows, 9.1e-6 for the third on logits up to 12.3 (its batch holds a
        # longer prefix: other matmul shapes); ~3x
        torch.testing.assert_close(logits[row, : n - 1], want, atol=3e-5, rtol=0)


def _hash(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_train_adapter_changes_no_base_weight_and_its_folder_reloads(tmp_path, monkeypatch):
    data = tmp_path / "data"
    _write_data(data)
    held = {}

    def load_and_keep(*args, **kwargs):
        held["model"] = load_pretrained(*args, **kwargs)
        held["hash"] = _hash(held["model"])
        return held["model"]

    monkeypatch.setattr(adapter_trainer, "load_pretrained", load_and_keep)
    args = ["train", "--adapter", "mem", "--rank", "4", "--prompt", PROMPT, "--data", str(data), "--out",
            str(tmp_path / "run"), "--steps", "8", "--batch-size", "4", "--lr", "0.01", "--threads", "1"]
    assert main(args) == 0
    assert _hash(held["model"]) == held["hash"], "training changed a base weight"
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 8
    folder = tmp_path / "run" / "adapter"
    recipe = json.loads((folder / "training.json").read_text())
    assert str(tmp_path) not in json.dumps(recipe) and recipe["config"]["data"] == "../data"  # no machine path
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "libero-spatial"
    trained = read_peft(folder, held["model"]).weights
    assert len(trained.modules) == 7 * held["model"].config.vlm.depth
    assert any(float(b.abs().max()) > 0 for _, b in trained.modules.values()), "B stayed at its zero init"
    task = LanguageTask("memory", PROMPT, 4, adapter="mem")
    with MultiTaskPolicy.from_pretrained("libero-spatial", adapters={"mem": folder}, tasks=[task]) as policy:
        _, updates = policy.act(make_obs("libero", np.random.default_rng(0), size=(128, 128)))
        assert updates and updates[0].task == "memory"
        slot = policy.model.lora.index("mem")
        for name, (a, b) in trained.modules.items():
            t = policy.model.lora.targets[name]
            assert torch.equal(t.A[slot, :4], a) and torch.equal(t.B[slot, :, :4], b), name


def test_square_root_label_balancing_gives_each_label_a_share_of_sqrt_its_count():
    from oxygen_gym.train.adapter_trainer import row_weights

    w = row_weights(["on the table"] * 16 + ["on the plate"])
    assert w[:16].sum() / w[16:].sum() == pytest.approx(4.0)  # sqrt(16) : sqrt(1)
