"""MQAR: every batch obeys zoology's semantics; the query gaps follow the power law."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, Batch, get_task
from loglinear.synthetics.mqar import MQAR


def check_mqar(batch: Batch, task: MQAR) -> None:
    """Assert every example of `batch` is a valid MQAR example of `task` (zoology semantics)."""
    vocab, length = task.vocab_size, task.seq_len
    half = vocab // 2
    assert batch.inputs.dtype == batch.targets.dtype == torch.int64
    assert batch.inputs.shape == batch.targets.shape == (len(batch.inputs), length)
    assert batch.inputs.min() >= 0 and batch.inputs.max() < vocab
    options = [task.num_kv_pairs] if isinstance(task.num_kv_pairs, int) else task.num_kv_pairs
    for inputs, targets, pairs, seq_len in zip(
        batch.inputs.tolist(), batch.targets.tolist(), batch.slices["num_kv_pairs"].tolist(),
        batch.slices["seq_len"].tolist(), strict=True,
    ):
        assert seq_len == length and pairs in options
        keys, values = inputs[0 : 2 * pairs : 2], inputs[1 : 2 * pairs : 2]
        assert all(1 <= k < half for k in keys) and len(set(keys)) == pairs
        assert all(half <= v < vocab for v in values) and len(set(values)) == pairs
        value_of = dict(zip(keys, values, strict=True))
        scored = [p for p, y in enumerate(targets) if y != IGNORE_INDEX]
        space = (length - 2 * pairs) // 2
        assert len(scored) == pairs
        for p in scored:
            assert p >= 2 * pairs and (p - 2 * pairs) % 2 == 0 and (p - 2 * pairs) // 2 < space
            assert inputs[p] in value_of and targets[p] == value_of[inputs[p]]
        assert sorted(inputs[p] for p in scored) == sorted(keys)  # every key queried exactly once
        if not task.random_non_queries:
            assert all(inputs[p] == 0 for p in range(2 * pairs, length) if p not in scored)


@st.composite
def mqar_arguments(draw: st.DrawFn) -> dict:
    seq_len = draw(st.integers(4, 96))
    most = seq_len // 4
    vocab_size = draw(st.integers(4, 300).filter(lambda v: v // 2 - 1 >= 1))
    most = min(most, vocab_size // 2 - 1)
    pairs = draw(st.one_of(st.integers(1, most), st.lists(st.integers(1, most), min_size=1, max_size=4)))
    return {
        "vocab_size": vocab_size, "seq_len": seq_len, "num_kv_pairs": pairs,
        "power_a": draw(st.sampled_from([0.01, 0.5, 1.0, 2.0])), "random_non_queries": draw(st.booleans()),
    }


@settings(max_examples=80)
@given(arguments=mqar_arguments(), batch_size=st.integers(1, 12), seed=st.integers(0, 2**64 - 1))
def test_every_example_follows_zoology_semantics(arguments, batch_size, seed):
    task = get_task("mqar", **arguments)
    check_mqar(task.sample(batch_size, seed), task)


def test_benchmark_and_preset_shapes_are_valid():
    for seq_len, pairs in [(64, 4), (256, 64), (1024, 256), (256, [4, 8, 16, 32, 64])]:
        task = get_task("mqar", vocab_size=8192, seq_len=seq_len, num_kv_pairs=pairs)
        check_mqar(task.sample(16, 7), task)


def test_worked_docstring_example_layout():
    task = get_task("mqar", vocab_size=16, seq_len=16, num_kv_pairs=2, random_non_queries=False)
    batch = task.sample(64, 0)
    check_mqar(batch, task)
    assert task.num_classes == 8 and (batch.inputs[:, 4::2] != 0).sum(dim=1).eq(2).all()


def test_list_of_pair_counts_is_drawn_per_example():
    task = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=[2, 4, 16])
    counts = task.sample(3000, 1).slices["num_kv_pairs"].bincount(minlength=17)
    assert counts[[2, 4, 16]].sum() == 3000 and counts[[2, 4, 16]].min() > 900


def gaps(batch: Batch) -> torch.Tensor:
    """(B, N) query gaps: the slot index (position - 2N) / 2, ordered by the key's context position."""
    pairs = int(batch.slices["num_kv_pairs"][0])
    keys = batch.inputs[:, 0 : 2 * pairs : 2]
    scored = batch.targets != IGNORE_INDEX
    positions = torch.arange(batch.inputs.shape[1]).expand_as(batch.inputs)
    query_keys = batch.inputs[scored].view(-1, pairs)
    query_positions = positions[scored].view(-1, pairs)
    order = (keys.unsqueeze(2) == query_keys.unsqueeze(1)).float().argmax(dim=2)
    return (query_positions.gather(1, order) - 2 * pairs) // 2


def test_mean_and_median_gap_match_zoology_measurements():
    # measured on zoology's own generator at seq_len 256: mean gap 24.0 / 25.7 / 28.1 / 30.5 / 31.5 and
    # median 10 / 12 / 16 / 23 / 31.5 for N = 4 / 8 / 16 / 32 / 64.
    measured = {4: (24.0, 10), 8: (25.7, 12), 16: (28.1, 16), 32: (30.5, 23), 64: (31.5, 31.5)}
    for pairs, (mean, median) in measured.items():
        g = gaps(get_task("mqar", vocab_size=8192, seq_len=256, num_kv_pairs=pairs).sample(4096, pairs)).double()
        standard_error = g.mean(dim=1).std() / len(g) ** 0.5
        assert abs(g.mean() - mean) <= 5 * standard_error + 0.05, (pairs, g.mean())
        assert abs(g.flatten().quantile(0.5) - median) <= 1, (pairs, g.flatten().quantile(0.5))


def test_first_key_gap_follows_the_power_law():
    # The first key's slot is the first draw: P(s) = (s + 1)^(a - 1) / sum, exactly.
    task = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=4, power_a=0.3)
    first = gaps(task.sample(40000, 3))[:, 0]
    space = (64 - 8) // 2
    p = torch.arange(1, space + 1, dtype=torch.float64).pow(0.3 - 1)
    expected = p / p.sum() * len(first)
    observed = first.bincount(minlength=space).double()
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 61.1  # 99.99% quantile of chi-square with 27 degrees of freedom


def test_earlier_keys_are_queried_earlier_as_in_zoology():
    # The j-th slot drawn goes to key j, so the first context key tends to get the earliest slot
    # (zoology at 256 / 4 pairs: mean gap about 22.4 for the first key, 26.0 for the last).
    g = gaps(get_task("mqar", vocab_size=8192, seq_len=256, num_kv_pairs=4).sample(20000, 5)).double()
    assert abs(g[:, 0].mean() - 22.4) < 1.0 and abs(g[:, -1].mean() - 26.0) < 1.0


def test_keys_and_values_are_uniform_over_their_ranges():
    task = get_task("mqar", vocab_size=32, seq_len=16, num_kv_pairs=4)
    batch = task.sample(20000, 11)
    keys, values = batch.inputs[:, 0:8:2].flatten(), batch.inputs[:, 1:8:2].flatten()
    for observed, low, high in [(keys, 1, 16), (values, 16, 32)]:
        counts = observed.bincount(minlength=32)[low:high].double()
        expected = len(observed) / (high - low)
        assert ((counts - expected) ** 2 / expected).sum() < 45.0  # df <= 15, far tail
