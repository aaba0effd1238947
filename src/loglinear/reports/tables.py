"""The report's tables, one per cell of the sweep (rows: architectures and the keys that make rows of their own,
columns: d_model): test accuracy, solve rate, steps to the threshold, how the runs ended, accuracy given solved,
the selected learning rate, accuracy by test length and by number of key-value pairs, the operator implementations
and the missing runs; with the notes that say how to read them."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from loglinear.protocol.results import HEADERS, Cell, Sweep, mean_std
from loglinear.reports.frontier import PAIRS_PREFIX
from loglinear.reports.state_tracking import (
    SEQ_ACC_PREFIX,
    SEQ_LEN_PREFIX,
    num_classes,
    scaled,
    slice_values,
    tested_at_several_lengths,
    training_lengths,
)
from loglinear.reports.statistics import kaplan_meier, t_interval, wilson
from loglinear.runs.folder import FINISHED
from loglinear.runs.stopping import CONVERGENCE
from loglinear.sweeps.spec import describe

MISSING_HEADING = "## Missing or failed runs"
NOTE = (
    "Test accuracy (%): mean (sample standard deviation) over seeds, at the learning rate with the best mean "
    "validation accuracy in each cell (listed below with the number of learning rates it was chosen from; every "
    "cell of an architecture chooses among the same ones, and each λ parameterisation is a row of its own): "
    "selected on validation, reported on test. Both are the final weights' (after early stopping or at the budget). "
    "`all solved`: every run of the cell solved (its validation accuracy met the {pct}% threshold under the "
    "stopping rule; its test accuracy is the number beside it). `[k/n]`: only k of the cell's n runs finished (the "
    "others are listed at the end). Diverged runs count as 0."
)

SEVERAL_LENGTHS_NOTE = (
    "With several test lengths, the test accuracy above is the mean over the examples of every test set, so over "
    "the lengths {lengths} when the sets have the same size: read the tables by test length below."
)

MIXED_NOTE = (
    "These tables are built from runs that ran different implementations of the log-linear operator: {counts} "
    "(see \"Operator implementations\" below)."
)

IMPLEMENTATIONS_NOTE = (
    "The implementations of the log-linear operator the finished runs' mixers ran (result.json `implementations`) "
    "and the fused kernels' self-check verdicts they relied on (docs/operator.md, \"The fused kernels' self-check\")."
)

SEVERAL_MACHINES_NOTE = (
    "These tables are built from runs whose results were written on {n} machines (see \"Machines\" below)."
)

MACHINES_NOTE = (
    "The machines the finished runs' results were written on (result.json `machine`): the processor, the instruction "
    "set torch's CPU kernels used, the GPU, torch's version and the threads. Processors round differently, and a run "
    "whose accuracy sits near a threshold can end otherwise on another machine (docs/reports.md, \"Machines\")."
)


def mean_std_text(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """`mean (std)` of `values` times `scale` (percent by default), `-` for none, no std for one value."""
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{scale * mean:.{digits}f}" + ("" if std is None else f" ({scale * std:.{digits}f})")


def pct_text(threshold: float) -> str:
    return f"{100 * threshold:g}"


def format_cell(cell: Cell, threshold: float) -> str:
    """`55.9 (3.1)`, `99.1 (0.3), all solved` (every run solved), `55.9` (one seed) or `-`, with ` [k/n]` when
    runs are missing."""
    values = cell.values
    text = mean_std_text(values)
    if values and cell.all_solved(threshold):
        text += ", all solved"
    return text if cell.complete else f"{text} [{len(values)}/{len(cell.runs)}]"


def format_rate(cell: Cell, threshold: float) -> str:
    """The solve rate: `3/5 [23, 88]` (Wilson 95% interval in percent) or `-` without a run that has a result."""
    return rate_text(cell.solved(threshold))


def format_escape_rate(cell: Cell, plateau: float, threshold: float) -> str:
    """The escape rate, as `format_rate`."""
    return rate_text(cell.escaped(plateau, threshold))


def rate_text(outcomes: list[bool]) -> str:
    """`k/n [low, high]` of binary outcomes, with the Wilson 95% interval in percent; `-` for none."""
    rate = wilson(sum(outcomes), len(outcomes))
    return "-" if rate is None else f"{sum(outcomes)}/{len(outcomes)} [{100 * rate.low:.0f}, {100 * rate.high:.0f}]"


def format_endings(cell: Cell, threshold: float) -> str:
    """`3 threshold, 4 plateau, 1 improving`: how the cell's runs ended (runs/stopping.py), `-` without a result."""
    endings = cell.endings(threshold)
    return ", ".join(f"{endings.count(c)} {c}" for c in CONVERGENCE if c in endings) or "-"


def format_steps(cell: Cell, threshold: float) -> str:
    """`1200 (3/5 reached)`, `never (1/5 reached)` or `-` without a run with a metrics.csv."""
    events = cell.passages(threshold)
    curve = kaplan_meier(events)
    if curve is None:
        return "-"
    reached = f"({sum(e.reached for e in events)}/{len(events)} reached)"
    return f"{'never' if curve.median == math.inf else f'{curve.median:.0f}'} {reached}"


def format_given_solved(cell: Cell, threshold: float) -> str:
    """The test accuracy of the solved runs: `99.6 [99.2, 100.0] (n=3)`, `99.5 (n=1)` or `-` when none is."""
    solved = [100 * r.test_score for r in cell.runs if r.solved(threshold) and r.test_score is not None]
    if not solved:
        return "-"
    ci = t_interval(solved, within=(0.0, 100.0))
    interval = "" if ci is None else f" [{ci.low:.1f}, {ci.high:.1f}]"
    return f"{sum(solved) / len(solved):.1f}{interval} (n={len(solved)})"


def format_config(cell: Cell) -> str:
    if cell.pick is None:
        return "-"
    edge = "" if cell.edge is None else f", at the {cell.edge} edge"
    return f"{cell.pick_text} (of {cell.candidates}{edge})"


def pivot(sweep: Sweep, cells: dict, fmt) -> str:
    rows = list(dict.fromkeys(r.row for r in sweep.records))
    columns = sorted({r.d_model for r in sweep.records})
    header = [column_header(k) for k in sweep.row_keys] + [f"d_model {d}" for d in columns]
    body = [list(row) + [fmt(cells[(row, d)]) if (row, d) in cells else "" for d in columns] for row in rows]
    return markdown_table(header, body)


def accuracy_note(sweep: Sweep, pct: str) -> str:
    lengths = test_lengths(sweep)
    note = NOTE.format(pct=pct)
    if len(lengths) >= 2:
        note = f"{note} {SEVERAL_LENGTHS_NOTE.format(lengths=', '.join(map(str, lengths)))}"
    mixed = mixed_implementations(sweep)
    if mixed:
        note += "\n\n" + MIXED_NOTE.format(counts=mixed)
    machines = sum(label is not None for label in machine_counts(sweep))
    return note if machines < 2 else note + "\n\n" + SEVERAL_MACHINES_NOTE.format(n=machines)


def mixed_implementations(sweep: Sweep) -> str | None:
    """`chunk (3 runs), triton (12 runs)` when the finished runs that ran the operator did not all run the same
    implementations; None otherwise."""
    counts: dict[str, int] = {}
    for r in sweep.records:
        if r.status in FINISHED and r.implementations:
            label = implementations_label(r.implementations)
            counts[label] = counts.get(label, 0) + 1
    if len(counts) < 2:
        return None
    return ", ".join(f"{label} ({n} run{'s' if n > 1 else ''})" for label, n in sorted(counts.items()))


def implementations_section(sweep: Sweep) -> str:
    """One row per (implementations, self-check verdicts) among the finished runs, with how many runs."""
    finished = [r for r in sweep.records if r.status in FINISHED]
    if not any(r.implementations is not None for r in finished):
        return "Not recorded in the finished runs' results."
    groups: dict[tuple[str, str], int] = {}
    for r in finished:
        key = (implementations_label(r.implementations), "; ".join(map(verdict_text, r.selfchecks)) or "-")
        groups[key] = groups.get(key, 0) + 1
    rows = [[label, str(n), verdicts] for (label, verdicts), n in groups.items()]
    return IMPLEMENTATIONS_NOTE + "\n\n" + markdown_table(["implementations", "runs", "self-check"], rows)


def machines_section(sweep: Sweep) -> str:
    """One row per machine among the finished runs, with how many runs ran there, most first, "not recorded" last."""
    counts = machine_counts(sweep)
    if set(counts) <= {None}:
        return "Not recorded in the finished runs' results."
    ordered = sorted(counts.items(), key=lambda item: (item[0] is None, -item[1]))
    rows = [[(label or "not recorded").replace("|", "\\|"), str(n)] for label, n in ordered]
    return MACHINES_NOTE + "\n\n" + markdown_table(["machine", "runs"], rows)


def machine_counts(sweep: Sweep) -> Counter:
    """How many finished runs each machine wrote the result of (None: not recorded)."""
    return Counter(r.machine for r in sweep.records if r.status in FINISHED)


def implementations_label(implementations: tuple[str, ...] | None) -> str:
    if implementations is None:
        return "not recorded"
    return " + ".join(f"`{name}`" for name in implementations) or "none (no mixer runs the operator)"


def verdict_text(verdict: dict[str, Any]) -> str:
    """`passed on NVIDIA H100 (bfloat16)`, or `failed on ...: the failure (stored in PATH)`, for a table cell."""
    text = f"{verdict['status']} on {verdict['device']} ({verdict['dtype']})"
    if verdict["status"] == "failed":
        text += f": {verdict['failure']} (stored in {verdict['path']})"
    return text.replace("|", "\\|")


def test_lengths(sweep: Sweep) -> list[int]:
    """The test lengths (test/acc/seq_len=N) of the sweep's runs tested at several lengths, ascending; none when
    every run is tested at one length."""
    return sorted(slice_values(filter(tested_at_several_lengths, sweep.records), SEQ_LEN_PREFIX))


def length_labels(sweep: Sweep, lengths: list[int]) -> list[str]:
    """Column labels of test lengths: `40 (train)` inside the training range (when all runs share one), else `80`."""
    trained = {training_lengths(r) for r in sweep.records if tested_at_several_lengths(r)}
    low, high = trained.pop() if len(trained) == 1 and None not in trained else (0, -1)
    return [f"{n} (train)" if low <= n <= high else str(n) for n in lengths]


def length_table(sweep: Sweep, cells: dict) -> str | None:
    """State tracking: per test length, the scaled accuracy, the full-sequence accuracy and the runs whose test
    accuracy there is above the threshold (k/n) of the selected runs."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return None
    header = [column_header(k) for k in sweep.row_keys] + ["d_model"]
    for n, label in zip(lengths, length_labels(sweep, lengths), strict=True):
        header += [f"{label} scaled", f"{n} seq %", f"{n} above {pct_text(sweep.report.threshold)}%"]
    body = []
    for (row, d_model), cell in cells.items():
        runs = [r for r in cell.runs if r.status in FINISHED and tested_at_several_lengths(r)]
        if not runs:
            continue
        classes = num_classes(runs[0])
        per_length = slice_values(runs, SEQ_LEN_PREFIX)
        per_length_seq = slice_values(runs, SEQ_ACC_PREFIX)
        line = [*row, str(d_model)]
        for n in lengths:
            scores = [scaled(a, classes) for a in per_length.get(n, [])]
            at_n = per_length.get(n, [])
            above = f"{sum(a > sweep.report.threshold for a in at_n)}/{len(at_n)}" if at_n else "-"
            line += [mean_std_text(scores, scale=1.0, digits=2), mean_std_text(per_length_seq.get(n, [])), above]
        body.append(line)
    return markdown_table(header, body) if body else None


def pairs_table(sweep: Sweep, cells: dict) -> str | None:
    """MQAR: per number of key-value pairs tested, the test accuracy and the runs whose test accuracy there is
    above the threshold (k/n) of the selected runs; None without two numbers of pairs."""
    slices = sorted({n for cell in cells.values() for n in slice_values(cell.runs, PAIRS_PREFIX)})
    if len(slices) < 2:
        return None
    header = [column_header(k) for k in sweep.row_keys] + ["d_model"]
    for n in slices:
        header += [f"{n} pairs %", f"{n} above {pct_text(sweep.report.threshold)}%"]
    body = []
    for (row, d_model), cell in cells.items():
        per_pairs = slice_values([r for r in cell.runs if r.status in FINISHED], PAIRS_PREFIX)
        if not per_pairs:
            continue
        line = [*row, str(d_model)]
        for n in slices:
            at_n = per_pairs.get(n, [])
            above = f"{sum(a > sweep.report.threshold for a in at_n)}/{len(at_n)}" if at_n else "-"
            line += [mean_std_text(at_n), above]
        body.append(line)
    return markdown_table(header, body) if body else None


def missing_runs(sweep: Sweep) -> str:
    """The section under MISSING_HEADING: `None: all N runs finished.`, else `k of N runs:` and a line for each."""
    missing = [r for r in sweep.records if r.status not in FINISHED]
    if not missing:
        return f"None: all {len(sweep.records)} runs finished."
    lines = []
    for r in missing:
        error = r.result.get("error")
        reason = "no result yet (not run, running or interrupted)" if r.status == "missing" else r.status
        lines.append(f"- `runs/{r.run_id}` ({describe(r.point)}): {reason}" + (f": {error}" if error else ""))
    return f"{len(missing)} of {len(sweep.records)} runs:\n\n" + "\n".join(lines)


def finished_count(table: str) -> int | None:
    """How many finished runs a table.md reports, read from its MISSING_HEADING section (`missing_runs`); None
    when it has no such section."""
    found = re.match(r"\s*(?:None: all (\d+) runs finished\.|(\d+) of (\d+) runs:)",
                     table.partition(f"\n{MISSING_HEADING}\n")[2])
    if found is None:
        return None
    return int(found[1]) if found[1] else int(found[3]) - int(found[2])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def column_header(key: str) -> str:
    return HEADERS.get(key, key.rsplit(".", 1)[-1])
