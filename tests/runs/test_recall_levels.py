"""Where the recalled keys sit at recall time: the docs' level table, the level rule, and what a run records."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.kernels.fenwick import fenwick_level
from loglinear.models import ModelConfig, build_model
from loglinear.runs.config import load_run_config
from loglinear.runs.folder import read_result
from loglinear.runs.recall_levels import (
    distance_buckets,
    key_levels,
    level_spread,
    level_table,
    recall_summary,
    recalled_keys,
)
from loglinear.runs.train import train
from loglinear.synthetics import IGNORE_INDEX, SyntheticDataModule, as_data_config, get_task

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_level_table_is_the_one_the_code_computes():
    assert level_table() in (DOCS / "tasks.md").read_text()


@given(t=st.integers(0, 2**20), data=st.data())
def test_key_levels_follow_the_library_rule(t, data):
    s = data.draw(st.integers(0, t))
    level = key_levels(torch.tensor([t]), torch.tensor([s]))
    assert int(level) == fenwick_level(t, s)
    if s < t:
        assert 2 ** (int(distance_buckets(torch.tensor([t]), torch.tensor([s]))) - 1) <= t - s


@settings(max_examples=30, deadline=None)
@given(power=st.integers(0, 4), extra=st.integers(0, 3), seed=st.integers(0, 2**32))
def test_zoology_keys_sit_in_one_level_at_every_query_when_2n_is_a_power_of_two(power, extra, seed):
    pairs = 2**power
    seq_len = 4 * pairs * 2**extra
    # Zero fillers: a random filler could repeat a (key, value) pair later, and then that copy is the source.
    task = get_task("mqar", vocab_size=2 * pairs + 2, seq_len=seq_len, num_kv_pairs=pairs, random_non_queries=False)
    batch = task.sample(4, seed)
    _, held = level_spread(batch.inputs, batch.targets)
    assert held == 1.0


@settings(max_examples=20, deadline=None)
@given(pairs=st.integers(8, 16), seed=st.integers(0, 2**32))
def test_interleaved_keys_of_one_sequence_sit_in_several_levels(pairs, seed):
    batch = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=pairs, layout="interleaved").sample(8, seed)
    shares, held = level_spread(batch.inputs, batch.targets)
    assert len(shares) >= 3 and held > 1.0


@pytest.mark.parametrize("mixer", ["log_linear_gated_deltanet", "attention"])
def test_a_run_records_accuracy_by_level_and_distance_and_its_state_at_recall(mixer):
    data = as_data_config({
        "task": "mqar", "task_args": {"vocab_size": 32, "seq_len": 32, "num_kv_pairs": 4, "layout": "interleaved"},
        "eval_sets": [{}, {"num_kv_pairs": 8}], "batch_size": 16, "val_size": 16, "test_size": 32, "seed": 3,
    })
    model = build_model(ModelConfig(mixer=mixer, d_model=16, n_layers=2, vocab_size=32, max_len=32, chunk_size=8,
                                    impl="chunk"), seed=0)
    loader = SyntheticDataModule(data).test_dataloader()
    summary = recall_summary(model, data, loader)
    right = scored = held = 0
    for batch in loader:
        mask = batch["targets"] != IGNORE_INDEX
        with torch.no_grad():
            right += int((model(batch["inputs"], mask).argmax(-1) == batch["targets"][mask]).sum())
        _, t, _ = recalled_keys(batch["inputs"], batch["targets"])
        scored += len(t)
        held += sum(model.state_sizes(int(p) + 1)[0] for p in t)
    for kind in ("by_level", "by_distance"):
        assert sum(n for _, n in summary[kind].values()) == scored
        assert sum(r for r, _ in summary[kind].values()) == right
    assert summary["state_at_recall"]["per_layer"] == pytest.approx(held / scored)
    assert summary["state_at_recall"]["total"] == pytest.approx(2 * held / scored)
    assert model.training  # left as it was found


def test_only_mqar_runs_record_recall():
    data = as_data_config({"task": "parity", "task_args": {"seq_len": 8}})
    assert recall_summary(None, data, []) is None


def test_an_interleaved_mqar_run_leaves_its_recall_record_in_result_json(tmp_path):
    cfg = load_run_config(None, [
        "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=16",
        "data.task_args.num_kv_pairs=2", "data.task_args.layout=interleaved", "data.eval_sets=[{}]",
        "data.batch_size=8", "data.val_size=16", "data.test_size=32", "model.mixer=log_linear_mamba2",
        "model.d_model=16", "train.max_steps=4", "train.val_every=2", "logger.wandb.mode=disabled",
        "logger.progress=false", f"out_dir={tmp_path / 'run'}",
    ])
    train(cfg)
    recall = read_result(tmp_path / "run")["recall"]
    assert sum(n for _, n in recall["by_distance"].values()) == 32 * 2  # every test query, once
    assert recall["by_level"].keys() <= {str(level) for level in range(1, 5)}
    assert recall["state_at_recall"]["total"] > recall["state_at_recall"]["per_layer"] > 0
