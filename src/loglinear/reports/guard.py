"""What protects a report on disk: a report is written only when it keeps every finished run the report there
holds (the runs its results.csv lists as finished, and as many as its table.md counts), unless `--force`; so a copy
of a sweep without its `runs/`, a folder whose manifest another spec replaced, or a results.csv re-reported in place
after losing rows or statuses never overwrites its tables with fewer results. A report file there that cannot be
read protects it too: it is refused, never taken for an empty report. `sweep run` checks the same before it
rewrites a sweep's manifest (`protect_before_run`)."""

from __future__ import annotations

from pathlib import Path

from loglinear.protocol.held import unplanned
from loglinear.protocol.results import Sweep
from loglinear.reports.files import CSV, TABLE, read_csv
from loglinear.reports.tables import finished_count
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import FINISHED
from loglinear.sweeps.manifest import MANIFEST, read_manifest
from loglinear.sweeps.spec import Run, SweepSpec, shared_resolver


def protect_report(out: Path, sweep: Sweep, force: bool = False) -> None:
    """A ConfigError, before anything is written, when the report on disk holds a finished run that `sweep` has
    not (its folder gone, or no longer in the manifest), or counts more finished runs than `sweep` has, naming both
    counts, or cannot be read; nothing with `force`."""
    if force:
        return
    redo = f"restore them, or replace the report with `loglinear sweep report {out} --force`"
    finished = {r.run_id for r in sweep.records if r.status in FINISHED}
    before = reported_runs(out)
    lost = sorted(before - finished)
    if lost:
        raise ConfigError(
            f"{out / CSV} reports {len(before)} finished runs, this report would have {len(finished)}: {len(lost)} "
            f"of them ({lost[0]}{', ...' if len(lost) > 1 else ''}) have no result in {out}/runs or are not in its "
            f"manifest; {redo}")
    counted = reported_count(out)
    if counted is not None and len(finished) < counted:
        raise ConfigError(f"{out / TABLE} reports {counted} finished runs, this report would have {len(finished)} "
                          f"(a results.csv that lost rows or whose statuses were edited?); {redo}")


def protect_before_run(out: Path, spec: SweepSpec, runs: list[Run]) -> None:
    """A ConfigError before `sweep run` writes anything into `out` when the report there holds a finished run that
    `spec` no longer plans: none of `runs` (its first stage), nor an extension or confirmation run of it
    (sweeps/plan.py), as the sweep's manifest records it."""
    planned = {i for run in runs for i in run.ids}
    unplanned_ids = sorted(reported_runs(out) - planned)
    if not unplanned_ids:
        return
    entries = {e["id"]: e for e in read_manifest(out)["runs"]} if (out / MANIFEST).is_file() else {}
    resolver = shared_resolver(spec)
    for rid in unplanned_ids:
        entry = entries.get(rid)
        reason = f"it is not in {MANIFEST}" if entry is None else unplanned(spec, runs, entry, resolver)[1]
        if reason is not None:
            raise ConfigError(
                f"{out / CSV} reports run {rid} as finished, and {spec.path or spec.name} does not plan it ({reason}): "
                f"nothing was written; restore the spec's runs, or run it into another --out")


def reported_runs(out: Path) -> set[str]:
    """The ids of the finished runs the results.csv in `out` lists (none without one); one that cannot be read is
    a ConfigError."""
    path = out / CSV
    if not path.is_file():
        return set()
    try:
        header, rows = read_csv(path)
    except (OSError, ValueError) as e:
        raise _unreadable(path, str(e)) from None
    if not {"run_id", "status"} <= set(header):
        raise _unreadable(path, "no run_id and status columns")
    return {row["run_id"] for row in rows if row["status"] in FINISHED}


def reported_count(out: Path) -> int | None:
    """How many finished runs the table.md in `out` reports (None without one, or without the section that says);
    one that cannot be read is a ConfigError."""
    path = out / TABLE
    if not path.is_file():
        return None
    try:
        return finished_count(path.read_bytes().decode())
    except (OSError, UnicodeDecodeError) as e:
        raise _unreadable(path, str(e)) from None


def _unreadable(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path} cannot be read ({why}), so nothing tells which finished runs the report there holds: "
                       f"restore it, or replace the report with `loglinear sweep report {path.parent} --force`")
