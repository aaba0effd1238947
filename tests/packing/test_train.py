"""A pack of runs ends as the same runs alone: mixers, tasks, stopping, divergence, refusals."""

from __future__ import annotations

import pytest

from loglinear.packing.compatibility import PackError
from loglinear.packing.train import train_pack
from loglinear.runs.metrics_rows import read_rows
from loglinear.runs.train import train

from .pairs import GRID, assert_same_run, configs

MIXERS = ["attention", "mamba2", "gated_deltanet", "log_linear_mamba2", "log_linear_gated_deltanet", "linear_attention",
          "retnet", "log_linear_deltanet"]


def _pack_against_alone(tmp_path, model, extra=(), grid=GRID, **kw):
    alone, packed = configs(tmp_path, "alone", model, extra, grid, **kw), configs(tmp_path, "packed", model, extra,
                                                                                  grid, **kw)
    for cfg in alone:
        train(cfg)
    results = train_pack(packed)
    for a in alone:
        assert_same_run(*(tmp_path / kind / a.out_dir.rsplit("/", 1)[1] for kind in ("alone", "packed")))
    return results


@pytest.mark.parametrize("model", MIXERS)
def test_a_pack_of_mqar_runs_ends_as_each_run_alone(tmp_path, model):
    results = _pack_against_alone(tmp_path, model)
    assert [r["status"] for r in results] == ["max_steps"] * 4 and all(r["step"] == 60 for r in results)


def test_a_pack_whose_batches_are_made_by_dataloader_workers_ends_as_each_run_alone(tmp_path):
    _pack_against_alone(tmp_path, "gated_deltanet", ["data.num_workers=2"])


@pytest.mark.parametrize("model", ["gated_deltanet", "log_linear_mamba2"])
def test_a_pack_of_state_tracking_runs_ends_as_each_run_alone(tmp_path, model):
    parity = ["data=data/parity.yaml", "data.task_args.seq_len=12", "data.eval_sets=[{seq_len: 24}]",
              "model.negative_eigenvalues=true"]
    _pack_against_alone(tmp_path, model, data=parity)


def test_a_pack_of_mad_runs_ends_as_each_run_alone(tmp_path):
    recall = ["data=data/selective_copying.yaml", "data.task_args.seq_len=32", "data.task_args.num_tokens_to_copy=4",
              "data.eval_sets=[{}]"]
    _pack_against_alone(tmp_path, "log_linear_gated_deltanet", data=recall)


def test_runs_stop_at_their_own_step_and_a_diverging_run_leaves_the_others_alone(tmp_path):
    grid = [(0, 3e-3), (1, 3e-3), (2, 1e9), (3, 1e-2)]
    # run 0 stops at its first validation (any accuracy above 0), run 2 diverges, runs 1 and 3 train on
    extra_of = {0: ["train.early_stop_threshold=0.0"], 2: ["train.warmup_steps=0"]}
    alone = [c for i, g in enumerate(grid) for c in configs(tmp_path, "alone", "gated_deltanet", extra_of.get(i, ()),
                                                            [g])]
    packed = [c for i, g in enumerate(grid) for c in configs(tmp_path, "packed", "gated_deltanet",
                                                             extra_of.get(i, ()), [g])]
    for cfg in alone:
        train(cfg)
    results = train_pack(packed)
    for a in alone:
        name = a.out_dir.rsplit("/", 1)[1]
        assert_same_run(tmp_path / "alone" / name, tmp_path / "packed" / name)
    assert [r["status"] for r in results] == ["early_stopped", "max_steps", "diverged", "max_steps"]
    assert results[0]["step"] == 20 and results[2]["step"] < 20


def test_a_finished_run_is_not_retrained_in_a_pack(tmp_path):
    cfgs = configs(tmp_path, "packed", "mamba2")
    train(cfgs[0])
    first = (tmp_path / "packed" / cfgs[0].out_dir.rsplit("/", 1)[1] / "result.json").read_text()
    train_pack(cfgs)
    assert (tmp_path / "packed" / cfgs[0].out_dir.rsplit("/", 1)[1] / "result.json").read_text() == first


def test_runs_that_cannot_share_a_pack_are_refused_naming_the_difference(tmp_path):
    a = configs(tmp_path, "x", "mamba2", grid=[(0, 1e-3)])[0]
    b = configs(tmp_path, "y", "mamba2", ["model.d_model=32"], grid=[(1, 1e-3)])[0]
    with pytest.raises(PackError, match=r"differ in model.d_model: 16 -> 32"):
        train_pack([a, b])
    c = configs(tmp_path, "z", "mamba2", ["train.patience=3"], grid=[(1, 1e-3)])[0]
    with pytest.raises(PackError, match=r"train.patience=3"):
        train_pack([a, c])
    assert not (tmp_path / "x").exists()


def test_a_pack_whose_batches_sometimes_score_nothing_ends_as_each_run_alone(tmp_path):
    """Compression where noise takes most positions: about 7% of the batches of 4 score no position (a loss of 0 and
    a zero gradient for that run, the last train accuracy logged again): seed 0's batches 24 and 30, seed 1's 17,
    25, 26, 49 and 50, so that batches 24 and 49 fall on logging steps (every 5)."""
    noisy = ["data=data/compression.yaml", "data.task_args={vocab_size: 8, seq_len: 4, noise_vocab_size: 2, "
             "frac_noise: 0.8}", "data.eval_sets=[{}]"]
    results = _pack_against_alone(tmp_path, "gated_deltanet", ["data.batch_size=4", "train.val_every=5",
                                                                   "train.early_stop_threshold=null"], data=noisy)
    assert [r["status"] for r in results] == ["max_steps"] * 4
    for name, step in (("0_0.001", 24), ("1_0.003", 49)):
        logged = {r["step"]: r for r in read_rows(tmp_path / "packed" / name / "metrics.csv") if "train/loss" in r}
        assert float(logged[str(step)]["train/loss"]) == 0.0
        assert logged[str(step)]["train/acc"] == logged[str(step - 5)]["train/acc"]


def test_a_pack_of_runs_on_a_mixture_s_fixed_set_ends_as_each_run_alone(tmp_path):
    """A fixed set of a mixture ends each component's epoch with a smaller batch, at a step of its own in each run's
    order: the pack pads those batches with rows that score nothing. 70 examples in components of 47 and 23 at
    batch 8: 6 and 3 batches, the last of 7 rows each, 9 steps an epoch."""
    mixture = ["data=data/mqar_cpu.yaml", "data.task_args.vocab_size=32", "data.mixture=[{seq_len: 16, num_kv_pairs: "
               "2, weight: 2}, {seq_len: 24, num_kv_pairs: 4, weight: 1}]", "data.eval_sets=[{seq_len: 16}]",
               "data.train_size=70"]
    _pack_against_alone(tmp_path, "gated_deltanet", data=mixture)
