"""`loglinear train` keeps freed memory (runs/memory.py) unless LOGLINEAR_KEEP_FREED_MEMORY=0, refuses any other
value with one line, and trains to the same bits either way."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import loglinear.runs.memory as memory
import loglinear.runs.train as train_module
from loglinear.cli import main as cli_main

from .. import child_process

# logits at 16 scored positions x 64 sequences x vocabulary 8192 are 32 MiB: above glibc's largest mmap threshold
# by default, so that the two settings allocate them differently
RUN = [
    "data.task=mqar", "data.task_args.vocab_size=8192", "data.task_args.seq_len=64",
    "data.task_args.num_kv_pairs=16", "data.batch_size=64", "data.val_size=64", "data.test_size=64",
    "model.mixer=gated_deltanet", "model.d_model=16", "model.n_layers=1", "model.mlp_ratio=0.0",
    "train.lr=3.0e-3", "train.max_steps=8", "train.val_every=4", "train.early_stop_threshold=null",
    "logger.wandb.mode=disabled", "logger.progress=false",
]


@pytest.fixture
def calls(monkeypatch):
    """The calls of `keep_freed_memory` (none reaches glibc) and no training (`train` returns a result)."""
    made: list[None] = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: made.append(None) or True)
    monkeypatch.setattr(train_module, "train", lambda cfg: {"status": "max_steps", "step": 0})
    return made


@pytest.mark.parametrize(("setting", "kept"), [(None, True), ("", True), ("1", True), ("0", False)])
def test_loglinear_train_keeps_freed_memory_unless_turned_off(setting, kept, calls, monkeypatch, tmp_path):
    if setting is None:
        monkeypatch.delenv(memory.ENV, raising=False)
    else:
        monkeypatch.setenv(memory.ENV, setting)
    assert cli_main(["train", *RUN, f"out_dir={tmp_path / 'run'}"]) == 0
    assert len(calls) == kept


def test_another_value_is_one_line_and_nothing_is_written(calls, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(memory.ENV, "yes")
    assert cli_main(["train", *RUN, f"out_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["loglinear train: error: LOGLINEAR_KEEP_FREED_MEMORY='yes': must be 1 (keep freed memory, the "
                   "default) or 0 (glibc's default)"]
    assert not calls and not (tmp_path / "run").exists()


def _train(out: Path, setting: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", memory.ENV: setting}
    proc = child_process.run([sys.executable, "-m", "loglinear", "train", *RUN, f"out_dir={out}"], env=env,
                             cpu_s=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_kept_and_returned_memory_train_to_the_same_bits(tmp_path):
    kept, returned = tmp_path / "kept", tmp_path / "returned"
    _train(kept, "1")
    _train(returned, "0")
    assert _rows(kept) == _rows(returned)
    a = torch.load(kept / "last.ckpt", map_location="cpu", weights_only=False)
    b = torch.load(returned / "last.ckpt", map_location="cpu", weights_only=False)
    assert a["global_step"] == b["global_step"] == 8
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for name, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][name]), name
    moments, other = (c["optimizer_states"][0]["state"] for c in (a, b))
    assert moments.keys() == other.keys()
    for i, state in moments.items():
        assert all(torch.equal(state[key], other[i][key]) for key in ("exp_avg", "exp_avg_sq")), i


KEEPS_A_PACKS_STEP = """
import resource, sys, torch
from loglinear.runs.memory import keep_freed_memory
assert keep_freed_memory() or sys.argv[1] == "off"
def step():  # 2.4 GB of 150 MB blocks, freed together: a large pack's step frees more than 2 GB at once
    blocks = [torch.ones(150 * 2**20 // 4) for _ in range(16)]
    del blocks
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_step_that_frees_more_than_2_gb_at_once_finds_its_memory_again():
    """No trimming at all: a finite trim threshold (at most 2^31 - 1) hands back the top of the heap every step of a
    pack that frees more than that, and each step faults it in again."""
    faults = int(subprocess.run([sys.executable, "-c", KEEPS_A_PACKS_STEP, "on"], capture_output=True, text=True,
                                check=True).stdout)
    assert faults < 100_000  # trimmed at 2^31 - 1 it faults 384,000 pages (1.5 GB) in again
