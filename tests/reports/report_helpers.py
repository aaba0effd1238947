"""Hand-made sweep folders for the report tests: manifest entries with result.json files, and table parsing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def run_entry(mixer: str, d_model: int, lr: float, seed: int, result: dict[str, Any] | None, *,
              lambda_param: str = "softplus", task: str = "mqar", stage: str | None = None,
              curve: list[tuple[int, float]] | None = None, **point: Any) -> dict[str, Any]:
    """A manifest entry and its result; `curve` [(steps trained, validation accuracy)] becomes its metrics.csv."""
    config = {
        "data": {"task": task, "task_args": {"seq_len": 64}},
        "model": {"mixer": mixer, "d_model": d_model, "n_layers": 2, "lambda_param": lambda_param},
        "train": {"lr": lr, "seed": seed},
    }
    varied = {"model.mixer": mixer, "model.d_model": d_model, "train.lr": lr, "train.seed": seed, **point}
    return {"config": config, "point": varied, "result": result, "stage": stage, "curve": curve}


def finished(acc: float | None, status: str = "max_steps", *, test_acc: float | None = None,
             test: dict[str, float] | None = None, **extra: Any) -> dict[str, Any]:
    """A result whose final validation accuracy is `acc` and test accuracy `test_acc` (default: `acc`)."""
    final_val = {} if acc is None else {"val/acc": acc}
    tested = {} if status == "diverged" else {"test/acc": acc if test_acc is None else test_acc, **(test or {})}
    return {"status": status, "val_accuracy": acc, "step": 100, "steps_to_threshold": None, "params": 1000,
            "wall_time_s": 1.0, "final_val": final_val, "test": tested, **extra}


def make_sweep(folder: Path, entries: list[dict[str, Any]], name: str = "hand", **manifest: Any) -> Path:
    """A sweep folder: manifest.json listing `entries` (with `manifest`'s extra keys: report, protocol), result.json
    for those with a result, and metrics.csv for those with a curve (Lightning's step: steps trained - 1)."""
    runs = []
    for i, entry in enumerate(entries):
        rid = f"run{i:03d}"
        runs.append({"id": rid, "dir": f"runs/{rid}", "point": entry["point"], "args": [], "config": entry["config"],
                     **({"stage": entry["stage"]} if entry.get("stage") else {})})
        if entry["result"] is not None:
            (folder / "runs" / rid).mkdir(parents=True)
            result = {**entry["result"], "config": entry["config"]}
            (folder / "runs" / rid / "result.json").write_text(json.dumps(result))
            if entry.get("curve"):
                rows = "".join(f"{steps - 1},{acc}\n" for steps, acc in entry["curve"])
                (folder / "runs" / rid / "metrics.csv").write_text("step,val/acc\n" + rows)
    varied = list(dict.fromkeys(k for e in entries for k in e["point"]))
    (folder / "manifest.json").write_text(json.dumps({"name": name, "varied_keys": varied, "zip": [], "runs": runs,
                                                      **manifest}))
    return folder


def table_rows(table: str, section: int = 0) -> list[list[str]]:
    """The header and rows of the `section`-th Markdown table of `table`."""
    blocks, current = [], []
    for line in table.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip("|").split("|")])
        elif current:
            blocks.append(current)
            current = []
    header, _, *rows = blocks[section]
    return [header, *rows]


def row(rows: list[list[str]], *first: str) -> list[str]:
    """The cells after `first` of the row that starts with `first`."""
    return next(r[len(first):] for r in rows if r[: len(first)] == list(first))


def section_rows(table: str, heading: str) -> list[list[str]]:
    """The header and rows of the first Markdown table under the `## heading...` section of `table`."""
    return table_rows(table.split("\n## " + heading, 1)[1])
