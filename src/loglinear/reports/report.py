"""`loglinear sweep report DIR`: `results.csv` (one row per run), `paired.csv` and `paired_by_length.csv`
(the comparisons with every test and its Holm-adjusted p-value), `table.md` (the protocol, test accuracy,
solve rates with Wilson intervals, steps to the threshold, accuracy given solved, the learning rates behind
them, the ranking of the λ parameterisations when λ varies, accuracy by test length, the missing or failed
runs, then the comparisons: the declared primary tested alone at alpha, the secondaries with what survives
Holm, the operator implementations the runs ran (with a note under the first table when they differ), and
the equal-state comparison when the sweep has one) and PNG plots (with the MQAR accuracy against state
size). docs/reports.md describes the protocol and the statistics."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loglinear.reports.frontier import PAIRS_PREFIX, equal_state_comparisons
from loglinear.reports.paired import COLUMNS as PAIRED_COLUMNS
from loglinear.reports.paired import (
    MINUS,
    Family,
    Pairing,
    TestResult,
    holm_family,
    p_text,
    paired_comparisons,
    signed,
    unpairable_reason,
)
from loglinear.reports.plots import write_plots
from loglinear.reports.primary import primary_line
from loglinear.reports.recall_levels import RECALL_COLUMNS, recall_state, write_recall_report
from loglinear.reports.results import (
    HEADERS,
    LAMBDA_KEY,
    MIXER_KEY,
    Cell,
    Sweep,
    base_mixer,
    display_name,
    is_log_linear,
    load_sweep,
    mean_std_text,
    slice_values,
)
from loglinear.reports.state_tracking import (
    SEQ_ACC_PREFIX,
    SEQ_LEN_PREFIX,
    accuracy_at,
    num_classes,
    scaled,
    training_lengths,
)
from loglinear.reports.statistics import ALPHA, kaplan_meier, t_interval, wilson
from loglinear.runs.folder import FINISHED, write_text_atomic
from loglinear.sweeps.spec import describe

TABLE = "table.md"
CSV = "results.csv"
PAIRED_CSV = "paired.csv"
PAIRED_LENGTH_CSV = "paired_by_length.csv"
STATE_KINDS = ("per_layer", "total")
RESULT_COLUMNS = ("val_accuracy", "steps_to_threshold", "step", "params", "wall_time_s")
CSV_COLUMNS = (
    "run_id", "stage", "status", "mixer", "lambda_param", "d_model", "n_layers", "lr", "seed", "task",
    *RESULT_COLUMNS, "val_score", "test_score", "implementations", *(f"state_size_{kind}" for kind in STATE_KINDS),
    *RECALL_COLUMNS,
)
"""`val_score` / `test_score`: what the selection and the tables use (`results.Record`), as fractions;
`implementations`: the log-linear operator's implementations the run ran, space-separated (empty: none or not
recorded); `state_size_per_layer` / `state_size_total`: what the decoder holds per sequence at the training
length (then `.../seq_len=L` at each test length L, after the test metrics); `state_at_recall_*`: what it holds
at the MQAR test queries (reports/recall_levels.py)."""

NOTE = (
    "Test accuracy (%): mean (sample standard deviation) over seeds, at the learning rate with the best mean "
    "validation accuracy in each cell (listed below with the number of learning rates it was chosen from; every "
    "cell of an architecture chooses among the same ones, and each λ parameterisation is a row of its own): "
    "selected on validation, reported on test. Both are the final weights' (after early stopping or at the budget). "
    "`>={pct}`: every seed above {pct}%. `[k/n]`: only k of the cell's n runs finished (the others are listed at "
    "the end). Diverged runs count as 0."
)
RATE_NOTE = (
    "`k/n [low, high]`: k of the cell's n runs above the threshold on test, with the Wilson 95% interval of the "
    "rate in percent. Steps: Kaplan-Meier median of the steps until validation accuracy first passed {pct}% "
    "(from each run's metrics.csv; a run that never did is censored where it ended), `never` when more than half "
    "never did; `m reached`: how many did. Accuracy given solved: mean test accuracy of the runs above {pct}% with "
    "its Student-t 95% interval (one run: no interval). kaplan_meier.png draws the curves."
)
PAIRED_NOTE = (
    "Each comparison: the learning rates each side chose among; per shared seed, the exact McNemar test of "
    "`solved` (test accuracy above {pct}%){plateau}; the log-rank test of the steps to {pct}% on validation (all runs "
    "of each side); and the paired Student-t 95% interval of the difference in test accuracy (percentage points), "
    "which treats accuracy as continuous and roughly normal, so it misleads when runs either solve the task or "
    "stay on a plateau. The primary comparison, declared by the spec before the runs, is tested alone at alpha "
    "{alpha:g} (its own line below); every other test is secondary: `Holm`, its p-value adjusted by "
    "Holm-Bonferroni over the {n} secondary tests of this report (family-wise error {alpha:g}); `survives`: "
    "adjusted p <= {alpha:g}."
)

RANKING_NOTE = (
    "Each log-linear mixer's λ parameterisations and its base mixer (λ = 1 on every level), each at its own "
    "selected learning rate, ranked by solve rate (runs above {pct}%), then mean test accuracy. A description, "
    "not a test: arms whose Wilson intervals overlap are not told apart by it; the paired comparisons below "
    "test each λ against the default one. Steps: Kaplan-Meier median of the steps to {pct}% on validation.\n"
)
EDGE_NOTE = (
    "`at the lowest edge` / `at the highest edge`: the pick is the smallest or largest learning rate its cell "
    "compared, so the grid may not hold the cell's optimum. Under the two-stage protocol such a cell got further "
    "rates beyond that edge on the selection seeds (up to `protocol.extensions`) before confirmation: a mark left "
    "here is a pick still at an edge after them, and the two sides of a comparison may then have compared different "
    "numbers of rates (each by the same rule; the comparisons list both)."
)

EQUAL_STATE_NOTE = (
    "Each log-linear model against the base model of its d_model whose state is the smallest at least as large "
    "(numbers its decoder holds per sequence over all layers at the longest test length; `mqar_frontier.png` "
    "draws every cell), paired by seed, each side at its own selected learning rate, with the tests of the "
    "paired comparisons above (secondary ones in the same Holm family)."
)

IMPLEMENTATIONS_NOTE = (
    "The implementations of the log-linear operator the finished runs' mixers ran (result.json `implementations`) "
    "and the fused kernels' self-check verdicts they relied on (docs/operator.md, \"The fused kernels' self-check\")."
)

MIXED_NOTE = (
    "These tables are built from runs that ran different implementations of the log-linear operator: {counts} "
    "(see \"Operator implementations\" below)."
)

LENGTH_NOTE = (
    "Per test length L: `scaled`, Grazzi et al.'s scaled accuracy (acc - 1/C) / (1 - 1/C) of the test accuracy "
    "(C classes: chance 0, perfect 1), mean (std) over seeds; `seq %`, full-sequence accuracy (every scored "
    "position right), mean (std); `solved`, k/n runs above {pct}% test accuracy at L. `(train)` marks lengths inside "
    "the training range. With only the final position scored (`scored: last`, for parity and the word problems) "
    "these measure the task's answer at length L."
)

SEVERAL_LENGTHS_NOTE = (
    "With several test lengths, the test accuracy above is the mean over the examples of every test set, so over "
    "the lengths {lengths} when the sets have the same size: read the tables by test length below."
)

PAIRS_NOTE = (
    "Test accuracy (%) on the test examples with each number of key-value pairs, mean (sample standard deviation) "
    "over the seeds of each cell's selected configuration; `k/n`: runs above {pct}% on those examples. "
    "mqar_acc_vs_kv_pairs.png and the panels of mqar_frontier.png draw them."
)

LENGTH_PAIRED_NOTE = (
    "Mixer − baseline test accuracy at each test length in percentage points, mean over the shared seeds with the "
    "paired Student-t 95% interval; `k/n`: the mixer was better on k of the n shared seeds; `solved a vs b`: runs "
    "above {pct}% at that length on each side; `*`: a test of that comparison is significant (the primary alone, a "
    "secondary after Holm; which one, and every p-value: paired_by_length.csv)."
)


@dataclass
class Report:
    """What `write_report` produced: the Markdown tables, the files written, and the plots skipped (with why)."""

    table: str
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def write_report(out: str | Path) -> Report:
    out = Path(out)
    sweep = load_sweep(out)
    pairings = paired_comparisons(sweep)
    by_length = length_pairings(sweep)
    equal_state = equal_state_comparisons(sweep, sweep.cells())
    family = holm_family([*pairings, *by_length, *equal_state], sweep.report.primary)
    table = render_tables(sweep, pairings, by_length, family, equal_state)
    write_text_atomic(out / TABLE, table)
    write_csv(sweep, out / CSV)
    write_paired_csv([*pairings, *equal_state], family, out / PAIRED_CSV)
    files = [out / CSV, out / PAIRED_CSV, out / TABLE]
    if by_length:
        write_paired_csv(by_length, family, out / PAIRED_LENGTH_CSV)
        files.append(out / PAIRED_LENGTH_CSV)
    written, skipped = write_plots(sweep, out)
    written += write_recall_report(sweep, out)
    return Report(table, [*files, *written], skipped)


def length_pairings(sweep: Sweep) -> list[Pairing]:
    """State tracking: the paired comparisons at each test length ([] for a sweep without several lengths)."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return []
    return [p for n in lengths for p in paired_comparisons(sweep, score=accuracy_at(n), length=n)]


def render_tables(sweep: Sweep, pairings: list[Pairing], by_length: list[Pairing], family: list[TestResult],
                  equal_state: list[Pairing] = ()) -> str:
    cells = sweep.cells()
    report = sweep.report
    pct = _pct(report.threshold)
    parts = [f"# {sweep.name}\n", sweep.protocol_text, "## Test accuracy\n",
             _pivot(sweep, cells, lambda c: format_cell(c, report.threshold)), _note(sweep, pct),
             f"## Solve rate: runs above {pct}% test accuracy\n",
             _pivot(sweep, cells, lambda c: format_rate(c, report.threshold))]
    if report.plateau is not None:
        parts += [f"## Escaped the plateau: runs above {_pct(report.plateau)}% test accuracy\n",
                  _pivot(sweep, cells, lambda c: format_rate(c, report.plateau))]  # type: ignore[arg-type]
    parts += [f"## Steps to {pct}% validation accuracy (Kaplan-Meier median)\n",
              _pivot(sweep, cells, lambda c: format_steps(c, report.threshold)),
              f"## Test accuracy of the runs above {pct}%\n",
              _pivot(sweep, cells, lambda c: format_given_solved(c, report.threshold)), RATE_NOTE.format(pct=pct),
              "## Selected learning rate of each cell (of how many)\n", _pivot(sweep, cells, format_config),
              EDGE_NOTE]
    ranking = lambda_ranking(sweep, cells)
    if ranking:
        parts += ["## Ranking of the λ parameterisations\n", ranking, RANKING_NOTE.format(pct=pct)]
    lengths = length_table(sweep, cells)
    if lengths:
        parts += ["## State tracking by test length\n", lengths, LENGTH_NOTE.format(pct=pct)]
    pairs = pairs_table(sweep, cells)
    if pairs:
        parts += ["## MQAR by number of key-value pairs\n", pairs, PAIRS_NOTE.format(pct=pct)]
    if by_length:
        parts += ["## Paired differences by test length\n", length_paired_table(sweep, by_length, family),
                  LENGTH_PAIRED_NOTE.format(pct=pct)]
    parts += ["## Operator implementations\n", implementations_section(sweep)]
    parts += ["## Missing or failed runs\n", missing_runs(sweep)]
    parts += ["## Paired comparisons\n", paired_lines(sweep, pairings, family)]
    if equal_state:
        parts += ["## Equal-state comparison\n", EQUAL_STATE_NOTE,
                  "\n".join(f"- {comparison_line(p, family)}" for p in equal_state)]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def _pct(threshold: float) -> str:
    return f"{100 * threshold:g}"


def format_cell(cell: Cell, threshold: float) -> str:
    """`55.9 (3.1)`, `>=99` (every run above the threshold), `55.9` (one seed) or `-`, with ` [k/n]` when runs
    are missing."""
    values = cell.values
    if not values:
        text = "-"
    elif cell.all_above(threshold):
        text = f">={_pct(threshold)}"
    else:
        text = mean_std_text(values)
    return text if cell.complete else f"{text} [{len(values)}/{len(cell.runs)}]"


def format_rate(cell: Cell, threshold: float) -> str:
    """`3/5 [23, 88]` (Wilson 95% interval in percent) or `-` without a run that has a result."""
    n = len(cell.values)
    rate = wilson(cell.above(threshold), n)
    return "-" if rate is None else f"{cell.above(threshold)}/{n} [{100 * rate.low:.0f}, {100 * rate.high:.0f}]"


def format_steps(cell: Cell, threshold: float) -> str:
    """`1200 (3/5 reached)`, `never (1/5 reached)` or `-` without a run with a metrics.csv."""
    events = cell.passages(threshold)
    curve = kaplan_meier(events)
    if curve is None:
        return "-"
    reached = f"({sum(e.reached for e in events)}/{len(events)} reached)"
    return f"{'never' if curve.median == math.inf else f'{curve.median:.0f}'} {reached}"


def format_given_solved(cell: Cell, threshold: float) -> str:
    """`99.6 [99.2, 100.0] (n=3)`, `99.5 (n=1)` or `-` when no run is above the threshold."""
    solved = [100 * v for v in cell.values if v > threshold]
    if not solved:
        return "-"
    ci = t_interval(solved)
    interval = "" if ci is None else f" [{ci.low:.1f}, {min(ci.high, 100.0):.1f}]"
    return f"{sum(solved) / len(solved):.1f}{interval} (n={len(solved)})"


def format_config(cell: Cell) -> str:
    if cell.lr is None:
        return "-"
    edge = "" if cell.edge is None else f", at the {cell.edge} edge"
    return f"{cell.lr:.3g} (of {cell.candidates}{edge})"


def paired_lines(sweep: Sweep, pairings: list[Pairing], family: list[TestResult]) -> str:
    """The note, one line per comparison with its tests, then one sentence of what survives Holm."""
    if not pairings:
        return f"No paired comparison: {unpairable_reason(sweep)}."
    report = sweep.report
    plateau = "" if report.plateau is None else f" and of `escaped` (above {_pct(report.plateau)}%)"
    lines = [PAIRED_NOTE.format(pct=_pct(report.threshold), plateau=plateau, n=len(family.secondaries),
                                alpha=ALPHA), ""]
    lines += [primary_line(family, report.primary is not None), ""]
    lines += [f"- {comparison_line(p, family)}" for p in pairings]
    lines += ["", holm_summary(family)]
    return "\n".join(lines)


def comparison_line(p: Pairing, family: list[TestResult]) -> str:
    """`d_model=16: Log-Linear Mamba-2 − Mamba-2 (learning rates 8 vs 8): solved 3/5 vs 1/5, McNemar p=0.500
    (Holm 1.000); ...`, led by `**Primary**` for the primary comparison."""
    head = f"{p.cell}: {p.mixer_label} {MINUS} {p.baseline_label}"
    if p.reason is not None:
        return f"{head}: no pair ({p.reason})"
    chosen = f"learning rates {p.candidates[0]} vs {p.candidates[1]}" + (
        "" if p.candidates[0] == p.candidates[1] else ", unequal")
    tests = {r.test: r for r in family if r.pairing is p}
    parts = []
    for test, threshold in (("solved", p.threshold), ("escaped", p.plateau)):
        if test in tests:
            a, b, only_a, only_b = p.outcomes(threshold)  # type: ignore[arg-type]
            parts.append(f"{test} {a}/{p.n_pairs} vs {b}/{p.n_pairs} (discordant {only_a} vs {only_b}), "
                         f"McNemar {_p(tests[test])}")
    if "steps" in tests:
        reached = [sum(e.reached for e in side) for side in p.passages]
        parts.append(f"steps to {_pct(p.threshold)}%: reached {reached[0]}/{len(p.passages[0])} vs "
                     f"{reached[1]}/{len(p.passages[1])}, log-rank {_p(tests['steps'])}")
    ci = p.interval
    if ci is None:
        parts.append(f"accuracy {signed(p.diffs[0])} points, one pair (no interval)")
    else:
        parts.append(f"accuracy (paired t, continuous) {signed(ci.estimate)} points [{signed(ci.low)}, "
                     f"{signed(ci.high)}], better on {p.wins} of {p.n_pairs} seeds"
                     + (f", {_p(tests['accuracy'])}" if "accuracy" in tests else ""))
    text = f"{head} ({chosen}): " + "; ".join(parts)
    if p.left_out:
        text += f"; {len(p.left_out)} seed(s) left out, without a result on one side"
    return ("**Primary** " if any(r.primary for r in tests.values()) else "") + text


def _p(result: TestResult) -> str:
    if result.adjusted is None:
        verdict = "significant" if result.survives else "not significant"
        return f"p={p_text(result.p)} (primary, alone at alpha {ALPHA:g}: {verdict})"
    mark = ", survives" if result.survives else ""
    return f"p={p_text(result.p)} (Holm {p_text(result.adjusted)}{mark})"


def holm_summary(family: Family) -> str:
    """One sentence: the secondary tests that survive Holm over the report's secondaries (the primary has its
    own line)."""
    if not family:
        return "No comparison has a pair of runs (the reasons are above), so there is nothing to test."
    secondaries = family.secondaries
    if not secondaries:
        return "The primary test is the report's only test: there is no secondary one."
    survivors = [r for r in secondaries if r.survives]
    found = "; ".join(f"{r.pairing.name}: {r.test}" for r in survivors)
    return (f"Of the {len(secondaries)} secondary tests of this report, {len(survivors)} survive Holm at "
            f"{ALPHA:g}" + (f": {found}." if survivors else
                            ", so they do not show a difference between any two arms."))


def length_paired_table(sweep: Sweep, by_length: list[Pairing], family: list[TestResult]) -> str:
    """Rows: each comparison in each cell; columns: test lengths; cells `+1.2 [−3.4, +5.8] 2/3, solved 3 vs 3`."""
    lengths = sorted({p.length for p in by_length})  # type: ignore[type-var]
    header = ["comparison", "cell", *length_labels(sweep, lengths)]  # type: ignore[arg-type]
    rows: dict[tuple[str, str], list[str]] = {}
    for p in by_length:
        line = rows.setdefault((f"{p.mixer_label} {MINUS} {p.baseline_label}", p.cell), [""] * len(lengths))
        survives = any(r.survives for r in family if r.pairing is p)
        line[lengths.index(p.length)] = _length_cell(p) + (" *" if survives else "")
    return markdown_table(header, [[*key, *line] for key, line in rows.items()])


def _length_cell(p: Pairing) -> str:
    if p.reason is not None:
        return "no pair"
    ci = p.interval
    interval = f" [{signed(ci.low)}, {signed(ci.high)}]" if ci else ""
    mean = ci.estimate if ci else p.diffs[0]
    a, b, _, _ = p.outcomes(p.threshold)
    return f"{signed(mean)}{interval} {p.wins}/{p.n_pairs}, solved {a} vs {b}"


def _pivot(sweep: Sweep, cells: dict, fmt) -> str:
    rows = list(dict.fromkeys(r.row for r in sweep.records))
    columns = sorted({r.d_model for r in sweep.records})
    header = [_header(k) for k in sweep.row_keys] + [f"d_model {d}" for d in columns]
    body = [list(row) + [fmt(cells[(row, d)]) if (row, d) in cells else "" for d in columns] for row in rows]
    return markdown_table(header, body)


def _note(sweep: Sweep, pct: str) -> str:
    lengths = test_lengths(sweep)
    note = NOTE.format(pct=pct)
    if len(lengths) >= 2:
        note = f"{note} {SEVERAL_LENGTHS_NOTE.format(lengths=', '.join(map(str, lengths)))}"
    mixed = mixed_implementations(sweep)
    return note if not mixed else note + "\n\n" + MIXED_NOTE.format(counts=mixed)


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
    """The state-tracking test lengths of the sweep (test/acc/seq_len=N), ascending."""
    return sorted(slice_values([r for r in sweep.records if r.task != "mqar"], SEQ_LEN_PREFIX))


def length_labels(sweep: Sweep, lengths: list[int]) -> list[str]:
    """Column labels of test lengths: `40 (train)` inside the training range (when all runs share one), else `80`."""
    trained = {training_lengths(r) for r in sweep.records if r.task != "mqar"}
    low, high = trained.pop() if len(trained) == 1 and None not in trained else (0, -1)
    return [f"{n} (train)" if low <= n <= high else str(n) for n in lengths]


def length_table(sweep: Sweep, cells: dict) -> str | None:
    """State tracking: per test length, the scaled accuracy, the full-sequence accuracy and the runs above the
    threshold (k/n) of the selected runs."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return None
    header = [_header(k) for k in sweep.row_keys] + ["d_model"]
    for n, label in zip(lengths, length_labels(sweep, lengths), strict=True):
        header += [f"{label} scaled", f"{n} seq %", f"{n} solved"]
    body = []
    for (row, d_model), cell in cells.items():
        runs = [r for r in cell.runs if r.status in FINISHED and r.task != "mqar"]
        if not slice_values(runs, SEQ_LEN_PREFIX):
            continue
        classes = num_classes(runs[0])
        per_length = slice_values(runs, SEQ_LEN_PREFIX)
        per_length_seq = slice_values(runs, SEQ_ACC_PREFIX)
        line = [*row, str(d_model)]
        for n in lengths:
            scores = [scaled(a, classes) for a in per_length.get(n, [])]
            at_n = per_length.get(n, [])
            solved = f"{sum(a > sweep.report.threshold for a in at_n)}/{len(at_n)}" if at_n else "-"
            line += [mean_std_text(scores, scale=1.0, digits=2), mean_std_text(per_length_seq.get(n, [])), solved]
        body.append(line)
    return markdown_table(header, body) if body else None


def lambda_ranking(sweep: Sweep, cells: dict) -> str | None:
    """When λ varies: per log-linear mixer and column (d_model and the other row keys), its λ rows and its base
    mixer's row ranked by solve rate, then mean test accuracy (equal ones share a rank); None otherwise."""
    if LAMBDA_KEY not in sweep.row_keys:
        return None
    mixers = {r.row: r.mixer for r in sweep.records}
    log_linear = {base_mixer(m): m for m in mixers.values() if is_log_linear(m)}
    rest = [i for i, k in enumerate(sweep.row_keys) if k not in (MIXER_KEY, LAMBDA_KEY)]
    lam = sweep.row_keys.index(LAMBDA_KEY)
    groups: dict[tuple, list[tuple[str, Cell]]] = {}
    for (row, d_model), cell in cells.items():
        mixer = mixers[row]
        family = mixer if is_log_linear(mixer) else log_linear.get(mixer)
        if family is not None:
            arm = row[lam] if is_log_linear(mixer) else f"{display_name(mixer)} (base)"
            groups.setdefault((display_name(family), *(row[i] for i in rest), str(d_model)), []).append((arm, cell))
    threshold = sweep.report.threshold
    header = [_header(MIXER_KEY), *(_header(sweep.row_keys[i]) for i in rest), "d_model", "rank", "λ",
              "learning rate", "solve rate [95%]", "test accuracy %", f"steps to {_pct(threshold)}%"]
    body = []
    for key, arms in groups.items():
        scores = {arm: _rank_score(cell, threshold) for arm, cell in arms}
        for arm, cell in sorted(arms, key=lambda a: scores[a[0]], reverse=True):
            rank = 1 + sum(other > scores[arm] for other in scores.values())
            body.append([*key, str(rank), arm, format_config(cell), format_rate(cell, threshold),
                         format_cell(cell, threshold), format_steps(cell, threshold)])
    return markdown_table(header, body) if body else None


def _rank_score(cell: Cell, threshold: float) -> tuple[float, float]:
    """(solve rate, mean test accuracy); a cell without results ranks last."""
    values = cell.values
    return (cell.above(threshold) / len(values), sum(values) / len(values)) if values else (-1.0, -1.0)


def pairs_table(sweep: Sweep, cells: dict) -> str | None:
    """MQAR: per number of key-value pairs tested, the test accuracy and the runs above the threshold (k/n) of
    the selected runs; None without two numbers of pairs."""
    slices = sorted({n for cell in cells.values() for n in slice_values(cell.runs, PAIRS_PREFIX)})
    if len(slices) < 2:
        return None
    header = [_header(k) for k in sweep.row_keys] + ["d_model"]
    for n in slices:
        header += [f"{n} pairs %", f"{n} solved"]
    body = []
    for (row, d_model), cell in cells.items():
        per_pairs = slice_values([r for r in cell.runs if r.status in FINISHED], PAIRS_PREFIX)
        if not per_pairs:
            continue
        line = [*row, str(d_model)]
        for n in slices:
            at_n = per_pairs.get(n, [])
            solved = f"{sum(a > sweep.report.threshold for a in at_n)}/{len(at_n)}" if at_n else "-"
            line += [mean_std_text(at_n), solved]
        body.append(line)
    return markdown_table(header, body) if body else None


def missing_runs(sweep: Sweep) -> str:
    missing = [r for r in sweep.records if r.status not in FINISHED]
    if not missing:
        return f"None: all {len(sweep.records)} runs finished."
    lines = []
    for r in missing:
        error = r.result.get("error")
        reason = "no result yet (not run, running or interrupted)" if r.status == "missing" else r.status
        lines.append(f"- `runs/{r.run_id}` ({describe(r.point)}): {reason}" + (f": {error}" if error else ""))
    return f"{len(missing)} of {len(sweep.records)} runs:\n\n" + "\n".join(lines)


def write_csv(sweep: Sweep, path: Path) -> None:
    """One row per expected run: the fixed columns, every test metric, the state sizes at each test length,
    then the varied keys."""
    metrics = sorted({k for r in sweep.records for k in r.test})
    lengths = sorted({n for r in sweep.records for n in r.test_seq_lens})
    states = [(kind, n) for n in lengths for kind in STATE_KINDS]
    varied = list(dict.fromkeys(k for r in sweep.records for k in r.point))
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow([*CSV_COLUMNS, *metrics, *(f"state_size_{kind}/seq_len={n}" for kind, n in states), *varied])
    for r in sweep.records:
        fixed = {
            "run_id": r.run_id, "stage": r.stage, "status": r.status, "mixer": r.mixer,
            "lambda_param": r.get(LAMBDA_KEY),
            "d_model": r.d_model, "n_layers": r.get("model.n_layers"), "lr": r.lr, "seed": r.get("train.seed"),
            "task": r.task, **{k: r.result.get(k) for k in RESULT_COLUMNS},
            "val_score": r.val_score, "test_score": r.test_score,
            **{f"state_size_{kind}": r.state_at(per=kind) for kind in STATE_KINDS},
            "implementations": " ".join(r.implementations or ()), **recall_state(r),
        }
        writer.writerow([_csv(fixed[c]) for c in CSV_COLUMNS] + [_csv(r.test.get(m)) for m in metrics]
                        + [_csv(r.state_at(n, kind)) for kind, n in states]
                        + [_csv(r.point.get(k)) for k in varied])
    write_text_atomic(path, text.getvalue())


def write_paired_csv(pairings: list[Pairing], family: list[TestResult], path: Path) -> None:
    """One row per comparison (`paired.COLUMNS`, empty where a test does not apply); comparisons at a test length
    have a first column `test_length`."""
    lengths = any(p.length is not None for p in pairings)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow((["test_length"] if lengths else []) + list(PAIRED_COLUMNS))
    for pairing in pairings:
        values = pairing.row(family)
        writer.writerow(([pairing.length] if lengths else []) + [_csv(values[c]) for c in PAIRED_COLUMNS])
    write_text_atomic(path, text.getvalue())


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _header(key: str) -> str:
    return HEADERS.get(key, key.rsplit(".", 1)[-1])


def _csv(value: Any) -> Any:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else value
