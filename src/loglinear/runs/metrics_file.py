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
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

from loglinear.runs.folder import write_text_atomic
from loglinear.runs.metrics_rows import METRICS, read_rows

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
