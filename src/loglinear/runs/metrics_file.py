"""`metrics.csv`: every logged metric of a run, one row per logging call, kept whole across resumes.

Lightning's CSVLogger starts a new file when it finds one, so a resumed run lost the rows logged
before its interruption. This logger rewrites the whole file atomically whenever it is saved, and
every checkpoint records how many rows it had written (`RunTracker` asks `flush()`). A resumed run
keeps exactly that many rows: the rows logged after the checkpoint are logged again by the resumed
run, so the file ends up equal to the one an uninterrupted run writes.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

from loglinear.runs.folder import write_text_atomic

METRICS = "metrics.csv"
SAVE_EVERY_ROWS = 50  # between checkpoints, save at least this often so that a live run can be followed


class MetricsFile(Logger):
    """A Lightning logger writing `<out>/metrics.csv`; `keep_rows` rows of an existing file are kept."""

    def __init__(self, out: Path, keep_rows: int = 0) -> None:
        super().__init__()
        self.path = Path(out) / METRICS
        self.rows: list[dict[str, Any]] = read_rows(self.path)[:keep_rows] if keep_rows else []
        self._saved = len(self.rows)
        if keep_rows or self.path.exists():
            self.save()

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str:
        return str(self.path.parent)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """The configuration is in config.yaml beside this file."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row = {k: (v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}
        if step is not None:
            row["step"] = step
        self.rows.append(row)
        if len(self.rows) - self._saved >= SAVE_EVERY_ROWS:
            self.save()

    def flush(self) -> int:
        """Save, and return the number of rows saved (what a checkpoint records)."""
        self.save()
        return len(self.rows)

    @rank_zero_only
    def save(self) -> None:
        columns = sorted({k for row in self.rows for k in row})
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        write_text_atomic(self.path, text.getvalue())
        self._saved = len(self.rows)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The whole rows of a metrics.csv (empty cells left out), or [] when there is none. A last row cut short
    (the file does not end where a row ends: a copy cut off, a disk that filled outside this code's writes) is
    dropped with one line on stderr saying so."""
    if not path.is_file():
        return []
    text = path.read_text()
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if rows and (not text.endswith("\n") or None in rows[-1].values()):
        rows.pop()
        print(f"loglinear train: {path} ends in a row cut short (row {len(rows) + 1}); it is dropped, the "
              f"{len(rows)} whole rows before it are kept", file=sys.stderr, flush=True)
    return [{k: v for k, v in row.items() if v not in ("", None)} for row in rows]


def validation_history(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """[(steps trained, val/acc)] of the validation rows of a metrics.csv (Lightning logs a validation after n
    steps at step n - 1)."""
    return [(int(row["step"]) + 1, float(row["val/acc"])) for row in rows if "val/acc" in row]
