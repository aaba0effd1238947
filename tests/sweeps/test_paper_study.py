"""The paper-regime MQAR studies (Gated DeltaNet's pair, Mamba-2's pair) say what their headers say: the paper's task
and sizes, the authors' initialisation for every arm, the same rates and seeds for every arm, and pairs that share
their data and every initial weight both arms draw by the same rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglinear.models import MIXERS
from loglinear.sweeps.spec import expand, load_spec, planned_runs

from .pairing import drawn_apart, initial_weights, same_first_batch

SWEEPS = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
SPEC, MAMBA2_SPEC = SWEEPS / "mqar_paper_cpu.yaml", SWEEPS / "mqar_paper_mamba2_cpu.yaml"
PAIRS = {SPEC: ("log_linear_gated_deltanet", "gated_deltanet"), MAMBA2_SPEC: ("log_linear_mamba2", "mamba2")}
APART = {SPEC: ("out_proj.weight",), MAMBA2_SPEC: ("out_proj.weight", "A_log")}
"""Where each pair's initial weights differ under the authors' initialisation, per layer (docs/runs.md)."""
PILOT_SEEDS = {0}


def test_the_mamba2_pair_runs_as_the_gated_deltanet_pair_without_a_primary():
    gdn, mamba2 = load_spec(SPEC), load_spec(MAMBA2_SPEC)
    assert (mamba2.base, mamba2.grid, mamba2.protocol) == (gdn.base, gdn.grid, gdn.protocol)
    assert mamba2.report.primary is None and mamba2.report.plateau == gdn.report.plateau


@pytest.mark.parametrize("path", list(PAIRS), ids=lambda p: p.stem)
def test_the_study_runs_the_paper_task_at_one_size_with_the_authors_init_on_shared_rates_and_seeds(path):
    spec = load_spec(path)
    runs = expand(spec)
    selection, confirmation = spec.protocol.selection_seeds, spec.protocol.confirmation_seeds
    assert len(selection) >= 4 and len(confirmation) >= 16
    assert not (set(selection) | set(confirmation)) & PILOT_SEEDS
    rates = spec.grid["train.lr"]
    arms: dict[str, set] = {}
    for run in runs:
        cfg = run.config
        task = cfg.data.task_args
        assert (task["vocab_size"], task["seq_len"], list(task["num_kv_pairs"])) == (8192, 256, [4, 8, 16, 32, 64])
        assert cfg.model.init == "authors" and cfg.model.d_model == spec.base["model.d_model"]
        assert cfg.train.seed == cfg.data.seed
        arms.setdefault(cfg.model.mixer, set()).add((cfg.train.lr, cfg.train.seed))
    assert set(arms) == set(PAIRS[path])
    assert all(points == {(lr, s) for lr in rates for s in selection} for points in arms.values())
    assert planned_runs(spec) == 2 * (len(rates) * len(selection) + len(confirmation))
    primary = spec.report.primary
    if path == SPEC:
        assert (primary.mixer, primary.baseline, primary.equal_state) == (*PAIRS[SPEC], False)


@pytest.mark.parametrize("path", list(PAIRS), ids=lambda p: p.stem)
def test_each_pair_shares_its_data_and_every_initial_weight_drawn_by_the_same_rule(path):
    """Under the authors' initialisation a log-linear mixer and its base start apart only where the authors' models
    do (docs/runs.md): the output projections, and Mamba-2's A. Everything else, the embedding included, is the
    same draw at the pair's seed, and both arms train and are scored on the same data."""
    runs = {(r.config.model.mixer, r.config.train.lr, r.config.train.seed): r.config
            for r in expand(load_spec(path))}
    lr, seed = min((lr, s) for _, lr, s in runs)
    mixer, base = PAIRS[path]
    assert MIXERS[mixer].base == base
    loglin_cfg, base_cfg = runs[(mixer, lr, seed)], runs[(base, lr, seed)]
    assert loglin_cfg.data == base_cfg.data and loglin_cfg.train == base_cfg.train
    shared = initial_weights(base_cfg)
    apart = drawn_apart(initial_weights(loglin_cfg), shared)
    layers = range(base_cfg.model.n_layers)
    expected = {f"blocks.{i}.mixer.{name}" for i in layers for name in APART[path]}
    assert apart == expected
    assert "embedding.weight" in shared and len(shared) - len(apart) > len(apart)
    assert same_first_batch(loglin_cfg, base_cfg)
