"""A pack of runs ends as the same runs alone: mixers, tasks, stopping, divergence, refusals."""

from __future__ import annotations

import shutil

import pytest
import torch

from loglinear.packing.compatibility import PackError
from loglinear.packing.train import MemberFailed, train_pack
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import read_result
from loglinear.runs.metrics_rows import read_rows
from loglinear.runs.train import train

from ..slow_cases import default_and_slow
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


@pytest.mark.parametrize("model", default_and_slow(MIXERS, ["log_linear_mamba2", "log_linear_gated_deltanet"]))
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


def test_a_pack_of_runs_with_several_right_answers_ends_as_each_run_alone(tmp_path):
    """RegBench's accuracy counts any allowed next symbol as right, in a pack's train/acc as in a run's own."""
    languages = ["data=data/regbench.yaml", "data.task_args.seq_len=32", "data.task_args.max_string_len=6",
                 "data.eval_sets=[{}]", "data.train_size=null"]
    _pack_against_alone(tmp_path, "gated_deltanet", data=languages)


def test_a_pack_of_runs_that_read_stacked_pairs_ends_as_each_run_alone(tmp_path):
    """Stacked MQAR's pair tokens read through the stacked embedding, in a pack as in a run alone."""
    stacked = ["data=data/stacked_mqar.yaml", "data.task_args.num_keys=8", "data.task_args.num_kv_pairs=4",
               "data.eval_sets=[{}]"]
    _pack_against_alone(tmp_path, "mamba2", data=stacked)


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


@pytest.mark.parametrize("bad, raised, words", [
    ("init_from", ConfigError, "train.init_from="),
    ("another model's checkpoint", ConfigError, "holds progress made with another configuration"),
    ("another model's checkpoint from before it recorded its configuration", MemberFailed, "RuntimeError"),
])
def test_a_run_s_own_bad_input_ends_it_alone_and_the_others_train_on(tmp_path, bad, raised, words):
    """As alone: a train.init_from that is no finished run fails the run (its result says so), a checkpoint made
    by another configuration is refused (nothing written), one that does not load fails it; the pack's other runs
    end as they would, and the error is raised once they have."""
    grid, short = [(0, 1e-3), (1, 1e-3)], ["train.max_steps=20", "train.val_every=10"]
    extra = [*short, f"train.init_from={tmp_path / 'nothing'}"] if bad == "init_from" else short
    cfgs = [*configs(tmp_path, "packed", "attention", extra, grid[:1]), *configs(tmp_path, "packed", "attention",
                                                                                 short, grid[1:])]
    first = tmp_path / "packed" / "0_0.001"
    if bad != "init_from":
        (other,) = configs(tmp_path, "other", "attention", [*short, "model.d_model=32"], grid=grid[:1])
        train(other)
        first.mkdir(parents=True)
        shutil.copy(tmp_path / "other" / "0_0.001" / "last.ckpt", first / "last.ckpt")
        if "before" in bad:
            checkpoint = torch.load(first / "last.ckpt", weights_only=False)
            del checkpoint["run_identity"]
            torch.save(checkpoint, first / "last.ckpt")
    with pytest.raises(raised, match=words) as error:
        train_pack(cfgs)
    assert str(first) in str(error.value) and "\n" not in str(error.value)
    assert read_result(tmp_path / "packed" / "1_0.001")["status"] == "max_steps"
    if raised is ConfigError and bad != "init_from":
        assert sorted(p.name for p in first.iterdir()) == [".lock", "last.ckpt"]  # refused: nothing written
    else:
        assert read_result(first)["status"] == "failed"


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is 32-true on a machine without a GPU")
def test_auto_and_32_true_share_a_pack_where_they_are_one_precision(tmp_path):
    a = configs(tmp_path, "x", "attention", ["train.precision=auto"], grid=[(0, 1e-3)])[0]
    b = configs(tmp_path, "y", "attention", ["train.precision=32-true"], grid=[(1, 1e-3)])[0]
    assert [r["status"] for r in train_pack([a, b])] == ["max_steps", "max_steps"]
