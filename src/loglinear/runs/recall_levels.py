"""MQAR at the moment of recall: the Fenwick level and the distance of each recalled key, seen from its query.

A key at s seen from its query at t sits in level `bit_length(t XOR s)` (kernels/fenwick.py) and at distance
t - s, grouped in powers of two ("4-7": 4 <= t - s <= 7). `level_table` gives, per MQAR layout, where the
recalled keys sit (docs/tasks.md shows it, tests/runs/test_recall_levels.py checks it); `recall_summary`
gives what a run records in result.json: accuracy by level and by distance over its test sets, and the state
its decoder holds at the query positions (`Mixer.state_size` after t + 1 tokens, averaged over the queries).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import Tensor

from loglinear.kernels.fenwick import bit_length
from loglinear.synthetics import IGNORE_INDEX, DataConfig, get_task
from loglinear.synthetics.recall_sources import recall_sources

LEVEL_TABLE_SETTINGS = (
    ("zoology", 64, (4, 8, 16)),
    ("zoology", 256, (4, 16, 64)),
    ("interleaved", 64, (4, 8, 16)),
    ("interleaved", 256, (4, 16, 64)),
)
"""(layout, T, pair counts) of the docs' level table: the pair counts the CPU study and the paper use."""
LEVEL_TABLE_EXAMPLES, LEVEL_TABLE_SEED, LEVEL_TABLE_VOCAB = 64, 0, 8192


def recalled_keys(inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`(row, t, s)`: for every scored position in row-major order, its example, its position and the
    position of the key it recalls."""
    sources = recall_sources(inputs, targets)
    row, t = (targets != IGNORE_INDEX).nonzero(as_tuple=True)
    return row, t, sources[row, t]


def key_levels(t: Tensor, s: Tensor) -> Tensor:
    """Fenwick level of key s seen from query t, elementwise (`fenwick_level`'s rule)."""
    return bit_length(t ^ s)


def distance_buckets(t: Tensor, s: Tensor) -> Tensor:
    """b with 2^(b-1) <= t - s < 2^b, elementwise."""
    return bit_length(t - s)


def bucket_label(bucket: int) -> str:
    """`4-7` for bucket 3."""
    return f"{2 ** (bucket - 1)}-{2 ** bucket - 1}"


def level_spread(inputs: Tensor, targets: Tensor) -> tuple[dict[int, float], float]:
    """({level: share of the scored queries whose key sits there}, mean over queries of how many levels hold the
    keys of their sequence that stand before them)."""
    row, t, s = recalled_keys(inputs, targets)
    levels = key_levels(t, s)
    counts = Counter(levels.tolist())
    same_row = row[:, None] == row[None, :]
    earlier = same_row & (s[None, :] < t[:, None])  # (query, key): keys of the query's sequence before it
    held = key_levels(t[:, None].expand_as(earlier), s[None, :].expand_as(earlier))
    distinct = [len(set(held[q][earlier[q]].tolist())) for q in range(len(t))]
    return {lv: n / len(levels) for lv, n in sorted(counts.items())}, sum(distinct) / len(distinct)


def level_table() -> str:
    """The Markdown table of docs/tasks.md: for each layout, length and number of pairs, the levels that hold the
    recalled keys (share of queries, levels under 1% left out) and the mean number of levels that hold the
    sequence's keys at a query, over LEVEL_TABLE_EXAMPLES examples of seed LEVEL_TABLE_SEED."""
    lines = ["| layout | T | pairs | level of the recalled key (share of queries) | levels holding the keys at a "
             "query |", "|---|---|---|---|---|"]
    for layout, seq_len, pair_counts in LEVEL_TABLE_SETTINGS:
        for pairs in pair_counts:
            task = get_task("mqar", vocab_size=LEVEL_TABLE_VOCAB, seq_len=seq_len, num_kv_pairs=pairs, layout=layout)
            batch = task.sample(LEVEL_TABLE_EXAMPLES, LEVEL_TABLE_SEED)
            shares, held = level_spread(batch.inputs, batch.targets)
            text = ", ".join(f"{lv}: {100 * share:.0f}%" for lv, share in shares.items() if share >= 0.01)
            lines.append(f"| {layout} | {seq_len} | {pairs} | {text} | {held:.1f} |")
    return "\n".join(lines) + "\n"


def recall_summary(model: Any, data: DataConfig, loader: Any) -> dict[str, Any] | None:
    """What result.json records under `recall` for an MQAR run (None for other tasks), over `loader`'s test
    batches: `by_level` and `by_distance`, {label: [correct, scored]}, and `state_at_recall`, the numbers the
    decoder holds at a query position averaged over the queries, `per_layer` (one layer) and `total`."""
    if data.task != "mqar":
        return None
    device = next(model.parameters()).device
    by_level: Counter[int] = Counter()
    by_level_right: Counter[int] = Counter()
    by_distance: Counter[int] = Counter()
    by_distance_right: Counter[int] = Counter()
    states: dict[int, list[int]] = {}
    held_per_layer = held_total = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in loader:
            inputs, targets = batch["inputs"], batch["targets"]
            mask = targets != IGNORE_INDEX
            logits = model(inputs.to(device), mask.to(device))
            right = (logits.argmax(-1).cpu() == targets[mask]).tolist()
            _, t, s = recalled_keys(inputs, targets)
            for level, bucket, position, ok in zip(key_levels(t, s).tolist(), distance_buckets(t, s).tolist(),
                                                   t.tolist(), right, strict=True):
                by_level[level] += 1
                by_level_right[level] += ok
                by_distance[bucket] += 1
                by_distance_right[bucket] += ok
                sizes = states.setdefault(position, model.state_sizes(position + 1))
                held_per_layer += sizes[0]
                held_total += sum(sizes)
    model.train(was_training)
    queries = sum(by_level.values())
    return {
        "by_level": {str(k): [by_level_right[k], n] for k, n in sorted(by_level.items())},
        "by_distance": {bucket_label(k): [by_distance_right[k], n] for k, n in sorted(by_distance.items())},
        "state_at_recall": {"per_layer": held_per_layer / queries, "total": held_total / queries},
    }
