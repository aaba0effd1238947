"""The shipped presets and specs say what their comments say: per-mixer heads, zoology's training,
the demo's paired design, the paper spec's tuning grid."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from loglinear.models import MIXERS as REGISTERED
from loglinear.models import ModelConfig, build_model
from loglinear.runs.config import load_run_config
from loglinear.sweeps.spec import expand, load_spec, planned_runs, points

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RESULTS = CONFIGS.parent / "results"
MIXERS = {"attention", "mamba2", "log_linear_mamba2", "gated_deltanet", "log_linear_gated_deltanet"}


def test_every_mixer_has_its_model_preset_and_it_builds():
    """configs/model/<name>.yaml selects the mixer <name> (2 layers, no MLP: zoology's MQAR models) and builds."""
    presets = sorted(p.stem for p in (CONFIGS / "model").glob("*.yaml"))
    assert presets == sorted(REGISTERED.names())
    for name in presets:
        cfg = load_run_config(None, ["data=data/mqar_cpu.yaml", f"model=model/{name}.yaml", "model.d_model=16",
                                     "out_dir=x"])
        assert (cfg.model.mixer, cfg.model.n_layers, cfg.model.mlp_ratio) == (name, 2, 0.0)
        build_model(ModelConfig.from_mapping(cfg.model))


def test_the_cpu_preset_sets_attention_heads_only():
    gdn_cfg = load_run_config(CONFIGS / "mqar_cpu.yaml", ["model.mixer=gated_deltanet"])
    assert gdn_cfg.model.attention_heads == 4 and gdn_cfg.model.deltanet_heads is None
    gdn = build_model(ModelConfig.from_mapping(gdn_cfg.model)).blocks[0].mixer
    assert gdn.n_heads == 2  # the paper's 2 heads at d_model 64, not the preset's 4 attention heads
    attention = build_model(ModelConfig.from_mapping(load_run_config(CONFIGS / "mqar_cpu.yaml").model))
    assert attention.blocks[0].mixer.n_heads == 4


@pytest.mark.parametrize("preset", ["mqar_paper.yaml", "mqar_zoology.yaml"])
def test_paper_and_zoology_presets_train_as_zoology(preset):
    train = load_run_config(CONFIGS / preset).train
    assert (train.beta1, train.beta2, train.weight_decay) == (0.9, 0.999, 0.1)
    assert (train.warmup_steps, train.grad_clip, train.min_lr_ratio, train.early_stop_threshold) == (0, 0.0, 0.0, 0.99)


def test_the_paper_preset_is_the_based_mix_and_the_256_variant_keeps_its_name():
    """zoology's Based training mix, its test sets up to 256 tokens; the all-256 mix as the named variant."""
    data = load_run_config(CONFIGS / "mqar_paper.yaml").data
    assert [(c["seq_len"], c["num_kv_pairs"], c["weight"]) for c in data.mixture] == [
        (64, 4, 100000), (128, 8, 20000), (256, 16, 20000), (256, 32, 20000), (256, 64, 20000)]
    assert [(s["seq_len"], s["num_kv_pairs"]) for s in data.eval_sets] == [
        (64, 4), (64, 8), (64, 16), (128, 32), (256, 64)]
    assert data.validate_on == "eval_sets" and data.batch_size == 256
    based = load_run_config(CONFIGS / "mqar_paper.yaml", ["data=data/mqar_based.yaml"]).data
    assert based.mixture == data.mixture and based.eval_sets[:5] == data.eval_sets
    variant = load_run_config(CONFIGS / "mqar_paper_256.yaml").data
    assert variant.task_args["seq_len"] == 256 and list(variant.task_args["num_kv_pairs"]) == [4, 8, 16, 32, 64]
    assert load_run_config(CONFIGS / "mqar_zoology.yaml").data == variant


def test_demo_pairs_its_architectures_over_the_same_seeds():
    runs = expand(load_spec(CONFIGS / "sweeps" / "demo_cpu.yaml"))
    seeds = {}
    for run in runs:
        cfg = run.config
        seeds.setdefault(cfg.model.mixer, []).append((cfg.train.seed, cfg.data.seed))
        assert cfg.train.early_stop_threshold == 0.99
    assert set(seeds) == {"attention", "gated_deltanet", "log_linear_gated_deltanet"}
    assert len({tuple(sorted(s)) for s in seeds.values()}) == 1  # the same seeds for every architecture
    assert all(len(set(s)) == len(s) >= 3 for s in seeds.values())
    assert all(r.config.model.attention_heads == 1 for r in runs)  # the paper's single attention head


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
    assert len(runs) == 45  # the count in the spec's header: 9 arms x 5 shared seeds
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
    assert all(len(set(s)) == len(s) >= 5 for s in seeds.values())


def test_parity_follow_up_uses_fresh_seeds_and_the_same_protocol():
    """The 4x lead's re-test: both Gated DeltaNets with [-1, 1] transitions, seeds the first sweep never used,
    and otherwise the very configuration of the first sweep's runs."""
    first = {(r.config.model.mixer, r.config.model.negative_eigenvalues, r.config.train.seed): r.config
             for r in expand(load_spec(CONFIGS / "sweeps" / "state_tracking_cpu.yaml"))}
    runs = expand(load_spec(CONFIGS / "sweeps" / "parity_gdn_confirm_cpu.yaml"))
    assert len(runs) == 10
    assert {(r.config.model.mixer, r.config.model.negative_eigenvalues) for r in runs} == {
        ("gated_deltanet", True), ("log_linear_gated_deltanet", True)}
    assert {r.config.train.seed for r in runs} == {6, 7, 8, 9, 10}
    assert not {r.config.train.seed for r in runs} & {seed for _, _, seed in first}
    for run in runs:
        cfg = run.config
        assert cfg.data.seed == cfg.train.seed
        reference = first[(cfg.model.mixer, True, 1)]
        same = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=1),
                                   data=dataclasses.replace(cfg.data, seed=1), out_dir=reference.out_dir)
        assert same == reference


def test_state_study_is_state_limited_with_equal_state_arms():
    """The header's numbers: key dim 8 against 16 pairs; every arm on the same 3 rates and 2 selection seeds, then
    8 other confirmation seeds; for each family a base whose state is the smallest at least as large as its
    log-linear variant's at the test length (64 tokens)."""
    spec = load_spec(CONFIGS / "sweeps" / "mqar_state_cpu.yaml")
    runs = expand(spec)
    assert len(runs) == 42 and planned_runs(spec) == 42 + 56
    assert spec.protocol.selection_seeds == [0, 9] and spec.protocol.confirmation_seeds == list(range(1, 9))
    arms: dict[tuple[str, int, int | None], set[tuple[float, int, int]]] = {}
    for run in runs:
        cfg = run.config
        arm = (cfg.model.mixer, cfg.model.state_dim, cfg.model.deltanet_key_dim)
        arms.setdefault(arm, set()).add((cfg.train.lr, cfg.train.seed, cfg.data.seed))
        assert max(s["num_kv_pairs"] for s in cfg.data.eval_sets) == 16 and cfg.model.attention_heads == 1
    candidates = {(lr, seed, seed) for lr in (3.0e-3, 1.0e-2, 3.0e-2) for seed in (0, 9)}
    assert len(arms) == 7 and all(points == candidates for points in arms.values())

    def state(mixer, state_dim=8, key_dim=None, built_with=None):
        cfg = next(r.config for r in runs if (r.config.model.mixer, r.config.model.state_dim,
                                              r.config.model.deltanet_key_dim) == (mixer, state_dim, key_dim))
        fields = dataclasses.asdict(cfg.model) | (built_with or {})
        model = build_model(ModelConfig.from_mapping(fields))
        return model.blocks[0].mixer, model.blocks[0].mixer.state_size(64)

    for mixer in ("mamba2", "gated_deltanet"):
        base, _ = state(mixer)
        assert base.key_dim == 8  # 16 pairs are twice the key dimension
    _, log_linear = state("log_linear_mamba2")
    _, equal = state("mamba2", 49)
    _, smaller = state("mamba2", 49, built_with={"state_dim": 48})
    assert (log_linear, equal) == (1936, 1958) and smaller < log_linear <= equal
    _, log_linear = state("log_linear_gated_deltanet")
    _, equal = state("gated_deltanet", key_dim=43)
    _, smaller = state("gated_deltanet", key_dim=43, built_with={"deltanet_key_dim": 42})
    assert (log_linear, equal) == (1984, 1988) and smaller < log_linear <= equal


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


@pytest.mark.parametrize("folder", sorted(p for p in RESULTS.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_committed_results_are_the_runs_their_spec_makes_today(folder):
    """Every run of the spec's first stage is a row of the committed results.csv and a run of its committed
    manifest (where the folder keeps one) under one of its ids (its id, or the one it had while the labels of its
    end were part of it, `Run.alias`): an id change (an option added to the run config without declaring it
    ADDED) would leave the results unreproducible, and a study in progress unable to resume. A study declared and not
    started holds its design alone."""
    if not (folder / "results.csv").is_file() and not (folder / "manifest.json").is_file():
        # a study declared before its runs and not started yet: its design alone, nothing to resume
        assert sorted(p.name for p in folder.iterdir()) == ["design.md"], folder.name
        return
    committed = []
    if (folder / "results.csv").is_file():
        with open(folder / "results.csv") as f:
            committed.append({row["run_id"] for row in csv.DictReader(f)})
    if (folder / "manifest.json").is_file():
        committed.append({run["id"] for run in json.loads((folder / "manifest.json").read_text())["runs"]})
    assert committed
    for run in expand(load_spec(CONFIGS / "sweeps" / f"{folder.name}.yaml")):
        for ids in committed:
            assert len(set(run.ids) & ids) == 1, run.ids
