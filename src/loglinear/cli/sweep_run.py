"""The work of `loglinear sweep run`, `sweep report` and `sweep wandb`: a sweep from its spec to its report. It
stands above the runs (sweeps/), the protocol's decisions (protocol/: the design check, the grid extension and the
confirmation runs a two-stage sweep selects on its own results) and the report (reports/) it ends with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from loglinear.cli.kept_runs import Kept, keep_held
from loglinear.protocol.confirmation import confirmation_runs
from loglinear.protocol.held import extension_runs
from loglinear.protocol.power import check_design
from loglinear.protocol.primary_check import check_primary
from loglinear.protocol.results import Sweep, sweep_at
from loglinear.protocol.stages import later_stages
from loglinear.reports.files import CSV
from loglinear.reports.guard import protect_before_run
from loglinear.reports.lambda_plots import write_lambda_report
from loglinear.reports.report import write_report
from loglinear.reports.results_csv import load_sweep_from_csv
from loglinear.reports.spread import resolve_spread
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import FINISHED
from loglinear.sweeps.commands import Launch, print_plan, sweep_out
from loglinear.sweeps.manifest import MANIFEST, adopt_legacy, check_owner, write_manifest
from loglinear.sweeps.progress import ELSEWHERE, progress_line
from loglinear.sweeps.runner import SweepOutcome, exclusive_sweep
from loglinear.sweeps.spec import Run, SweepSpec, expand, load_spec
from loglinear.sweeps.stalls import ALLOWED, count_stall, marks

NOT_FINISHED = 75
"""The exit status of a `sweep run` stopped by its --time-limit with runs to go (EX_TEMPFAIL: run it again)."""
NO_PROGRESS = 78
"""The exit status of a `sweep run` stopped by its --time-limit without progress a second time in a row: no run
reaches a checkpoint within the limit (EX_CONFIG: running it again would not help)."""


def run_sweep(spec_path: str, out_arg: str | None, launch: Launch, *, dry_run: bool = False,
              set_aside: bool = False) -> int:
    """Run the sweep of `spec_path` into `out_arg` (default sweeps_out/<name>), skipping finished runs and resuming
    the others, then write its report and print its summary; `dry_run`: list the runs only. A spec that no longer
    plans a finished or started run of the folder is refused before anything is written, or with `set_aside` those
    runs are moved aside first (protocol/held.py). The exit status of `loglinear sweep run`."""
    spec = resolve_spread(load_spec(spec_path))  # the design's spread read where the spec says it was measured
    design = check_design(spec)  # before anything runs or is written: a design that cannot conclude is refused
    if design is not None:
        print(f"loglinear sweep: {design.text()}", file=sys.stderr)
    runs = expand(spec)
    check_primary(spec, runs)  # the comparison the report will test is one of the sweep's, before any compute
    out = sweep_out(spec, out_arg)
    check_owner(out, spec)
    runs = adopt_legacy(out, runs)
    if dry_run:
        keep_held(out, spec, runs, set_aside, dry_run=True)
        print_plan(spec, runs, out, launch.pack)
        stages = later_stages(spec, runs)
        if stages is not None:
            print(stages)
        return 0
    with exclusive_sweep(out):
        kept = keep_held(out, spec, runs, set_aside)
        protect_before_run(out, spec, runs)  # a spec that drops reported runs is refused before the manifest changes
        write_manifest(out, spec, kept.beside(runs))
        before = marks(out)
        outcome = launch(spec.name, runs, out)
        if spec.protocol is not None and not outcome.interrupted:
            runs, outcome = _confirm(launch, spec, runs, out, outcome, kept)
        if outcome.timed_out or not outcome.interrupted:
            stalls = count_stall(out, before, outcome.timed_out)
    unfinished = [rid for rid, s in outcome.statuses.items() if s not in FINISHED]
    if outcome.timed_out:
        print(progress_line(spec.name, list(outcome.statuses.values())), file=sys.stderr)
        if stalls > ALLOWED:
            print(f"loglinear sweep: time limit reached {stalls} times in a row without progress: no run reached a "
                  f"checkpoint within it (its start, data and first training step take longer); give a longer "
                  f"--time-limit (or fewer runs per --pack)", file=sys.stderr)
            return NO_PROGRESS
        print(f"loglinear sweep: time limit reached, not finished: {len(unfinished)} of {len(runs)} runs of this stage "
              f"to go (the running ones saved their checkpoints); run the same command again to go on", file=sys.stderr)
        return NOT_FINISHED
    if outcome.interrupted:
        if launch.launcher == "local":
            print(f"loglinear sweep: interrupted with {len(unfinished)} of {len(runs)} runs unfinished; resume with: "
                  f"loglinear sweep run {subprocess.list2cmdline([spec_path, '--out', str(out)])}", file=sys.stderr)
        return 130
    print_report(out, summary=True)
    if unfinished:
        elsewhere = sum(outcome.statuses[rid] == ELSEWHERE for rid in unfinished)
        held = f", {elsewhere} of them being trained by another process" if elsewhere else ""
        print(f"loglinear sweep: {len(unfinished)} of {len(runs)} runs did not finish{held} (see {out}/table.md)",
              file=sys.stderr)
        return 1
    return 0


def _confirm(launch: Launch, spec: SweepSpec, runs: list[Run], out: Path, first: SweepOutcome,
             kept: Kept) -> tuple[list[Run], SweepOutcome]:
    """Stage 2 of a two-stage sweep: select each cell's learning rate on the selection runs (stage 1, over, with
    its extensions beyond the grid's edges), add the chosen configurations on the confirmation seeds to the manifest
    and run them."""
    runs, first = _extend(launch, spec, runs, out, first, kept)
    if first.interrupted:
        return runs, first
    confirmation = adopt_legacy(out, confirmation_runs(spec, sweep_at(spec, runs, out)))
    kept.settle([*runs, *confirmation])
    write_manifest(out, spec, [*runs, *confirmation])
    second = launch(f"{spec.name} confirmation", confirmation, out)
    return [*runs, *confirmation], SweepOutcome({**first.statuses, **second.statuses}, second.interrupted,
                                                second.timed_out)


def _extend(launch: Launch, spec: SweepSpec, runs: list[Run], out: Path, first: SweepOutcome,
            kept: Kept) -> tuple[list[Run], SweepOutcome]:
    """Up to `protocol.extensions` rounds: each cell whose pick sits at an edge of its learning rates gets the next
    rate beyond it on the selection seeds, and so do the cells compared with it (protocol/extension.py). Rerunning
    the sweep makes the same decisions from the same results, so it resumes here too."""
    assert spec.protocol is not None
    for round_ in range(1, spec.protocol.extensions + 1):
        extra = extension_runs(spec, runs, out)
        if not extra:
            break
        runs = [*runs, *extra]
        write_manifest(out, spec, kept.beside(runs))
        outcome = launch(f"{spec.name} grid extension {round_}", extra, out)
        first = SweepOutcome({**first.statuses, **outcome.statuses}, outcome.interrupted, outcome.timed_out)
        if outcome.interrupted:
            break
    return runs, first


def report_sweep(out: Path, *, lambda_levels: bool = False, spec: str | None = None,
                 from_results: str | None = None, force: bool = False) -> int:
    """`loglinear sweep report`: the report of the sweep in `out`; `lambda_levels`: and lambda by level per cell;
    `force`: even when it has fewer finished runs than the report it replaces. With `spec`: the report of the
    study that `from_results` (default `out/results.csv`) records, re-read with its spec (reports/results_csv.py),
    for a study whose run folders are gone."""
    if spec is None:
        if from_results is not None:
            raise ConfigError("--from-results needs --spec SPEC, the spec the study was run from")
        if not (out / MANIFEST).is_file() and (out / CSV).is_file():
            raise ConfigError(f"{out} has no {MANIFEST} (its run folders are gone) but a {CSV}: re-report it with "
                              f"--spec SPEC, the spec it was run from (configs/sweeps/NAME.yaml)")
        print_report(out, force=force)
    else:
        if (out / MANIFEST).is_file():
            raise ConfigError(f"{out} holds a sweep's {MANIFEST}: its report reads the run folders; re-report a "
                              f"results.csv (--spec) into another folder")
        if lambda_levels:
            raise ConfigError("--lambda reads the runs' checkpoints: it cannot re-report from results.csv (--spec)")
        sweep = load_sweep_from_csv(out / CSV if from_results is None else Path(from_results),
                                    resolve_spread(load_spec(spec)), out)
        out.mkdir(parents=True, exist_ok=True)
        print_report(out, sweep, force)
    if lambda_levels:
        written, skipped = write_lambda_report(out)
        print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
        for name, reason in skipped.items():
            print(f"skipped {name}: {reason}", file=sys.stderr)
    return 0


def write_wandb(spec_path: str, out_arg: str | None) -> int:
    """`loglinear sweep wandb`: a wandb sweep file whose runs are `loglinear train` commands, and the manifest of its
    runs, after the same refusals as `sweep run` (the design check, the report's primary check)."""
    from loglinear.sweeps.launchers import write_wandb_sweep

    spec = resolve_spread(load_spec(spec_path))
    design = check_design(spec)  # the same refusal as `sweep run`, before anything is written
    if design is not None:
        print(f"loglinear sweep: {design.text()}", file=sys.stderr)
    runs = expand(spec)
    check_primary(spec, runs)
    out = sweep_out(spec, out_arg)
    check_owner(out, spec)
    keep_held(out, spec, runs, set_aside=False)  # no protocol here: every held run is planned or refused
    path = write_wandb_sweep(spec, out)
    write_manifest(out, spec, runs)
    print(
        f"wrote {path} ({len(runs)} runs into {out}/runs/<run_id>). "
        "Start the sweep, then one agent per GPU or machine, "
        f"from this directory:\n  wandb sweep --project loglinear {path}\n  wandb agent ENTITY/loglinear/SWEEP_ID\n"
        f"When they are done: loglinear sweep report {out}"
    )
    return 0


def print_report(out: Path, sweep: Sweep | None = None, force: bool = False, summary: bool = False) -> None:
    """Write the report (of `sweep` when given, else of the sweep folder `out`); its tables go to stdout, whole or,
    with `summary`, cut to the summary (`Report.summary`), the list of files to stderr; `force`: even when it has
    fewer finished runs than the report it replaces."""
    report = write_report(out, sweep, force)
    print(report.summary(out) if summary else report.table)
    print(f"wrote {', '.join(str(p) for p in report.written)}", file=sys.stderr)
    for name, reason in report.skipped.items():
        print(f"skipped {name}: {reason}", file=sys.stderr)
