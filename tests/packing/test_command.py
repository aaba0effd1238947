"""`loglinear train --pack`'s outcomes as one line and an exit status, as `loglinear train`'s (runs/command.py)."""

from __future__ import annotations

import errno
import signal

import pytest

from loglinear.packing import train as pack_train
from loglinear.packing.command import pack_command
from loglinear.packing.train import MemberFailed
from loglinear.runs.config import ConfigError, load_run_config, to_yaml
from loglinear.runs.folder import DiskFull
from loglinear.runs.interrupt import Interrupted


@pytest.fixture
def configs(tmp_path):
    paths = []
    for seed in (1, 2):
        path = tmp_path / f"run{seed}.yaml"
        cfg = load_run_config("mqar_cpu.yaml", [f"train.seed={seed}", f"out_dir={tmp_path / f'run{seed}'}"])
        path.write_text(to_yaml(cfg))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(("raised", "status", "line"), [
    (ConfigError("model.d_model: bad"), 2, "loglinear train: error: model.d_model: bad"),
    (Interrupted(signal.SIGTERM), 143, "interrupted by SIGTERM; rerun the same command to resume"),
    (KeyboardInterrupt(), 130, "interrupted; rerun the same command to resume"),
    (DiskFull("no space left on device"), 1, "are intact: free space and rerun the same command to resume"),
    (OSError(errno.EIO, "Input/output error"), 1, "Input/output error"),
    (RuntimeError("boom"), 1, "failed: RuntimeError: boom (each unfinished run of the pack is marked failed)"),
    (MemberFailed("runs/a", RuntimeError("boom")), 1, "failed: runs/a: RuntimeError: boom (see runs/a/result.json; "
                                                      "the other runs of the pack trained on)"),
])
def test_each_outcome_is_one_line_and_its_status(configs, monkeypatch, capsys, raised, status, line):
    def train_pack(cfgs):
        assert [c.train.seed for c in cfgs] == [1, 2]
        raise raised

    monkeypatch.setattr(pack_train, "train_pack", train_pack)
    assert pack_command(configs) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    if status in (130, 143):
        assert all(path.removesuffix(".yaml") in err[0] for path in configs)


def test_no_config_and_a_bad_config_are_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pack_train, "train_pack", lambda cfgs: pytest.fail("trained"))
    assert pack_command([]) == 2
    assert "--pack needs the config.yaml of each run" in capsys.readouterr().err
    assert pack_command([str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("loglinear train: error:")


def test_a_finished_pack_exits_0(configs, monkeypatch, capsys):
    monkeypatch.setattr(pack_train, "train_pack", lambda cfgs: None)
    assert pack_command(configs) == 0
    assert capsys.readouterr().err == ""
