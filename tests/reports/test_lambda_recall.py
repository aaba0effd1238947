"""The effective weight per level at the recall positions (reports/lambda_recall.py): `RecallWeights` against a
plain loop over the queries, what `loglinear inspect` writes for an MQAR run, and the report's table."""

from __future__ import annotations

import math

import pytest
import torch

from loglinear.reports.lambda_inspect import inspect_run
from loglinear.reports.lambda_recall import RECALL_CSV, RECALL_SEQUENCES, RecallWeights, read_csv, recall_section
from loglinear.synthetics import IGNORE_INDEX, get_task

from .test_lambda_inspect import make_run


def reference(lam, norms, inputs, targets, layer=0):
    """{(layer, head, key level, level): (queries, mean effective weight, mean share at lambda = 1)} by a loop over
    every scored position: its key is the last s <= t - 2 with the pair (inputs[t], targets[t]) at s, s + 1."""
    sums: dict[tuple, list[float]] = {}
    B, T, H, L = lam.shape
    for b in range(B):
        for t in range(T):
            if targets[b, t] == IGNORE_INDEX:
                continue
            s = max(s for s in range(t - 1) if inputs[b, s] == inputs[b, t] and inputs[b, s + 1] == targets[b, t])
            key_level = (t ^ s).bit_length()
            for h in range(H):
                weighted = [abs(float(lam[b, t, h, lv])) * float(norms[b, t, h, lv]) for lv in range(L)]
                plain = [float(norms[b, t, h, lv]) for lv in range(L)]
                for lv in range(L):
                    entry = sums.setdefault((layer, h, key_level, lv), [0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += weighted[lv] / sum(weighted)
                    entry[2] += plain[lv] / sum(plain)
    return {k: (n, w / n, u / n) for k, (n, w, u) in sums.items()}


@pytest.mark.parametrize("layout", ["zoology", "interleaved"])
def test_recall_weights_match_a_loop_over_the_queries(layout):
    batch = get_task("mqar", vocab_size=64, seq_len=32, num_kv_pairs=4, layout=layout).sample(6, seed=3)
    generator = torch.Generator().manual_seed(0)
    lam = torch.rand(6, 32, 2, 6, generator=generator, dtype=torch.float64) * 2
    norms = torch.rand(6, 32, 2, 6, generator=generator, dtype=torch.float64)
    norms[:, :, :, 4:] = 0.0  # levels that hold nothing at these positions
    weights = RecallWeights()
    weights.add(0, lam, norms, batch.inputs, batch.targets)
    rows = weights.rows()
    expected = reference(lam, norms, batch.inputs, batch.targets)
    assert {(r.layer, r.head, r.key_level, r.level) for r in rows} == set(expected)
    for r in rows:
        n, effective, uniform = expected[(r.layer, r.head, r.key_level, r.level)]
        assert r.queries == n
        assert r.effective_mean == pytest.approx(effective, rel=1e-12, abs=1e-15)
        assert r.uniform_mean == pytest.approx(uniform, rel=1e-12, abs=1e-15)


def test_a_query_without_any_readout_is_left_out():
    batch = get_task("mqar", vocab_size=64, seq_len=16, num_kv_pairs=2).sample(2, seed=0)
    lam = torch.ones(2, 16, 1, 5, dtype=torch.float64)
    norms = torch.ones(2, 16, 1, 5, dtype=torch.float64)
    norms[0] = 0.0  # the first sequence's output is 0 everywhere: its queries have no weights
    weights = RecallWeights()
    weights.add(1, lam, norms, batch.inputs, batch.targets)
    scored_second = int((batch.targets[1] != IGNORE_INDEX).sum())
    rows = weights.rows()
    assert sum(r.queries for r in rows if r.level == 0) == scored_second
    assert all(r.effective_mean == pytest.approx(0.2) and r.uniform_mean == pytest.approx(0.2) for r in rows)


def test_inspect_writes_the_recall_table_of_an_mqar_run(tmp_path):
    make_run(tmp_path / "run", "model.n_layers=2", "data.task_args.num_kv_pairs=2", "data.val_size=48")
    inspection = inspect_run(tmp_path / "run", device="cpu")
    rows = read_csv(tmp_path / "run" / RECALL_CSV)
    assert [repr(r) for r in rows] == [repr(r) for r in inspection.recall_rows]
    # validation: batches of 16 sequences (at most RECALL_SEQUENCES of each measured), 2 pairs, so 2 queries each
    assert RECALL_SEQUENCES >= 16
    for layer in (0, 1):
        for head in {r.head for r in rows}:
            mine = [r for r in rows if (r.layer, r.head) == (layer, head)]
            assert sum(r.queries for r in mine if r.level == 0) == 2 * 48 * 2  # two eval sets of 48 sequences
            for key_level in {r.key_level for r in mine}:
                shares = [r for r in mine if r.key_level == key_level]
                assert math.fsum(r.effective_mean for r in shares) == pytest.approx(1.0)
                assert math.fsum(r.uniform_mean for r in shares) == pytest.approx(1.0)
                assert all(r.effective_mean >= 0 for r in shares)


def test_constant_lambda_is_its_own_control(tmp_path):
    make_run(tmp_path / "run", "model.lambda_param=constant", "model.lambda_bias_init=none")
    rows = inspect_run(tmp_path / "run", device="cpu").recall_rows
    assert rows and all(r.effective_mean == pytest.approx(r.uniform_mean, rel=1e-12) for r in rows)


def test_the_report_table_bolds_the_key_level_and_gives_the_control(tmp_path):
    make_run(tmp_path / "run", "data.task_args.num_kv_pairs=2")
    rows = inspect_run(tmp_path / "run", device="cpu").recall_rows
    key_levels = sorted({r.key_level for r in rows})
    table = recall_section([rows, rows], {str(key_levels[0]): [0.5, 0.7]})
    lines = table.splitlines()
    layers = len({r.layer for r in rows})
    assert lines[0].endswith("| key's level at λ = 1 |") and len(lines) == 2 + layers * len(key_levels)
    first = [c.strip() for c in lines[2].strip("|").split("|")]
    assert first[:3] == ["0", str(key_levels[0]), "60.0 (14.1)"]
    assert first[3 + key_levels[0]].startswith("**") and first[3 + key_levels[0]].endswith("(0.00)**")
