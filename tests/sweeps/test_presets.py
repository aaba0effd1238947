"""The shipped presets and specs say what their comments say: per-mixer heads, zoology's training,
the demo's paired design, the paper spec's tuning grid."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from loglinear.models import ModelConfig, build_model
from loglinear.runs.config import load_run_config
from loglinear.sweeps.spec import expand, load_spec, points

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MIXERS = {"attention", "mamba2", "log_linear_mamba2", "gated_deltanet", "log_linear_gated_deltanet"}


def test_the_cpu_preset_sets_attention_heads_only():
    gdn_cfg = load_run_config(CONFIGS / "mqar_cpu.yaml", ["model.mixer=gated_deltanet"])
    assert gdn_cfg.model.attention_heads == 4 and gdn_cfg.model.deltanet_heads is None
    gdn = build_model(ModelConfig.from_mapping(gdn_cfg.model)).blocks[0].mixer
    assert gdn.n_heads == 2  # the paper's 2 heads at d_model 64, not the preset's 4 attention heads
    attention = build_model(ModelConfig.from_mapping(load_run_config(CONFIGS / "mqar_cpu.yaml").model))
    assert attention.blocks[0].mixer.n_heads == 4


def test_zoology_preset_trains_as_zoology():
    train = load_run_config(CONFIGS / "mqar_zoology.yaml").train
    assert (train.beta1, train.beta2, train.weight_decay) == (0.9, 0.999, 0.1)
    assert (train.warmup_steps, train.grad_clip, train.min_lr_ratio, train.early_stop_threshold) == (0, 0.0, 0.0, 0.99)
    assert load_run_config(CONFIGS / "mqar_zoology.yaml").data == load_run_config(CONFIGS / "mqar_paper.yaml").data


def test_demo_pairs_every_architecture_over_the_same_seeds():
    runs = expand(load_spec(CONFIGS / "sweeps" / "demo_cpu.yaml"))
    seeds = {}
    for run in runs:
        cfg = run.config
        seeds.setdefault(cfg.model.mixer, []).append((cfg.train.seed, cfg.data.seed))
        assert cfg.train.early_stop_threshold == 0.99
    assert set(seeds) == MIXERS
    assert len({tuple(sorted(s)) for s in seeds.values()}) == 1  # the same seeds for every architecture
    assert all(len(set(s)) == len(s) >= 3 for s in seeds.values())


def test_paper_spec_tunes_lr_and_lambda_per_cell():
    spec = load_spec(CONFIGS / "sweeps" / "mqar_paper.yaml")
    grid = list(points(spec))
    assert len(grid) == 840  # the count in the spec's header
    lambdas = Counter((p["model.mixer"], p["model.lambda_param"]) for p in grid)
    for mixer in ("log_linear_mamba2", "log_linear_gated_deltanet"):
        assert {lam for m, lam in lambdas if m == mixer} == {"softplus", "bounded"}
    assert {m for m, _ in lambdas} == MIXERS
    assert 3.16e-2 in {p["train.lr"] for p in grid}


@pytest.mark.parametrize("spec", ["state_tracking_cpu.yaml", "state_tracking_s3_cpu.yaml"])
def test_state_tracking_specs_pair_both_eigenvalue_ranges_and_test_past_training(spec):
    runs = expand(load_spec(CONFIGS / "sweeps" / spec))
    assert len(runs) == 27  # the count in the spec's header
    seeds = {}
    for run in runs:
        cfg = run.config
        seeds.setdefault((cfg.model.mixer, cfg.model.negative_eigenvalues), []).append((cfg.train.seed, cfg.data.seed))
        trained = cfg.data.task_args["seq_len"]
        tested = [s.get("seq_len", trained) for s in cfg.data.eval_sets]
        assert tested == [trained, 2 * trained, 4 * trained, 8 * trained]
        # trained on every prefix, tested on the final answer at exactly L
        assert "scored" not in cfg.data.task_args and all(s["scored"] == "last" for s in cfg.data.eval_sets)
        assert cfg.train.early_stop_threshold is None  # a fixed budget: stopping at 99% in distribution stops too early
    recurrent = MIXERS - {"attention"}
    assert set(seeds) == {(m, neg) for m in recurrent for neg in (False, True)} | {("attention", False)}
    assert len({tuple(sorted(s)) for s in seeds.values()}) == 1
    assert all(len(set(s)) == len(s) >= 3 for s in seeds.values())


def test_parity_follow_up_uses_fresh_seeds_and_the_same_protocol():
    """The 4x lead's re-test: both Gated DeltaNets with [-1, 1] transitions, seeds the first sweep never used,
    and otherwise the very configuration of the first sweep's runs."""
    first = {(r.config.model.mixer, r.config.model.negative_eigenvalues, r.config.train.seed): r.config
             for r in expand(load_spec(CONFIGS / "sweeps" / "state_tracking_cpu.yaml"))}
    runs = expand(load_spec(CONFIGS / "sweeps" / "parity_gdn_confirm_cpu.yaml"))
    assert len(runs) == 10
    assert {(r.config.model.mixer, r.config.model.negative_eigenvalues) for r in runs} == {
        ("gated_deltanet", True), ("log_linear_gated_deltanet", True)}
    assert {r.config.train.seed for r in runs} == {4, 5, 6, 7, 8}
    assert not {r.config.train.seed for r in runs} & {seed for _, _, seed in first}
    for run in runs:
        cfg = run.config
        assert cfg.data.seed == cfg.train.seed
        reference = first[(cfg.model.mixer, True, 1)]
        same = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=1),
                                   data=dataclasses.replace(cfg.data, seed=1), out_dir=reference.out_dir)
        assert same == reference


def test_grazzi_parity_spec_is_their_public_protocol():
    """automl/unlocking_state_tracking, xlstm/experiments/parity_mamba{,_2}.yaml: 2 layers, d_model 128, batch 256,
    lr 1e-3 with 2,000 warmup steps then cosine to 1e-3 x lr at 20,000 steps, training lengths 3..40."""
    runs = expand(load_spec(CONFIGS / "sweeps" / "parity_grazzi.yaml"))
    assert sorted((r.config.model.negative_eigenvalues, r.config.train.seed) for r in runs) == [
        (neg, seed) for neg in (False, True) for seed in range(1, 6)]
    for run in runs:
        cfg = run.config
        assert (cfg.model.mixer, cfg.model.n_layers, cfg.model.d_model, cfg.model.mlp_ratio) == ("mamba2", 2, 128, 0)
        assert cfg.data.task_args == {"seq_len": 40, "scored": "last", "min_seq_len": 3}
        assert cfg.data.batch_size == 256 and cfg.data.seed == cfg.train.seed
        t = cfg.train
        assert (t.lr, t.warmup_steps, t.max_steps, t.min_lr_ratio, t.weight_decay) == (1e-3, 2000, 20000, 1e-3, 0)
        assert t.early_stop_threshold is None
        assert [s.get("seq_len", 40) for s in cfg.data.eval_sets] == [40, 80, 160, 256]
        assert all(s["min_seq_len"] is None for s in cfg.data.eval_sets)  # each test set at exactly its length
