"""`train --data-mix`: each batch draws a set share from each collection (train/data_mix.py), so aggregated DAgger
rollouts cannot crowd out the expert's demonstrations."""
from __future__ import annotations

import json

import pytest
import torch
from test_dagger import COMMON, _data

from oxygen_gym.train.data_mix import RowSampler, parse_mix
from oxygen_gym.train.dataset import DemoDataset
from oxygen_gym.train.trainer import TrainConfig, train


def test_without_a_mix_rows_are_drawn_as_before():
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(RowSampler([90, 10]).draw(64, a), torch.randint(0, 100, (64,), generator=b))


def test_a_mix_sets_each_collections_share_whatever_its_size():
    gen = torch.Generator().manual_seed(0)
    rows = RowSampler([900, 100], mix=(1, 3)).draw(40_000, gen)
    share = float((rows >= 900).double().mean())
    assert abs(share - 0.75) < 0.01, share  # binomial sd 0.002; uniform rows would give 0.10
    assert len(torch.unique(rows[rows >= 900])) == 100 and len(torch.unique(rows[rows < 900])) == 900
    assert not (RowSampler([900, 100], mix=(1, 0)).draw(5_000, gen) >= 900).any()


def test_bad_mixes_are_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--data-mix has 3 weights but --data names 2"):
        RowSampler([5, 5], mix=(1, 1, 1))
    with pytest.raises(ValueError, match="--data-mix: weights must be >= 0"):
        parse_mix("1,-1")
    with pytest.raises(ValueError, match="--data-mix: weights must be >= 0"):
        parse_mix("0,0")
    with pytest.raises(ValueError, match="comma-separated numbers"):
        parse_mix("half,half")
    with pytest.raises(ValueError, match=r"collection\(s\) \[1\] have a weight but no training rows"):
        RowSampler([5, 0], mix=(1, 1))


def test_the_trainer_draws_its_batches_by_the_mix(tmp_path, monkeypatch):
    first, second = _data(tmp_path / "expert", [0, 1]), _data(tmp_path / "dagger", [5, 6])
    drawn = []
    batch = DemoDataset.batch

    def recording(self, index, generator=None, *args, **kwargs):
        if generator is not None:  # a training batch (the checkpoint monitor scores fixed rows without one)
            drawn.append(index)
        return batch(self, index, generator, *args, **kwargs)

    monkeypatch.setattr(DemoDataset, "batch", recording)
    out = tmp_path / "run"
    cfg = TrainConfig(data=f"{first},{second}", out=str(out), steps=3, data_mix=(0, 1), val_scenes=(1,), **COMMON)
    train(cfg, progress=False)
    rows = torch.cat(drawn)
    assert len(rows) == 3 * COMMON["batch_size"] and bool((rows >= 12).all())  # scene 0's 12 rows come first
    assert json.loads((out / "model" / "training.json").read_text())["train_config"]["data_mix"] == [0.0, 1.0]
    placement = json.loads((out / "placement.json").read_text())  # what the run chose (engine/placement.py)
    assert placement["threads"] == torch.get_num_threads() and placement["processes"] == 1
    with pytest.raises(ValueError, match="data_mix"):
        train(TrainConfig(**{**cfg.__dict__, "data_mix": (1, 1)}), progress=False)


def test_the_cli_parses_the_mix_and_refuses_it_for_an_adapter(tmp_path, capsys):
    from oxygen_gym.cli import main

    assert main(["train", "--data", "a,b", "--out", str(tmp_path / "r"), "--data-mix", "1,x"]) == 2
    assert "--data-mix: expected comma-separated numbers" in capsys.readouterr().err
    assert main(["train", "--data", "a", "--out", str(tmp_path / "r"), "--adapter", "memory", "--data-mix", "1"]) == 2
    assert "not to --adapter" in capsys.readouterr().err
