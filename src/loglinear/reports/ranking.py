"""The ranking of the λ parameterisations: per log-linear mixer, its λ rows and its base mixer (λ = 1 on every
level) ordered by solve rate, then mean test accuracy. A description beside the paired tests, not a test."""

from __future__ import annotations

from loglinear.protocol.results import LAMBDA_KEY, MIXER_KEY, Cell, Sweep, base_mixer, display_name, is_log_linear
from loglinear.reports.tables import (
    column_header,
    format_cell,
    format_config,
    format_rate,
    format_steps,
    markdown_table,
    pct_text,
)


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
    header = [column_header(MIXER_KEY), *(column_header(sweep.row_keys[i]) for i in rest), "d_model", "rank", "λ",
              "learning rate", "solve rate [95%]", "test accuracy %", f"steps to {pct_text(threshold)}%"]
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
    values, solved = cell.values, cell.solved(threshold)
    return (sum(solved) / len(solved) if solved else 0.0, sum(values) / len(values)) if values else (-1.0, -1.0)
