"""The training accuracy is computed on the logged steps only, and metrics.csv is what computing it on every step
writes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loglinear.runs.config import load_run_config
from loglinear.runs.lit import LitLanguageModel
from loglinear.runs.train import train

# 45 steps logged every 10 (log_every_n_steps = val_every), a validation every 10; the case that early-stops
# does so at a validation off the last step
RUN = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.batch_size=32", "data.val_size=64", "data.test_size=64",
    "model.mixer=attention", "model.d_model=32", "model.attention_heads=2",
    "train.lr=1.0e-2", "train.warmup_steps=5", "train.max_steps=45", "train.val_every=10",
    "logger.wandb.mode=disabled", "logger.progress=false",
]


def trained(out: Path, threshold: str, monkeypatch, every_step: bool) -> tuple[list[dict[str, str]], int]:
    """metrics.csv of the run, and how many training steps computed the accuracy."""
    counted = []
    shared_step = LitLanguageModel.shared_step

    def counting(self, batch, counts=True, fused=False):
        if self.trainer.training and counts:
            counted.append(self.trainer.global_step)
        return shared_step(self, batch, counts, fused)

    with monkeypatch.context() as patch:
        patch.setattr(LitLanguageModel, "shared_step", counting)
        if every_step:  # what the module did before: the accuracy of every step
            patch.setattr(LitLanguageModel, "_logs_this_step", lambda self: True)
        train(load_run_config(None, [*RUN, f"train.early_stop_threshold={threshold}", f"out_dir={out}"]))
    with (out / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f)), len(counted)


@pytest.mark.parametrize("threshold", ["null", "0.2"])
def test_metrics_csv_is_the_one_of_an_accuracy_every_step(threshold, tmp_path, monkeypatch):
    rows, computed = trained(tmp_path / "logged", threshold, monkeypatch, every_step=False)
    every, steps = trained(tmp_path / "every", threshold, monkeypatch, every_step=True)
    assert rows == every
    written = [row["step"] for row in rows if row.get("train/acc")]
    assert written and computed == len(written) < steps
    assert threshold == "null" or steps < 45  # the early-stopping case did stop early
