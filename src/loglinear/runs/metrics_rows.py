"""Reading a run's `metrics.csv` (written by runs/metrics_file.py during training) without the training
libraries: its whole rows and its validation history."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

METRICS = "metrics.csv"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The whole rows of a metrics.csv (empty cells left out), or [] when there is none. A last row cut short
    (the file does not end where a row ends: a copy cut off, a disk that filled outside this code's writes) is
    dropped with one line on stderr saying so. A file that is not UTF-8 text is a ValueError saying where."""
    if not path.is_file():
        return []
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})") from None
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
