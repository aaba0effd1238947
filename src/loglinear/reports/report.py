"""`loglinear sweep report DIR`: `results.csv` (one row per run), `paired.csv` and `paired_by_length.csv` (the
comparisons with every test and its Holm-adjusted p-value), `table.md` (the protocol, test accuracy, solve rates
with Wilson intervals, steps to the threshold, how the runs ended, accuracy given solved, the learning rates behind
them, the ranking of the λ parameterisations when λ varies, accuracy by test length, MAD's per-task summary and
score where the spec asks (`report.mad_score`), the missing or failed runs, then the comparisons: the declared
primary tested alone at alpha, the secondaries with what survives Holm, the operator implementations the runs ran
and the machines they ran on (each with a note under the first table when they differ), and the equal-state
comparison when the sweep has one) and PNG plots (with the MQAR accuracy against state size); `Report.summary` is
the part of table.md that `sweep run` prints. docs/reports.md describes the protocol and the statistics."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from loglinear.protocol.results import Sweep, load_sweep
from loglinear.protocol.stability import selection_stability
from loglinear.reports.chance import NOTE as CHANCE_NOTE
from loglinear.reports.chance import (
    SELECTION_NOTE,
    format_left_chance,
    levels_text,
    pooled_summary,
    selection_against_confirmation,
)
from loglinear.reports.comparisons import comparison_line, length_paired_table, length_pairings, paired_lines
from loglinear.reports.figures import Palette
from loglinear.reports.files import CSV, PAIRED_CSV, PAIRED_LENGTH_CSV, TABLE, write_csv, write_paired_csv
from loglinear.reports.frontier import equal_state_comparisons
from loglinear.reports.guard import protect_report
from loglinear.reports.mad_score import mad_sections
from loglinear.reports.paired import Pairing, TestResult, holm_family, paired_comparisons
from loglinear.reports.plots import write_plots
from loglinear.reports.primary import standing_line
from loglinear.reports.ranking import lambda_ranking
from loglinear.reports.recall_levels import write_recall_report
from loglinear.reports.stability import format_stability, stability_summary
from loglinear.reports.tables import (
    MISSING_HEADING,
    accuracy_note,
    format_cell,
    format_config,
    format_endings,
    format_escape_rate,
    format_given_solved,
    format_rate,
    format_steps,
    implementations_section,
    length_table,
    machines_section,
    missing_runs,
    pairs_table,
    pct_text,
    pivot,
)
from loglinear.runs.folder import write_text_atomic

SUMMARY_TABLES = ("Test accuracy", "Solve rate")
"""The sections (headings up to a colon) whose tables the summary keeps."""
PAIRED_HEADING = "Paired comparisons"
PRIMARY_MARKS = ("**Exploratory primary**", "**Limitation**", "**Primary comparison**", "No primary comparison",
                 "- **Primary**")
"""How the report's paragraphs and comparison lines that state the primary comparison and its standing begin."""

REREPORTED = ("Re-reported from results.csv and the spec: the run folders are gone, so every number below comes "
              "from the CSV's columns.")

RATE_NOTE = (
    "`k/n [low, high]`: k of the cell's n runs solved, with the Wilson 95% interval of the rate in percent. A run "
    "is solved when its validation accuracy met the {pct}% threshold under the stopping rule (strictly above it on "
    "the run's `train.threshold_evals` consecutive validations, docs/runs.md): the event that stops it, the same "
    "event in every table, test, plot and results.csv. Steps: Kaplan-Meier median of the steps until a run was "
    "solved (a run that never was is censored where it ended), `never` when more than half never were; `m "
    "reached`: how many were. How the runs ended: `threshold` (solved), `plateau` (stopped by the budget, its best "
    "validation accuracy up by less than the run's `train.plateau_min_delta` over its last `train.plateau_window` "
    "validations), `improving` (stopped by the budget while still improving), `too short` (stopped by the budget "
    "with fewer validations than that window: neither can be told), `diverged`, `failed`, `unknown` (no "
    "validation history). Accuracy given solved: mean test accuracy of the solved runs with its Student-t 95% "
    "interval (one run: no interval). kaplan_meier.png draws the curves (where a run reached the threshold)."
)
ESCAPED_NOTE = (
    "`k/n [low, high]`: k of the cell's n runs escaped the plateau: solved, or their final validation accuracy "
    "(the final weights') strictly above {plateau}%; with the Wilson 95% interval of the rate in percent."
)

RANKING_NOTE = (
    "Each log-linear mixer's λ parameterisations and its base mixer (λ = 1 on every level), each at its own "
    "selected learning rate, ranked by solve rate (runs solved), then mean test accuracy. A description, "
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

STABILITY_NOTE = (
    "Each cell's pick on its selection runs (the validation accuracy of the final weights): the chosen learning rate, "
    "`by +m over r`: its mean validation accuracy minus that of the next best rate r (percentage points); `kept k/n`: "
    "of the n picks made again with one selection seed left out, k choose the same rate. A small margin or a pick "
    "that one seed changes was decided by which seeds learned, not by the rate."
)

EQUAL_STATE_NOTE = (
    "Each log-linear model against the base model of its d_model whose state is the smallest at least as large "
    "(numbers its decoder holds per sequence over all layers at the longest test length; `mqar_frontier.png` "
    "draws every cell), paired by seed, each side at its own selected learning rate, with the tests of the "
    "paired comparisons above (secondary ones in the same Holm family)."
)

LENGTH_NOTE = (
    "Per test length L: `scaled`, Grazzi et al.'s scaled accuracy (acc - 1/C) / (1 - 1/C) of the test accuracy "
    "(C classes: chance 0, perfect 1), mean (std) over seeds; `seq %`, full-sequence accuracy (every scored "
    "position right), mean (std); `above {pct}%`, k/n runs whose test accuracy at L is above {pct}% (what that "
    "length shows; solved is the run's, on validation). `(train)` marks lengths inside "
    "the training range. With only the final position scored (`scored: last`, for parity and the word problems) "
    "these measure the task's answer at length L."
)

PAIRS_NOTE = (
    "Test accuracy (%) on the test examples with each number of key-value pairs, mean (sample standard deviation) "
    "over the seeds of each cell's selected configuration; `k/n`: runs above {pct}% on those examples. "
    "mqar_acc_vs_kv_pairs.png and the panels of mqar_frontier.png draw them."
)

LENGTH_PAIRED_NOTE = (
    "Mixer − baseline test accuracy at each test length in percentage points, mean over the shared seeds with the "
    "paired Student-t 95% interval; `k/n`: the mixer was better on k of the n shared seeds; `above a vs b`: runs "
    "whose test accuracy at that length is above {pct}% on each side. At each length two tests: exact McNemar on "
    "`above` and the Wilcoxon signed-rank test of the differences; solved, escaped and the steps are the run's, "
    "the same at every length, so they are tested once, in the paired comparisons below. `*`: a test of that "
    "comparison is significant (the primary alone, a secondary after Holm; which one, and every p-value: "
    "paired_by_length.csv)."
)


@dataclass
class Report:
    """What `write_report` produced: the Markdown tables, the files written, and the plots skipped (with why)."""

    table: str
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self, out: Path) -> str:
        """What `sweep run` prints once its runs are done: the title, the tables a reader compares (without their
        notes), the primary comparison with its standing, the sentence of what survives Holm, and where the whole
        report is (in `out`). Cut from `table`, so it never says what the report does not."""
        title, *rest = re.split(r"^## ", self.table, flags=re.M)
        sections = dict(_heading_and_body(s) for s in rest)
        parts = [title.splitlines()[0], *(p for p in _paragraphs(title) if p.startswith(PRIMARY_MARKS))]
        for heading, body in sections.items():
            if heading.split(":")[0] in SUMMARY_TABLES:
                parts.append(f"## {heading}\n\n" + "\n".join(row for row in body.splitlines() if row.startswith("|")))
        parts += [p for body in sections.values() for p in _paragraphs(body) if p.startswith(PRIMARY_MARKS)]
        parts += _paragraphs(sections.get(PAIRED_HEADING, ""))[-1:]  # what survives Holm, or why nothing was tested
        parts.append(f"The whole report, with the definitions and every table: {out / TABLE} "
                     f"(`loglinear sweep report {out}` prints it).")
        return "\n\n".join(parts) + "\n"


def _heading_and_body(section: str) -> tuple[str, str]:
    heading, _, body = section.partition("\n")
    return heading.strip(), body


def _paragraphs(text: str) -> list[str]:
    """The non-empty paragraphs of `text`, each line of a list (`- ...`) counting as one."""
    found = []
    for block in (b.strip() for b in text.split("\n\n")):
        found += block.splitlines() if block.startswith("- ") else [block] if block else []
    return found


def write_report(out: str | Path, sweep: Sweep | None = None, force: bool = False) -> Report:
    """The report of the sweep folder `out`, or of `sweep` (one re-read from a results.csv) into `out`; one with
    fewer finished runs than the report there is refused unless `force` (guard.py)."""
    out = Path(out)
    sweep = load_sweep(out) if sweep is None else sweep
    protect_report(out, sweep, force)
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
    palette = Palette.of(sweep)  # one colour per arm in every figure of the folder
    written, skipped = write_plots(sweep, out, palette)
    recall = write_recall_report(sweep, out, palette)
    if not recall and sweep.unavailable and any(r.task == "mqar" for r in sweep.records):
        skipped["recall.md"] = "no run's recall by level and distance in results.csv"
    written += recall
    return Report(table, [*files, *written], skipped)


def render_tables(sweep: Sweep, pairings: list[Pairing], by_length: list[Pairing], family: list[TestResult],
                  equal_state: list[Pairing] = ()) -> str:
    cells = sweep.cells()
    report = sweep.report
    pct = pct_text(report.threshold)
    parts = [f"# {sweep.name}\n", sweep.protocol_text]
    standing = standing_line(sweep)
    if standing is not None:
        parts.append(standing)
    if sweep.unavailable:
        parts.append(f"{REREPORTED} Not available: {'; '.join(sweep.unavailable)}.")
    parts += ["## Test accuracy\n",
              pivot(sweep, cells, lambda c: format_cell(c, report.threshold)), accuracy_note(sweep, pct),
              f"## Solve rate: runs solved ({pct}% validation accuracy under the stopping rule)\n",
              pivot(sweep, cells, lambda c: format_rate(c, report.threshold))]
    if report.plateau is not None:
        plateau = report.plateau
        parts += [f"## Escaped the plateau: runs solved or above {pct_text(plateau)}% final validation accuracy\n",
                  pivot(sweep, cells, lambda c: format_escape_rate(c, plateau, report.threshold)),
                  ESCAPED_NOTE.format(plateau=pct_text(plateau))]
    multiple = report.left_chance
    if multiple is not None:
        parts += [f"## Left chance: runs whose best validation accuracy rose above {multiple:g} times chance\n",
                  pivot(sweep, cells, lambda c: format_left_chance(c, multiple)),
                  CHANCE_NOTE.format(multiple=multiple, levels=levels_text(sweep, multiple))]
    parts += [f"## Steps to {pct}% validation accuracy (Kaplan-Meier median)\n",
              pivot(sweep, cells, lambda c: format_steps(c, report.threshold))]
    if not any(e.reached for c in cells.values() for e in c.passages(report.threshold)):
        parts.append(f"No run reached {pct}% validation accuracy, so there is no kaplan_meier.png: every curve would "
                     f"stay at 1.")
    parts += [
              "## How the runs ended\n", pivot(sweep, cells, lambda c: format_endings(c, report.threshold)),
              "## Test accuracy of the solved runs\n",
              pivot(sweep, cells, lambda c: format_given_solved(c, report.threshold)), RATE_NOTE.format(pct=pct),
              "## Selected learning rate of each cell (of how many)\n", pivot(sweep, cells, format_config),
              EDGE_NOTE]
    stability = selection_stability(sweep)
    parts += ["## Selection stability\n", pivot(sweep, {k: format_stability(v) for k, v in stability.items()}, str),
              STABILITY_NOTE, stability_summary(stability)]
    if multiple is not None and sweep.protocol is not None:
        parts += ["## Left chance at the selected learning rate: selection runs against confirmation runs\n",
                  pivot(sweep, selection_against_confirmation(sweep, cells, multiple), str), SELECTION_NOTE,
                  pooled_summary(sweep, cells, multiple)]
    ranking = lambda_ranking(sweep, cells)
    if ranking:
        parts += ["## Ranking of the λ parameterisations\n", ranking, RANKING_NOTE.format(pct=pct)]
    lengths = length_table(sweep, cells)
    if lengths:
        parts += ["## State tracking by test length\n", lengths, LENGTH_NOTE.format(pct=pct)]
    if report.mad_score:
        parts += mad_sections(sweep, cells)
    pairs = pairs_table(sweep, cells)
    if pairs:
        parts += ["## MQAR by number of key-value pairs\n", pairs, PAIRS_NOTE.format(pct=pct)]
    if by_length:
        parts += ["## Paired differences by test length\n", length_paired_table(sweep, by_length, family),
                  LENGTH_PAIRED_NOTE.format(pct=pct)]
    parts += ["## Operator implementations\n", implementations_section(sweep)]
    parts += ["## Machines\n", machines_section(sweep)]
    parts += [f"{MISSING_HEADING}\n", missing_runs(sweep)]
    parts += [f"## {PAIRED_HEADING}\n", paired_lines(sweep, pairings, family)]
    if equal_state:
        parts += ["## Equal-state comparison\n", EQUAL_STATE_NOTE,
                  "\n".join(f"- {comparison_line(p, family)}" for p in equal_state)]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)
