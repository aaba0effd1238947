"""Accuracy against state size (zoology's figure) and the equal-state comparison of an MQAR sweep.

A cell's state size is what its runs' decoder holds per sequence, over all layers (result.json's
`state_size`, counted by `Mixer.state_size`): at the longest test length for the overall accuracy, and
for the accuracy at N key-value pairs at the length of the test examples with N pairs. One line per
architecture: the table rows without the keys that only change the model's size (`SIZE_KEYS`), so a
Mamba-2 with a larger `state_dim` is a further point on Mamba-2's line.

The equal-state comparison pairs each log-linear cell with the base-mixer cell of the same d_model and
other row keys whose state (at the longest test length) is the smallest one at least as large
(protocol/compared.py), seed by seed, with the paired machinery of `paired.py`; the sweep has one when such a
cell exists.
"""

from __future__ import annotations

from loglinear.protocol.compared import SIZE_KEYS, Cells, equal_state_arms, finished_runs, longest_test_state
from loglinear.protocol.results import Cell, Record, Sweep
from loglinear.reports.figures import row_label
from loglinear.reports.paired import Pairing, pair, test_score
from loglinear.synthetics.config import as_data_config, evaluation_sets

PAIRS_PREFIX = "test/acc/num_kv_pairs="


def pair_lengths(record: Record) -> dict[int, int]:
    """{number of key-value pairs: the longest test sequence holding that many} of an MQAR run's test sets."""
    lengths: dict[int, int] = {}
    for test_set in evaluation_sets(as_data_config(record.config["data"])):
        for task in test_set.tasks:
            counts = task.num_kv_pairs if isinstance(task.num_kv_pairs, list) else [task.num_kv_pairs]
            for n in counts:
                lengths[n] = max(lengths.get(n, 0), task.seq_len)
    return lengths


def line_label(sweep: Sweep, row: tuple[str, ...]) -> str:
    """The table row without its size keys (`figures.row_label`): `Mamba-2` for the rows `Mamba-2 / 16` and
    `Mamba-2 / 112`."""
    return row_label(sweep.row_keys, row, skip=SIZE_KEYS)


Point = tuple[float, list[float], list[Record], Cell]
"""(state size, test accuracies in %, the runs they are of, in the same order, the cell)."""
Series = dict[str, tuple[tuple[str, ...], list[Point]]]
"""{line label: (the first table row on the line, its points in ascending state size)}."""


def frontier_series(sweep: Sweep, cells: Cells) -> dict[str, Series]:
    """{panel: {line: (row, points)}}: the panel `all` (the test accuracy at the state of the longest test length),
    then `N pairs` for each number of key-value pairs tested."""
    panels: dict[str, dict[str, tuple[tuple[str, ...], list[Point]]]] = {}

    def add(panel: str, row: tuple[str, ...], point: Point) -> None:
        panels.setdefault(panel, {}).setdefault(line_label(sweep, row), (row, []))[1].append(point)

    for (row, _d_model), cell in cells.items():
        runs = finished_runs(cell)
        state = longest_test_state(cell)
        if not runs or state is None:
            continue
        tested = [r for r in cell.runs if r.test_score is not None]
        add("all", row, (state, [100 * r.test_score for r in tested], tested, cell))  # type: ignore[misc]
        lengths = pair_lengths(runs[0])
        for n in sorted({int(m[len(PAIRS_PREFIX):]) for r in runs for m in r.test if m.startswith(PAIRS_PREFIX)}):
            at = runs[0].state_at(lengths[n]) if n in lengths else None
            with_slice = [r for r in runs if f"{PAIRS_PREFIX}{n}" in r.test]
            if at is not None:
                add(f"{n} pairs", row, (at, [100 * r.test[f"{PAIRS_PREFIX}{n}"] for r in with_slice], with_slice, cell))
    order = ["all"] + sorted((p for p in panels if p != "all"), key=lambda p: int(p.split()[0]))
    return {p: {label: (row, sorted(points, key=lambda point: point[0])) for label, (row, points) in panels[p].items()}
            for p in order if p in panels}


def equal_state_comparisons(sweep: Sweep, cells: Cells) -> list[Pairing]:
    """Each log-linear cell against the base-mixer cell of its d_model and non-size row keys with the smallest
    state at least as large as its own (`compared.equal_state_arms`); log-linear cells without such a cell are not
    compared."""
    pairings = []
    for arms in equal_state_arms(sweep, cells):
        pairing = pair(sweep, arms.cell, arms.mixer, arms.baseline, *arms.sides, test_score, None)
        pairing.equal_state = True
        (row, _), (base_row, _) = arms.keys  # type: ignore[misc]
        pairing.mixer_label = _side_label(sweep, row, arms.states[0])  # type: ignore[index]
        pairing.baseline_label = _side_label(sweep, base_row, arms.states[1])  # type: ignore[index]
        pairings.append(pairing)
    return pairings


def _side_label(sweep: Sweep, row: tuple[str, ...], state: int) -> str:
    """`Mamba-2 (state_dim=112; state 8,704)`: the architecture, its size keys, its state."""
    sizes = [f"{key.rsplit('.', 1)[-1]}={label}" for key, label in zip(sweep.row_keys, row, strict=True)
             if key in SIZE_KEYS]
    return f"{row[0]} ({'; '.join([*sizes, f'state {state:,}'])})"
