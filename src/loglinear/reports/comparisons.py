"""The report's paired comparisons in words: one line per comparison with its tests (the primary alone at alpha,
the secondaries under Holm), one sentence of what survives, and the differences at each test length."""

from __future__ import annotations

from loglinear.protocol.results import Sweep
from loglinear.reports.paired import (
    ABOVE,
    MINUS,
    Family,
    Pairing,
    TestResult,
    p_text,
    paired_comparisons,
    signed,
    unpairable_reason,
)
from loglinear.reports.primary import design_line, primary_line
from loglinear.reports.state_tracking import accuracy_at
from loglinear.reports.statistics import ALPHA
from loglinear.reports.tables import length_labels, markdown_table, pct_text, test_lengths
from loglinear.runs.stopping import TOO_SHORT

PAIRED_NOTE = (
    "Each comparison: the learning rates each side chose among; per shared seed, the exact McNemar test of "
    "`solved` ({pct}% validation accuracy under the stopping rule){plateau}; the log-rank test of the steps until "
    "solved (all runs of each side); and the Wilcoxon signed-rank test of the paired differences in test accuracy "
    "(exact where it can be; zero differences dropped), beside the paired Student-t 95% interval of their mean "
    "(percentage points) as the effect size, marked `bimodal` when two groups of seeds explain most of the "
    "differences' spread (the mean then lies between them). The primary comparison, declared by the spec before the "
    "runs, is tested alone at alpha {alpha:g} (its own line below); every other test is secondary: `Holm`, its "
    "p-value adjusted by "
    "Holm-Bonferroni over the {n} secondary tests of this report (family-wise error {alpha:g}); `survives`: "
    "adjusted p <= {alpha:g}."
)


def length_pairings(sweep: Sweep) -> list[Pairing]:
    """State tracking: the paired comparisons at each test length ([] for a sweep without several lengths)."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return []
    return [p for n in lengths for p in paired_comparisons(sweep, score=accuracy_at(n), length=n)]


def paired_lines(sweep: Sweep, pairings: list[Pairing], family: list[TestResult]) -> str:
    """The note, one line per comparison with its tests, then one sentence of what survives Holm."""
    if not pairings:
        return f"No paired comparison: {unpairable_reason(sweep)}."
    report = sweep.report
    plateau = "" if report.plateau is None else (f" and of `escaped` (solved, or final validation accuracy above "
                                                 f"{pct_text(report.plateau)}%)")
    lines = [PAIRED_NOTE.format(pct=pct_text(report.threshold), plateau=plateau, n=len(family.secondaries),
                                alpha=ALPHA), ""]
    if any(r.pairing.length is not None for r in family):
        lines[0] += (f" The comparisons at each test length (the table above) have two tests: exact McNemar on `above` "
                     f"(test accuracy at that length above {pct_text(report.threshold)}%) and the Wilcoxon test there.")
    lines += [primary_line(family, report.primary is not None), ""]
    design = design_line(sweep, family)
    if design is not None:
        lines += [design, ""]
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
    for test in ("solved", "escaped"):
        if test in tests:
            a, b, only_a, only_b = p.outcomes(test)
            parts.append(f"{test} {a}/{p.n_pairs} vs {b}/{p.n_pairs} (discordant {only_a} vs {only_b}), "
                         f"McNemar {_p(tests[test])}")
    left = None
    if p.left_chance is not None and p.length is None:
        left = p.outcomes("left_chance")
        parts.append(f"left chance {left[0]}/{p.n_pairs} vs {left[1]}/{p.n_pairs} (described)")
    if "steps" in tests:
        reached = [sum(e.reached for e in side) for side in p.passages]
        parts.append(f"steps to {pct_text(p.threshold)}%: reached {reached[0]}/{len(p.passages[0])} vs "
                     f"{reached[1]}/{len(p.passages[1])}, log-rank {_p(tests['steps'])}")
    ci = p.interval
    if ci is None:
        parts.append(f"accuracy {signed(p.diffs[0])} points, one pair (no interval)")
    else:
        bimodal = ", bimodal" if p.bimodal else ""
        parts.append(f"accuracy {signed(ci.estimate)} points [{signed(ci.low)}, {signed(ci.high)}] (paired t "
                     f"interval{bimodal}), better on {p.wins} of {p.n_pairs} seeds"
                     + (f", Wilcoxon {_p(tests['accuracy'])}" if "accuracy" in tests else "")
                     + (f", paired t {_p(tests['accuracy_t'])}" if "accuracy_t" in tests else ""))
    text = f"{head} ({chosen}): " + "; ".join(parts)
    if left is not None and "escaped" in tests:
        escaped = p.outcomes("escaped")
        if (left[0] - left[1]) * (escaped[0] - escaped[1]) < 0:
            text += (f"; **left chance and escaped point opposite ways** ({left[0]} vs {left[1]} left chance, "
                     f"{escaped[0]} vs {escaped[1]} escaped): which side is ahead depends on the event's threshold")
    cut = cut_off(p)
    if cut:
        text += f"; {cut}"
    if p.left_out:
        text += f"; {len(p.left_out)} seed(s) left out, without a result on one side"
    return ("**Primary** " if any(r.primary for r in tests.values()) else "") + text


def cut_off(p: Pairing) -> str | None:
    """What the comparison measures when most runs of a side ended on the budget while still improving, or on a
    budget too short to tell (`most runs of Mamba-2 (6 of 8) were cut off by the budget while still improving:
    ...`); None otherwise."""
    parts = []
    for label, words in (("improving", "while still improving"),
                         (TOO_SHORT, "too short to tell a plateau from a climb (fewer validations than the window)")):
        sides = [f"{name} ({endings.count(label)} of {len(endings)})"
                 for name, endings in zip((p.mixer_label, p.baseline_label), p.endings, strict=True)
                 if 2 * endings.count(label) > len(endings)]
        if sides:
            parts.append(f"most runs of {' and of '.join(sides)} were cut off by the budget {words}")
    if not parts:
        return None
    return "; ".join(parts) + (": this comparison measures how far each side got within the budget, not what it can "
                               "learn")


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
    if survivors:
        return (f"Of the {len(secondaries)} secondary tests of this report, {len(survivors)} survive Holm at "
                f"{ALPHA:g}: {found}.")
    smallest = min(secondaries, key=lambda r: r.p)
    return (f"Of the {len(secondaries)} secondary tests of this report, 0 survive Holm at {ALPHA:g}, so none of the "
            f"compared pairs shows a difference (only the pairs listed above are compared); the smallest p is "
            f"{smallest.pairing.name}: {smallest.test}, p={p_text(smallest.p)} (Holm {p_text(smallest.adjusted)}).")


def length_paired_table(sweep: Sweep, by_length: list[Pairing], family: list[TestResult]) -> str:
    """Rows: each comparison in each cell; columns: test lengths; cells `+1.2 [−3.4, +5.8] 2/3, above 3 vs 3`."""
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
    a, b, _, _ = p.outcomes(ABOVE)
    return f"{signed(mean)}{interval} {p.wins}/{p.n_pairs}, above {a} vs {b}"
