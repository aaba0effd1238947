"""The paper-regime λ study says what its header says: mqar_paper_cpu's regime, four λ of log-linear Gated DeltaNet
and Gated DeltaNet on the same three rates without extension, the λ = 1 control as the primary's other side, arms
that start apart only in λ's own parameters, and reference arms that are mqar_paper_cpu's runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglinear.cli import sweep_main
from loglinear.protocol.extension import beyond, extension_points, grid_step
from loglinear.protocol.power import check_design
from loglinear.reports.report import write_report
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import RUNS
from loglinear.sweeps.runner import SweepOutcome
from loglinear.sweeps.spec import expand, load_spec, planned_runs

from ..reports.report_helpers import finished
from .pairing import drawn_apart, initial_weights, same_first_batch

SWEEPS = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
SPEC, PAPER = SWEEPS / "mqar_paper_lambda_cpu.yaml", SWEEPS / "mqar_paper_cpu.yaml"
LOG_LINEAR = "log_linear_gated_deltanet"
ARMS = {("gated_deltanet", "softplus")} | {(LOG_LINEAR, lam) for lam in ("softplus", "bounded", "static", "constant")}
RATES = (1.0e-2, 3.0e-2, 9.0e-2)


def test_the_study_runs_the_paper_regime_with_four_lambdas_on_the_same_three_rates():
    spec, paper = load_spec(SPEC), load_spec(PAPER)
    assert spec.base == paper.base and spec.report.plateau == paper.report.plateau
    assert spec.protocol.selection_seeds == paper.protocol.selection_seeds
    assert spec.protocol.confirmation_seeds == list(range(1, 9)) and spec.protocol.extensions == 0
    arms: dict[tuple[str, str], set] = {}
    for run in expand(spec):
        cfg = run.config
        assert cfg.model.init == "authors" and cfg.train.seed == cfg.data.seed
        arms.setdefault((cfg.model.mixer, cfg.model.lambda_param), set()).add((cfg.train.lr, cfg.train.seed))
    assert set(arms) == ARMS
    assert all(points == {(lr, s) for lr in RATES for s in spec.protocol.selection_seeds} for points in arms.values())
    assert planned_runs(spec) == len(ARMS) * (len(RATES) * 4 + 8)
    primary = spec.report.primary
    assert (primary.mixer, primary.baseline) == (f"{LOG_LINEAR}[constant]", f"{LOG_LINEAR}[softplus]")
    design = check_design(spec)
    assert design.seeds == 8 and design.best_p == pytest.approx(2 * 0.5**8)
    assert design.power == pytest.approx(0.77, abs=0.005)


def test_the_rates_are_the_paper_studys_grid_and_its_one_step_above_it():
    paper = load_spec(PAPER)
    assert sorted(paper.grid["train.lr"]) == list(RATES[:2]) and paper.protocol.extensions == 1
    assert beyond(max(RATES[:2]), "highest", grid_step(paper)) == RATES[2]


def test_the_reference_arms_are_the_paper_studys_runs():
    """Gated DeltaNet and the softplus arm have mqar_paper_cpu's run ids at all three rates (its grid, and the
    rate above it on the selection seeds as its extension stage plans it), so their folders can be copied."""
    paper = load_spec(PAPER)
    grid_runs = expand(paper)
    highest = max(paper.grid["train.lr"])
    first_seed = paper.protocol.selection_seeds[0]
    extended = expand(paper, extension_points(paper, [{**r.point, "train.lr": RATES[2]} for r in grid_runs
                                                      if r.point["train.lr"] == highest
                                                      and r.point["train.seed"] == first_seed]))
    theirs = {r.run_id for r in grid_runs + extended}
    ours = {r.run_id for r in expand(load_spec(SPEC)) if r.config.model.lambda_param == "softplus"}
    assert len(ours) == 2 * len(RATES) * 4 and ours <= theirs


def test_the_lambda_arms_start_apart_only_in_lambdas_own_parameters_on_the_same_data():
    runs = {(r.config.model.mixer, r.config.model.lambda_param, r.config.train.lr, r.config.train.seed): r.config
            for r in expand(load_spec(SPEC))}
    seed = 17
    softplus_cfg = runs[(LOG_LINEAR, "softplus", RATES[1], seed)]
    softplus = initial_weights(softplus_cfg)
    for lam in ("bounded", "static", "constant"):
        cfg = runs[(LOG_LINEAR, lam, RATES[1], seed)]
        assert cfg.data == softplus_cfg.data and cfg.train == softplus_cfg.train
        other = initial_weights(cfg)
        differing = (set(softplus) ^ set(other)) | drawn_apart(softplus, other)
        assert differing and all(".lambda_head." in name for name in differing)
        assert {n for n in softplus if ".lambda_head." not in n} == {n for n in other if ".lambda_head." not in n}
        assert "embedding.weight" in set(softplus) & set(other)
        assert same_first_batch(softplus_cfg, cfg)


def made_up_accuracy(mixer: str, lam: str, seed: int) -> float:
    """Test accuracy of a confirmation run: constant below softplus by a seed-dependent amount, the others level."""
    if mixer == "gated_deltanet":
        return 0.3
    return {"softplus": 0.5, "bounded": 0.5, "static": 0.45, "constant": 0.4 - 0.01 * seed}[lam]


def test_the_report_computes_the_declared_primary_without_extending_the_grid(tmp_path, monkeypatch):
    out, trained = tmp_path / "out", []

    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        for r in runs:
            trained.append(r.stage)
            if r.stage == "selection":  # the lowest rate best everywhere: an edge pick, marked, not extended
                result = finished(0.5 if r.point["train.lr"] == RATES[0] else 0.3)
            else:
                assert r.point["train.lr"] == RATES[0]
                result = finished(0.5, test_acc=made_up_accuracy(r.config.model.mixer, r.config.model.lambda_param,
                                                                 r.config.train.seed))
            write_json_atomic(out / RUNS / r.run_id / "result.json", result)
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    assert sweep_main(["run", str(SPEC), "--out", str(out), "--quiet"]) == 0
    assert (trained.count("selection"), trained.count("confirmation")) == (60, 40)
    table = write_report(out).table
    primary = next(line for line in table.splitlines() if line.startswith("**Primary comparison**"))
    assert "Log-Linear Gated DeltaNet (λ constant) − Log-Linear Gated DeltaNet (λ softplus)" in primary
    assert "Wilcoxon signed-rank" in primary and primary.endswith(": significant.")
