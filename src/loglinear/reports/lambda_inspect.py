"""`loglinear inspect RUN_DIR`: what a trained log-linear run does with its Fenwick levels.

Loads the run's `config.yaml` and `last.ckpt`, runs its validation data (the run's DataModule)
through the model, records lambda at every layer with forward hooks on the lambda heads, and
writes beside result.json:

- `lambda_levels.csv`: one row per (layer, head, level): `tokens` (occupied positions counted),
  `mean`, `std` (over tokens, population), quantiles `q05 ... q95`, `effective_mean` (mean share of
  the output norm the level carries, see models/lambda_levels.py) and `effective_tokens` (the
  occupied tokens it is measured on: the first `probe_sequences` validation sequences of each length).
- `lambda_levels.png` (drawn by `lambda_plots.inspect_and_plot`): per layer, mean lambda by level, one
  line per head, q25-q75 shaded; below, the effective weights.
- `lambda_recall.csv` (MQAR runs): the effective weight of every level at the query positions, grouped by the
  level that holds the recalled key (reports/lambda_recall.py), on the first `RECALL_SEQUENCES` sequences of
  every validation batch.

A level counts at a token only where it is occupied (models/lambda_levels.py): levels above
bit_length(t), and the levels below whose block lies after t, are left out, not counted as 0.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from loglinear.models import MIXERS
from loglinear.models.lambda_levels import (
    QUANTILES,
    LevelRow,
    LevelStatistics,
    capture_lambda,
    effective_weights,
    lambda_heads,
    level_output_norms,
)
from loglinear.protocol.results import is_log_linear
from loglinear.reports import lambda_recall
from loglinear.reports.lambda_recall import RECALL_CSV, RECALL_SEQUENCES, RecallRow, RecallWeights
from loglinear.runs.config import ConfigError, RunConfig, load_mapping, resolve
from loglinear.runs.folder import CONFIG, FINISHED, LAST, read_result, write_text_atomic

LEVELS_CSV = "lambda_levels.csv"
LEVELS_PNG = "lambda_levels.png"
CHECKPOINT = LAST
PROBE_SEQUENCES = 8
"""Validation sequences of each length on which the effective weights are measured (a mixer pass per level)."""


class InspectError(ConfigError):
    """A run that cannot be inspected; the message is one line."""


@dataclass
class Inspection:
    """What `inspect_run` measured and wrote."""

    run_dir: Path
    mixer: str
    lambda_param: str
    rows: list[LevelRow]
    val_accuracy: float | None
    written: list[Path]
    recall_rows: list[RecallRow]
    step: int | None = None
    """The training step of the inspected weights (the checkpoint's), None when it does not say."""
    finished: bool = True
    """Whether the run finished (its result.json); else the weights are those of its last checkpoint."""

    @property
    def title(self) -> str:
        acc = "" if self.val_accuracy is None else f", best val/acc {100 * self.val_accuracy:.1f}%"
        unfinished = "" if self.finished else (
            f", unfinished run: its weights at step {'?' if self.step is None else self.step} ({CHECKPOINT})")
        return f"{self.mixer}, lambda {self.lambda_param}{acc}{unfinished}"


def read_run_config(run_dir: Path) -> RunConfig:
    path = run_dir / CONFIG
    if not path.is_file():
        raise InspectError(f"{path} not found: {run_dir} is not a run directory of `loglinear train`")
    return resolve(load_mapping(path, "a run's config.yaml"))


def pick_device(device: str) -> torch.device:
    """"auto": CUDA when available, else CPU; "cpu", "cuda", "cuda:1" as given (CUDA must exist)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise InspectError(f"unknown device {device!r}; use auto, cpu or cuda[:N]") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise InspectError(f"device {device!r} asked for, but no CUDA device is available; use --device cpu")
    return chosen


def inspect_run(
    run_dir: str | Path, device: str = "auto", max_batches: int | None = None,
    probe_sequences: int = PROBE_SEQUENCES,
) -> Inspection:
    """Measure lambda per level on the run's validation data; write lambda_levels.csv into run_dir."""
    from loglinear.runs.lit import LitLanguageModel
    from loglinear.synthetics import SyntheticDataModule

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    if not is_log_linear(cfg.model.mixer):
        log_linear = ", ".join(name for name, mixer in MIXERS.items() if mixer.log_linear)
        raise InspectError(f"{run_dir} is a {cfg.model.mixer} run: only log-linear mixers have lambda ({log_linear})")
    checkpoint = run_dir / CHECKPOINT
    if not checkpoint.is_file():
        raise InspectError(
            f"{checkpoint} not found: the run has not validated yet (a checkpoint is saved at each validation)"
        )
    where = pick_device(device)
    module = LitLanguageModel(cfg.model, cfg.train)
    try:
        saved = torch.load(checkpoint, map_location=where, weights_only=True)
        state = saved["state_dict"]
    except Exception as e:  # any failure to read it (truncated, not a checkpoint) means it cannot be inspected
        raise InspectError(f"{checkpoint} cannot be read ({type(e).__name__}): not a whole checkpoint") from None
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise InspectError(f"{checkpoint} does not match {run_dir / CONFIG} (was it edited?): {first}") from None
    model = module.model.to(where).eval()
    datamodule = SyntheticDataModule(cfg.data)
    recall = RecallWeights() if cfg.data.task == "mqar" else None
    stats = measure(model, datamodule.val_dataloader(), where, max_batches, probe_sequences, recall)
    rows = stats.rows()
    if not rows:
        raise InspectError(f"{run_dir}: the run's validation data gave no batch to inspect")
    result = read_result(run_dir) or {}
    inspection = Inspection(run_dir, cfg.model.mixer, cfg.model.lambda_param, rows,
                            result.get("val_accuracy"), [], [] if recall is None else recall.rows(),
                            saved.get("global_step"), result.get("status") in FINISHED)
    write_csv(inspection.rows, run_dir / LEVELS_CSV)
    inspection.written.append(run_dir / LEVELS_CSV)
    if recall is not None:
        lambda_recall.write_csv(inspection.recall_rows, run_dir / RECALL_CSV)
        inspection.written.append(run_dir / RECALL_CSV)
    return inspection


def measure(model: torch.nn.Module, batches, device: torch.device, max_batches: int | None = None,
            probe_sequences: int = PROBE_SEQUENCES, recall: RecallWeights | None = None) -> LevelStatistics:
    """Lambda per level of `model` over `batches` ({"inputs": (B, T)} dicts); effective weights on the first
    `probe_sequences` sequences of each sequence length; with `recall` (MQAR batches, with "targets"), also the
    effective weights at the query positions of the first RECALL_SEQUENCES sequences of every batch."""
    stats = LevelStatistics()
    heads = lambda_heads(model)
    if not heads:
        raise InspectError("the model has no lambda head (not a log-linear mixer)")
    mixers = [m for m in model.modules() if any(getattr(m, "lambda_head", None) is h for h in heads)]
    mixer_inputs: dict[int, torch.Tensor] = {}
    probed: dict[int, int] = {}  # sequence length -> sequences probed
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            break
        inputs = batch["inputs"].to(device)
        hooks = [m.register_forward_pre_hook(_keep_input(mixer_inputs, i)) for i, m in enumerate(mixers)]
        try:
            with torch.no_grad(), capture_lambda(model) as captured:
                model(inputs, torch.zeros_like(inputs, dtype=torch.bool))  # no position scored: no logits computed
        finally:
            for hook in hooks:
                hook.remove()
        seq_len = inputs.shape[1]
        n_probe = max(0, min(probe_sequences - probed.get(seq_len, 0), inputs.shape[0]))
        probed[seq_len] = probed.get(seq_len, 0) + n_probe
        n_recall = 0 if recall is None else min(RECALL_SEQUENCES, inputs.shape[0])
        n_norms = max(n_probe, n_recall)
        for layer, (lam, mixer) in enumerate(zip(captured, mixers, strict=True)):
            stats.add(layer, lam[0])
            if n_norms:
                norms = level_output_norms(mixer, mixer_inputs[layer][:n_norms])
                weights = effective_weights(lam[0][:n_norms], norms)
                if n_probe:
                    stats.add_effective(layer, weights[:n_probe])
                if n_recall:
                    recall.add(layer, lam[0][:n_recall], norms[:n_recall], batch["inputs"][:n_recall],
                               batch["targets"][:n_recall])
    return stats


def _keep_input(store: dict[int, torch.Tensor], index: int):
    def hook(module: torch.nn.Module, args: tuple) -> None:
        store[index] = args[0]

    return hook


CSV_HEADER = ["layer", "head", "level", "tokens", "mean", "std", *(f"q{round(100 * q):02d}" for q in QUANTILES),
              "effective_mean", "effective_tokens"]


def write_csv(rows: list[LevelRow], path: Path) -> None:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(CSV_HEADER)
    for r in rows:
        writer.writerow([r.layer, r.head, r.level, r.tokens, repr(r.mean), repr(r.std),
                         *(repr(r.quantiles[q]) for q in QUANTILES),
                         "" if math.isnan(r.effective_mean) else repr(r.effective_mean), r.effective_tokens])
    write_text_atomic(path, text.getvalue())


def read_csv(path: Path) -> list[LevelRow]:
    """The rows of a lambda_levels.csv (as `write_csv` wrote them)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        names = CSV_HEADER[6:-2]
        return [
            LevelRow(int(d["layer"]), int(d["head"]), int(d["level"]), int(d["tokens"]), float(d["mean"]),
                     float(d["std"]), {q: float(d[name]) for q, name in zip(QUANTILES, names, strict=True)},
                     float(d["effective_mean"]) if d["effective_mean"] else float("nan"), int(d["effective_tokens"]))
            for d in reader
        ]


def summary(inspection: Inspection) -> str:
    """Per layer, mean lambda by level averaged over heads (one line each)."""
    lines = [f"{inspection.run_dir}: {inspection.title}; mean lambda by level 0, 1, ... (mean over heads)"]
    for layer in sorted({r.layer for r in inspection.rows}):
        rows = [r for r in inspection.rows if r.layer == layer]
        levels = sorted({r.level for r in rows})
        means = [sum(r.mean for r in rows if r.level == lv) / sum(r.level == lv for r in rows) for lv in levels]
        lines.append(f"  layer {layer}: " + " ".join(f"{m:.3g}" for m in means))
    return "\n".join(lines)
