"""Which table cells are compared with which: each log-linear mixer at the default λ against its base mixer and
each other λ parameterisation against the default, in every cell (`paired_arms`), and each log-linear cell against
the base-mixer cell of its d_model and other row keys whose state, at the longest test length, is the smallest one
at least as large as its own (`equal_state_arms`). Only the structure: reports/paired.py and reports/frontier.py
test each comparison, and the grid extension (protocol/extension.py) extends every cell a comparison joins.

A cell's state size is what its runs' decoder holds per sequence, over all layers (result.json's `state_size`,
counted by `Mixer.state_size`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from loglinear.protocol.results import (
    DEFAULT_LAMBDA,
    HEADERS,
    LAMBDA_KEY,
    MIXER_KEY,
    SIZED_BY_SOME,
    Cell,
    Record,
    Sweep,
    base_mixer,
    is_log_linear,
    mixer_rank,
)
from loglinear.runs.folder import FINISHED

SIZE_KEYS = ("model.d_model", *sorted(f"model.{field}" for field in SIZED_BY_SOME))
"""Row keys that change only how large a model is (d_model and every mixer's `size_fields`)."""

Cells = dict[Hashable, Cell]


@dataclass(frozen=True)
class Arms:
    """One comparison in one cell: `mixer` against `baseline` (`mixer[λ]` against `mixer[default]` for a λ
    parameterisation), their cells `sides`, the `cell` as `cell_name` writes it; `keys` the table cells
    (row, d_model) of the two sides when both have runs; `states` the sides' states at the longest test length in an
    equal-state comparison, None in the others."""

    mixer: str
    baseline: str
    sides: tuple[Cell, Cell]
    cell: str
    keys: tuple[Hashable, Hashable] | None
    states: tuple[int, int] | None = None


def paired_arms(sweep: Sweep) -> list[Arms]:
    """Every log-linear mixer at the default λ against its base, and every other λ against the default, in every
    cell, each side at its own selected candidate (`Sweep.select`)."""
    rest_keys = [i for i, k in enumerate(sweep.row_keys) if k not in (MIXER_KEY, LAMBDA_KEY)]
    groups: dict[tuple[tuple[str, ...], int], list[Record]] = {}
    for record in sweep.records:
        groups.setdefault((tuple(record.row[i] for i in rest_keys), record.d_model), []).append(record)
    found = []
    for (rest, d_model), records in groups.items():
        arms = sweep.select(records, lambda r: (r.mixer, r.lambda_param))
        name = cell_name(sweep, rest, d_model)
        for mixer in sorted({m for m, _ in arms}, key=mixer_rank):
            if not is_log_linear(mixer):
                continue
            lambdas = sorted(lam for m, lam in arms if m == mixer)
            default = DEFAULT_LAMBDA if DEFAULT_LAMBDA in lambdas else (lambdas[0] if len(lambdas) == 1 else None)
            base = base_mixer(mixer)
            if default is not None and (base, None) in arms:
                found.append(_arms(mixer, base, arms[(mixer, default)], arms[(base, None)], name))  # type: ignore[arg-type]
            if DEFAULT_LAMBDA in lambdas:
                for lam in lambdas:
                    if lam != DEFAULT_LAMBDA:
                        found.append(_arms(f"{mixer}[{lam}]", f"{mixer}[{DEFAULT_LAMBDA}]", arms[(mixer, lam)],
                                           arms[(mixer, DEFAULT_LAMBDA)], name))
    return found


def _arms(mixer: str, baseline: str, chosen: Cell, base: Cell, cell: str) -> Arms:
    keys = None
    if chosen.runs and base.runs:
        keys = ((chosen.runs[0].row, chosen.runs[0].d_model), (base.runs[0].row, base.runs[0].d_model))
    return Arms(mixer, baseline, (chosen, base), cell, keys)


def equal_state_arms(sweep: Sweep, cells: Cells) -> list[Arms]:
    """Each log-linear cell of `cells` ({(row, d_model): Cell}) against the base-mixer cell of its d_model and
    non-size row keys with the smallest state at least as large as its own; log-linear cells without such a cell
    are not compared."""
    keep = [i for i, key in enumerate(sweep.row_keys) if key not in (*SIZE_KEYS, MIXER_KEY, LAMBDA_KEY)]
    states = {key: longest_test_state(cell) for key, cell in cells.items()}
    mixers = {key: _mixer_of(cell) for key, cell in cells.items()}
    found = []
    for key, cell in cells.items():
        mixer, state = mixers[key], states[key]
        if mixer is None or not is_log_linear(mixer) or state is None:
            continue
        row, d_model = key  # type: ignore[misc]
        rest = tuple(row[i] for i in keep)
        candidates = [
            (states[k], k) for k in cells
            if mixers[k] == base_mixer(mixer) and k[1] == d_model  # type: ignore[index]
            and tuple(k[0][i] for i in keep) == rest and (states[k] or 0) >= state  # type: ignore[index]
        ]
        if not candidates:
            continue
        base_state, base_key = min(candidates, key=lambda c: c[0])
        rest_of_row = tuple(v for k, v in zip(sweep.row_keys, row, strict=True) if k not in (MIXER_KEY, LAMBDA_KEY))
        name = cell_name(sweep, rest_of_row, d_model)
        found.append(Arms(mixer, base_mixer(mixer), (cell, cells[base_key]), name,  # type: ignore[arg-type]
                          (key, base_key), (state, base_state)))  # type: ignore[arg-type]
    return found


def cell_name(sweep: Sweep, rest: tuple[str, ...], d_model: int) -> str:
    """`d_model=16`, with the cell's other row keys first: `task=parity, eigenvalues=[-1, 1], d_model=64`."""
    keys = [k for k in sweep.row_keys if k not in (MIXER_KEY, LAMBDA_KEY)]
    parts = [f"{HEADERS.get(k, k.rsplit('.', 1)[-1])}={v}" for k, v in zip(keys, rest, strict=True)]
    return ", ".join([*parts, f"d_model={d_model}"])


def finished_runs(cell: Cell) -> list[Record]:
    return [r for r in cell.runs if r.status in FINISHED and r.task == "mqar"]


def longest_test_state(cell: Cell) -> int | None:
    """The total state of the cell's runs at their longest test length (None without a recorded one)."""
    for record in finished_runs(cell):
        if record.test_seq_lens:
            return record.state_at(max(record.test_seq_lens))
    return None


def _mixer_of(cell: Cell) -> str | None:
    return cell.runs[0].mixer if cell.runs else None
