"""configs/sweeps/mqar_paper_gpu.yaml, the paper's question at the paper's budget, says what its header says, and its
whole path (selection, extension, confirmation, report) runs packed on the CPU at a reduced budget: a pilot of the
machinery, not a scientific result."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from loglinear.cli import sweep_main
from loglinear.protocol.power import check_design
from loglinear.reports.spread import resolve_spread
from loglinear.sweeps.spec import expand, load_spec, planned_runs
from loglinear.synthetics.config import training_set
from loglinear.synthetics.streams import component_sizes

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "configs" / "sweeps" / "mqar_paper_gpu.yaml"
SPREAD_STUDY = ROOT / "results" / "mqar_levels_cpu" / "results.csv"
PAPER_GAP = 5.4
"""The paper's gap between log-linear Gated DeltaNet and Gated DeltaNet at d_model 32, in points."""


def test_the_study_trains_as_the_paper_and_zoology_do():
    spec = load_spec(SPEC)
    runs = expand(spec)
    for run in runs:
        cfg = run.config
        assert (cfg.train.max_steps, cfg.data.batch_size) == (22_500, 256)
        assert (cfg.train.beta1, cfg.train.beta2, cfg.train.weight_decay) == (0.9, 0.999, 0.1)
        assert (cfg.train.warmup_steps, cfg.train.grad_clip, cfg.train.min_lr_ratio) == (0, 0.0, 0.0)
        assert (cfg.model.d_model, cfg.model.init, cfg.model.lambda_param) == (32, "authors", "softplus")
        assert cfg.data.train_size == 180_000 and cfg.data.task_args["vocab_size"] == 8192
    train = training_set(runs[0].config.data)
    sizes = component_sizes(train.weights, 180_000)
    assert sizes == [100_000, 20_000, 20_000, 20_000, 20_000]
    batches = sum(math.ceil(n / 256) for n in sizes)  # an epoch, a batch holding one component's examples
    assert batches == 707 and round(22_500 / batches, 1) == 31.8
    assert [(t.seq_len, t.num_kv_pairs) for t in train.tasks] == [(64, 4), (128, 8), (256, 16), (256, 32), (256, 64)]
    assert {r.config.model.mixer for r in runs} == {"gated_deltanet", "log_linear_gated_deltanet"}
    assert np.allclose(spec.grid["train.lr"], np.logspace(-3, -1.5, 4), rtol=0.01)  # the Based grid the paper follows
    assert min(spec.protocol.selection_seeds + spec.protocol.confirmation_seeds) >= 200
    assert len(spec.protocol.selection_seeds) >= 4 and len(spec.protocol.confirmation_seeds) == 70
    assert planned_runs(spec) == 2 * (4 * 4 + 70)


def test_the_declared_effect_is_the_paper_s_gap_at_the_spread_of_the_same_pair_on_the_cpu():
    """The effect is the paper's 5.4 points at d_model 32; its spread is read from mqar_levels_cpu's same-size Gated
    DeltaNet pair (16 confirmation pairs, 15.3 points), and 70 seeds give it power 0.8."""
    with open(SPREAD_STUDY, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["stage"] == "confirmation" and r["model.deltanet_key_dim"] == ""
                and r["mixer"] in ("gated_deltanet", "log_linear_gated_deltanet")]
    by_seed: dict[str, dict[str, float]] = {}
    for row in rows:
        by_seed.setdefault(row["seed"], {})[row["mixer"]] = 100 * float(row["test/acc"])
    differences = np.array([s["log_linear_gated_deltanet"] - s["gated_deltanet"] for s in by_seed.values()])
    assert len(differences) == 16
    spec = resolve_spread(load_spec(SPEC))
    primary = spec.report.primary
    assert (primary.mixer, primary.baseline, primary.test) == ("log_linear_gated_deltanet", "gated_deltanet",
                                                                "accuracy")
    assert primary.effect.difference == pytest.approx(PAPER_GAP / 100)
    assert primary.effect.sd == round(differences.std(ddof=1) / 100, 6) and round(primary.effect.sd, 3) == 0.153
    design = check_design(spec)
    assert design.seeds == 70 and 0.8 <= design.power < 0.83 and design.shortfall is None


def _pilot_spec(folder: Path) -> Path:
    """The study's spec at a reduced budget: small sequences and vocabulary, a fixed mixture set of 240 examples, 40
    steps, 2 of its rates on 2 selection seeds and 6 confirmation seeds (the fewest with which its Wilcoxon primary
    can reach alpha 0.05)."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["name"] = "mqar_paper_gpu_pilot"
    spec["base"].update({
        "preset": str(ROOT / "configs" / "mqar_paper.yaml"),
        "data.task_args.vocab_size": 64,
        "data.mixture": [{"seq_len": 16, "num_kv_pairs": 2, "weight": 100}, {"seq_len": 32, "num_kv_pairs": 4,
                                                                           "weight": 20}],
        "data.eval_sets": [{"seq_len": 16, "num_kv_pairs": 2}, {"seq_len": 32, "num_kv_pairs": 4}],
        "data.train_size": 240, "data.batch_size": 16, "data.val_size": 32, "data.test_size": 32,
        "train.max_steps": 40, "train.val_every": 20,
    })
    spec["grid"]["train.lr"] = spec["grid"]["train.lr"][-2:]
    spec["protocol"].update({"selection_seeds": [17, 18], "confirmation_seeds": [1, 2, 3, 4, 5, 6],
                             "allow_few_selection_seeds": True})
    spec["report"]["primary"]["exploratory"] = True  # 6 seeds: a pilot of the machinery, its power is not the point
    del spec["report"]["primary"]["effect"]
    path = folder / "pilot.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_cpu_pilot_of_the_study_runs_its_whole_path_packed(tmp_path, monkeypatch):
    """Not a scientific result: 40 steps of a small MQAR; it shows that selection, the extension past an edge,
    confirmation and the report run for this spec with --pack."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    assert sweep_main(["run", str(_pilot_spec(tmp_path)), "--out", str(out), "--pack", "6", "--workers", "2",
                       "--quiet"]) == 0
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    confirmation = [r for r in rows if r["stage"] == "confirmation"]
    assert len(confirmation) == 12 and all(r["status"] in ("max_steps", "early_stopped") for r in rows)
    assert {r["mixer"] for r in confirmation} == {"gated_deltanet", "log_linear_gated_deltanet"}
    table = (out / "table.md").read_text()
    assert "**Primary comparison** (declared before the runs, tested alone at alpha 0.05): Log-Linear Gated " \
           "DeltaNet − Gated DeltaNet (d_model=32): Wilcoxon signed-rank on test accuracy" in table
    verdict = table.split("**Primary comparison**")[1].split("\n")[0]
    assert verdict.rstrip(".").endswith(("not significant", ": significant"))
    logs = [(out / "runs" / r["run_id"] / "train.log").read_text() for r in rows]
    assert any("--pack" in log for log in logs)
