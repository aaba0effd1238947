"""What protects a report on disk: a report is written only when it keeps every finished run the report there
holds (its results.csv), unless `--force`; so a copy of a sweep without its `runs/`, or a folder whose manifest
another spec replaced, never overwrites its tables with fewer results."""

from __future__ import annotations

import csv
from pathlib import Path

from loglinear.reports.files import CSV
from loglinear.reports.results import Sweep
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import FINISHED


def protect_report(out: Path, sweep: Sweep, force: bool = False) -> None:
    """A ConfigError, before anything is written, when the report on disk holds a finished run that `sweep` has
    not (its folder gone, or no longer in the manifest), naming both counts; nothing with `force`."""
    before = finished_runs(out / CSV)
    after = {r.run_id for r in sweep.records if r.status in FINISHED}
    lost = sorted(before - after)
    if lost and not force:
        raise ConfigError(
            f"{out / CSV} reports {len(before)} finished runs, this report would have {len(after)}: {len(lost)} of "
            f"them ({lost[0]}{', ...' if len(lost) > 1 else ''}) have no result in {out}/runs or are not in its "
            f"manifest; restore them, or replace the report with `loglinear sweep report {out} --force`")


def finished_runs(path: Path) -> set[str]:
    """The ids of the finished runs a results.csv lists (none without one, or in one that cannot be read)."""
    try:
        with path.open(newline="") as f:
            return {row["run_id"] for row in csv.DictReader(f) if row.get("status") in FINISHED and row.get("run_id")}
    except (OSError, csv.Error, UnicodeDecodeError):
        return set()
