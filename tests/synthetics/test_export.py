"""`loglinear data export`: the .npy files hold exactly the batches a run draws, and bad input writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from loglinear.cli import main
from loglinear.synthetics import SyntheticDataModule, load_data_config
from loglinear.synthetics.export import export_data, read_exported

PRESET = "configs/data/flip_flop.yaml"
SMALL = ["batch_size=16", "val_size=20", "test_size=24", "eval_sets=[{},{p_ignore: 0.1}]", "seed=7"]


def test_the_files_hold_the_runs_batches_and_read_back(tmp_path):
    config = load_data_config(PRESET, SMALL)
    export_data(config, tmp_path / "out", train_size=40)
    sets = read_exported(tmp_path / "out")
    module = SyntheticDataModule(config)
    stream = iter(module.train_dataloader())
    train = torch.cat([next(stream)["inputs"] for _ in range(3)])[:40]
    assert [name for name, _, _ in sets["train"]] == ["train"] and torch.equal(sets["train"][0][1], train)
    test = list(module.test_dataloader())
    assert [name for name, _, _ in sets["test"]] == module.test_set_names == ["iid", "p_ignore=0.1"]
    for index, (_, inputs, targets) in enumerate(sets["test"]):
        mine = [b for b in test if b["slices"]["eval_set"][0] == index]
        assert torch.equal(inputs, torch.cat([b["inputs"] for b in mine]))
        assert torch.equal(targets, torch.cat([b["targets"] for b in mine]))
        assert inputs.shape == (24, 64) and inputs.dtype == torch.int64
    assert sets["validation"][0][1].shape == (20, 64)
    manifest = json.loads((tmp_path / "out" / "data.json").read_text())
    assert manifest["data"]["seed"] == 7 and manifest["vocab_size"] == 5 and manifest["ignore_index"] == -100
    assert np.load(tmp_path / "out" / manifest["files"]["test"][1]["targets"]).shape == (24, 64)


def test_the_command_writes_once_and_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["data", "export", PRESET, str(out), "--train-size", "5", *SMALL]) == 0
    assert (out / "data.json").is_file() and np.load(out / "train.inputs.npy").shape == (5, 64)
    assert main(["data", "export", PRESET, str(out), "--train-size", "5"]) == 2
    assert "data.json exists: export into a new folder" in capsys.readouterr().err
    for bad, message in ((["task_args.p_ignore=2"], "p_ignore must be <= 1.0, got 2"),
                         (["oops"], "unrecognized arguments: oops"),
                         (["--train-size", "0"], "--train-size: must be >= 1, got 0")):
        args = ["--train-size", "5", *bad] if bad[0] != "--train-size" else bad
        assert main(["data", "export", PRESET, str(tmp_path / "other"), *args]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "other").exists()


def test_a_mixture_of_lengths_cannot_be_one_array(tmp_path):
    config = load_data_config("configs/data/parity.yaml", ["mixture=[{seq_len: 8},{seq_len: 16}]", "batch_size=4"])
    with pytest.raises(ValueError, match=r"mixes sequence lengths \[8, 16\]"):
        export_data(config, tmp_path / "out", train_size=64)
    assert not (tmp_path / "out").exists()
