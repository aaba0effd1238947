"""How noisy is a run's first crossing of the early-stopping threshold on validation?

Three measurements, printed as Markdown (benchmarks/RESULTS.md, "Crossing the threshold: noise pilot"):

1. `--sizes PRESET [OVERRIDES...]`: the validation set of a run config, its examples and scored queries, and the
   binomial standard error of its accuracy (the mean over examples of each example's accuracy) near the threshold,
   taking every query as an independent trial with the same probability.
2. `--committed`: in every committed results/*/results.csv, the runs whose validation accuracy crossed the
   threshold: their final validation accuracy against their test accuracy.
3. `--train OUT`: runs of the config in `--sizes` with early stopping off, that also score the test set at every
   validation; per run, per rule "stop once validation accuracy has been above the threshold on k consecutive
   evaluations" (k = 1, 2, 3), the step it would stop at and the test accuracy of the weights there, and whether
   the validation accuracy fell back to the threshold or below after the first crossing.

Usage:
  OMP_NUM_THREADS=1 python -m benchmarks.threshold_crossings --sizes configs/mqar_cpu.yaml model.d_model=16 \
      --committed --train /tmp/crossings --mixers attention gated_deltanet --seeds 10 11 12
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import torch

from loglinear.runs.config import SOLVED, load_run_config
from loglinear.targets import IGNORE_INDEX

RULES = (1, 2, 3)


def scored_per_example(loader: Any) -> list[int]:
    counts: list[int] = []
    for batch in loader:
        counts += (batch["targets"] != IGNORE_INDEX).sum(-1).tolist()
    return [c for c in counts if c > 0]


def standard_error(scored: list[int], p: float) -> float:
    """Binomial standard error of the mean over examples of each example's accuracy, queries independent."""
    return math.sqrt(sum(p * (1 - p) / q for q in scored)) / len(scored)


def sizes(preset: str, overrides: list[str]) -> None:
    from loglinear.synthetics import SyntheticDataModule

    cfg = load_run_config(preset, [*overrides, "out_dir=/tmp/unused"])
    data = SyntheticDataModule(cfg.data)
    for stage, loader in (("validation", data.val_dataloader()), ("test", data.test_dataloader())):
        scored = scored_per_example(loader)
        errors = ", ".join(f"{100 * standard_error(scored, p):.2f} at {100 * p:g}%" for p in (0.98, 0.99, 0.995))
        print(f"- {stage}: {len(scored)} examples, {sum(scored)} scored queries; standard error (points) {errors}")


def committed(root: Path) -> None:
    print("| study | runs crossed | early-stopped | final val % (mean, min) | test % (mean, min) | val − test "
          "(mean, sd, points) | test <= 99% | test <= 98% |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(root.glob("*/results.csv")):
        rows = [r for r in csv.DictReader(path.open()) if r["steps_to_threshold"]]
        if not rows:
            print(f"| {path.parent.name} | 0 | | | | | | |")
            continue
        val = [float(r["val_score"]) for r in rows]
        test = [float(r["test_score"]) for r in rows]
        diff = [100 * (v - t) for v, t in zip(val, test, strict=True)]
        mean = sum(diff) / len(diff)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diff) / (len(diff) - 1)) if len(diff) > 1 else 0.0
        early = sum(r["status"] == "early_stopped" for r in rows)
        print(f"| {path.parent.name} | {len(rows)} | {early} | {100 * sum(val) / len(val):.2f}, {100 * min(val):.2f} "
              f"| {100 * sum(test) / len(test):.2f}, {100 * min(test):.2f} | {mean:+.2f}, {sd:.2f} "
              f"| {sum(t <= SOLVED for t in test)} | {sum(t <= 0.98 for t in test)} |")


class TestEveryValidation(L.Callback):
    """Scores the test set after every validation: [(steps trained, val/acc, test acc)]."""

    def __init__(self) -> None:
        self.history: list[tuple[int, float, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking or "val/acc" not in trainer.callback_metrics:
            return
        total, examples = 0.0, 0
        with torch.no_grad():
            for batch in trainer.datamodule.test_dataloader():
                _, counts = pl_module.shared_step(batch)
                has = counts["scored"] > 0
                total += float((counts["correct"][has] / counts["scored"][has]).sum())
                examples += int(has.sum())
        self.history.append((trainer.global_step, float(trainer.callback_metrics["val/acc"]), total / examples))


def stop_under(history: list[tuple[int, float, float]], k: int) -> tuple[int, float, float] | None:
    """The evaluation at which the rule "k consecutive evaluations above the threshold" stops, None if never."""
    held = 0
    for entry in history:
        held = held + 1 if entry[1] > SOLVED else 0
        if held == k:
            return entry
    return None


def train_runs(out: Path, preset: str, overrides: list[str], mixers: list[str], seeds: list[int]) -> None:
    from loglinear.runs.train import train

    torch.set_num_threads(1)
    print("| mixer | seed | " + " | ".join(f"k={k}: step, val %, test %" for k in RULES)
          + " | fell back after the first crossing |")
    print("|---|---|" + "---|" * len(RULES) + "---|")
    for mixer in mixers:
        for seed in seeds:
            folder = out / f"{mixer}_{seed}"
            cfg = load_run_config(preset, [*overrides, f"model.mixer={mixer}", f"train.seed={seed}",
                                           f"data.seed={seed}", "train.early_stop_threshold=null",
                                           "logger.wandb.mode=disabled", "logger.progress=false",
                                           f"out_dir={folder}"])
            recorder = TestEveryValidation()
            train(cfg, callbacks=[recorder])
            (folder / "crossings.json").write_text(json.dumps(recorder.history))
            cells = []
            for k in RULES:
                stop = stop_under(recorder.history, k)
                cells.append("never" if stop is None else f"{stop[0]}, {100 * stop[1]:.2f}, {100 * stop[2]:.2f}")
            first = stop_under(recorder.history, 1)
            after = [v for step, v, _ in recorder.history if first is not None and step > first[0]]
            fell = "-" if first is None else f"{sum(v <= SOLVED for v in after)} of {len(after)} later evaluations"
            print(f"| {mixer} | {seed} | " + " | ".join(cells) + f" | {fell} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", metavar="PRESET_AND_OVERRIDES")
    parser.add_argument("--committed", action="store_true")
    parser.add_argument("--train", type=Path)
    parser.add_argument("--mixers", nargs="+", default=["attention"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[10, 11, 12])
    args = parser.parse_args()
    preset, overrides = (args.sizes[0], args.sizes[1:]) if args.sizes else (None, [])
    if preset:
        sizes(preset, overrides)
    if args.committed:
        committed(Path(__file__).resolve().parent.parent / "results")
    if args.train:
        if not preset:
            parser.error("--train needs --sizes PRESET [OVERRIDES...]: the runs' config")
        train_runs(args.train, preset, overrides, args.mixers, args.seeds)


if __name__ == "__main__":
    main()
