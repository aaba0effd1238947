"""`train.fused_loss`: a run whose loss is fused with the LM head trains as the unfused run does, to float32's
rounding (the fused loss itself: tests/models/test_linear_cross_entropy.py), and logs the same accuracy."""

from __future__ import annotations

import csv

import lightning as L
import pytest

from loglinear.packing.compatibility import PackError, check_trainable_packed
from loglinear.runs.config import load_run_config
from loglinear.runs.train import train

STEPS = 40
RUN = [
    "model.d_model=16", "model.n_layers=1", "model.deltanet_heads=1", "model.mixer=log_linear_gated_deltanet",
    "data.batch_size=8", "data.val_size=16", "data.test_size=16",
    "train.lr=3.0e-3", "train.warmup_steps=5", f"train.max_steps={STEPS}", "train.val_every=10",
    "train.early_stop_threshold=null", "logger.wandb.mode=disabled", "logger.progress=false",
]
TASKS = {
    "mqar": ["data.task=mqar", "data.task_args.vocab_size=64", "data.task_args.seq_len=32",
             "data.task_args.num_kv_pairs=4"],
    "regbench": ["data=data/regbench.yaml", "data.task_args.seq_len=32", "data.task_args.max_string_len=6",
                 "data.eval_sets=[{}]", "data.train_size=null"],  # several right answers: `allowed`
}


class Losses(L.Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, *args) -> None:
        self.values.append(float(outputs["loss"]))


def run(tmp_path, task: str, fused: bool) -> tuple[list[float], list[dict[str, str]]]:
    out = tmp_path / f"{task}-{fused}"
    losses = Losses()
    cfg = load_run_config(None, [*RUN, *TASKS[task], f"train.fused_loss={str(fused).lower()}", f"out_dir={out}"])
    assert train(cfg, callbacks=[losses])["status"] == "max_steps"
    with (out / "metrics.csv").open(newline="") as f:
        return losses.values, list(csv.DictReader(f))


@pytest.mark.parametrize("task", list(TASKS))
def test_a_run_with_the_fused_loss_trains_as_the_unfused_run(task, tmp_path):
    (unfused, unfused_rows), (fused, fused_rows) = run(tmp_path, task, False), run(tmp_path, task, True)
    assert len(fused) == len(unfused) == STEPS
    assert fused == pytest.approx(unfused, rel=1e-4, abs=1e-5)  # rounding carried through the training
    accuracies = [[float(r["train/acc"]) for r in rows if r.get("train/acc")] for rows in (unfused_rows, fused_rows)]
    assert accuracies[0] and accuracies[1] == pytest.approx(accuracies[0], abs=1e-9)
    validations = [[r["val/loss"] for r in rows if r.get("val/loss")] for rows in (unfused_rows, fused_rows)]
    assert len(validations[0]) == len(validations[1]) == STEPS // 10


def test_a_pack_refuses_the_fused_loss(tmp_path):
    cfg = load_run_config(None, [*RUN, *TASKS["mqar"], "train.fused_loss=true", f"out_dir={tmp_path / 'r'}"])
    with pytest.raises(PackError, match=r"cannot train in a pack: train.fused_loss"):
        check_trainable_packed(cfg)
