"""The lambda study on the interleaved MQAR says what its header says (five parameterisations of each log-linear
mixer, the base mixers, the same three rates for every arm, 8 confirmation seeds, a primary whose design passes
the power check), and its report can compute that primary and rank the parameterisations: the whole two-stage
pipeline on made-up results, training replaced by a stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglinear.cli import sweep_main
from loglinear.protocol.power import check_design
from loglinear.reports.report import write_report
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import RUNS
from loglinear.sweeps.runner import SweepOutcome
from loglinear.sweeps.spec import expand, load_spec, planned_runs

from ..reports.report_helpers import finished, section_rows

SPEC = Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "mqar_lambda_levels_cpu.yaml"
LAMBDAS = ("softplus", "bounded", "sigmoid", "softmax", "static")
BASES = {"log_linear_mamba2": "mamba2", "log_linear_gated_deltanet": "gated_deltanet"}


def test_the_study_crosses_five_lambdas_of_each_log_linear_mixer_with_the_same_rates():
    spec = load_spec(SPEC)
    runs = expand(spec)
    assert len(runs) == 72 and planned_runs(spec) == 72 + 12 * 8
    assert spec.protocol.selection_seeds == [0, 9] and spec.protocol.confirmation_seeds == list(range(1, 9))
    assert spec.protocol.extensions == 2
    arms: dict[tuple[str, str | None], set] = {}
    for run in runs:
        cfg = run.config
        assert cfg.data.task_args["layout"] == "interleaved" and cfg.model.state_dim == 8
        assert cfg.model.deltanet_key_dim is None and cfg.model.d_model == 16
        lam = cfg.model.lambda_param if cfg.model.mixer in BASES else None
        arms.setdefault((cfg.model.mixer, lam), set()).add((cfg.train.lr, cfg.train.seed))
    assert set(arms) == {(m, lam) for m in BASES for lam in LAMBDAS} | {(b, None) for b in BASES.values()}
    assert all(points == {(lr, s) for lr in (3.0e-3, 1.0e-2, 3.0e-2) for s in (0, 9)} for points in arms.values())
    design = check_design(spec)
    assert design.seeds == 8 and design.power == pytest.approx(0.77, abs=0.005)  # the signed-rank test's


def test_the_reference_arms_are_the_levels_study_runs():
    """The header's claim: the base mixers and softplus arms have mqar_levels_cpu's run ids (reusable folders)."""
    levels = {r.run_id for r in expand(load_spec(SPEC.parent / "mqar_levels_cpu.yaml"))}
    shared = {r.run_id for r in expand(load_spec(SPEC))
              if r.config.model.mixer in BASES.values() or r.config.model.lambda_param == "softplus"}
    assert len(shared) == 24 and shared <= levels


def made_up_accuracy(mixer: str, lam: str, seed: int) -> float:
    """Test accuracy of a confirmation run: every arm its own level, bounded above softplus on log-linear Mamba-2
    by a seed-dependent amount (so the paired t has a spread); softmax solves on even seeds."""
    if mixer in BASES.values():
        return 0.6
    if lam == "softmax":
        return 0.995 if seed % 2 == 0 else 0.7
    level = {"softplus": 0.5, "bounded": 0.55, "sigmoid": 0.45, "static": 0.4}[lam]
    return level + (0.01 * seed if lam == "bounded" and mixer == "log_linear_mamba2" else 0.0)


def test_the_report_computes_the_declared_primary_and_ranks_the_parameterisations(tmp_path, monkeypatch):
    out = tmp_path / "out"

    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        for r in runs:
            if (out / RUNS / r.run_id / "result.json").is_file():
                continue
            mixer, lam = r.config.model.mixer, r.config.model.lambda_param
            if r.stage == "selection":
                result = finished(0.5 if r.point["train.lr"] == 1.0e-2 else 0.3)  # an interior pick everywhere
            else:
                acc = made_up_accuracy(mixer, lam, r.config.train.seed)
                result = finished(0.5, test_acc=acc, steps_to_threshold=100 if acc > 0.99 else None)
            write_json_atomic(out / RUNS / r.run_id / "result.json", result)
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    assert sweep_main(["run", str(SPEC), "--out", str(out), "--quiet"]) == 0
    table = write_report(out).table
    primary = next(line for line in table.splitlines() if line.startswith("**Primary comparison**"))
    assert "Log-Linear Mamba-2 (λ bounded) − Log-Linear Mamba-2 (λ softplus)" in primary
    assert "Wilcoxon signed-rank" in primary and "W+=36 over 8" in primary and primary.endswith(": significant.")
    ranking = section_rows(table, "Ranking of the λ parameterisations")
    header, body = ranking[0], ranking[1:]
    assert header[:5] == ["Architecture", "d_model", "rank", "λ", "learning rate"]
    for family in ("Log-Linear Mamba-2", "Log-Linear Gated DeltaNet"):
        rows = [r for r in body if r[0] == family]
        assert len(rows) == 6 and rows[0][2:4] == ["1", "softmax"] and rows[0][5].startswith("4/8 [")
        assert rows[1][3].endswith("(base)") and rows[-1][2:4] == ["6", "static"]
    llm2 = [r[3] for r in body if r[0] == "Log-Linear Mamba-2"]
    assert llm2 == ["softmax", "Mamba-2 (base)", "bounded", "softplus", "sigmoid", "static"]
