"""`loglinear inspect RUN_DIR` and `loglinear sweep report --lambda`: a hand-set lambda comes out exactly,
the plot is drawn, non-log-linear runs and missing checkpoints are refused, the report's per-cell figures."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from loglinear.cli import main
from loglinear.kernels import num_levels
from loglinear.models import LAMBDA_PARAMS
from loglinear.models.lambda_levels import LevelRow, capture_lambda, lambda_heads
from loglinear.protocol.results import load_sweep
from loglinear.reports.lambda_inspect import LEVELS_CSV, LEVELS_PNG, inspect_run, read_csv
from loglinear.reports.lambda_plots import REPORT, Profile, cell_figure, control_accuracy, profile_of
from loglinear.reports.lambda_recall import RECALL_CSV, RecallRow
from loglinear.runs.config import load_run_config, to_yaml
from loglinear.runs.folder import write_json_atomic
from loglinear.runs.lit import LitLanguageModel
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.spec import expand, load_spec

from ..sweeps.sweep_helpers import write_spec
from .report_helpers import finished, make_sweep, run_entry

# Validation on the eval sets: lengths 8 and 16 (16 = the model's max_len, 5 levels).
TINY = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.eval_sets=[{},{seq_len: 16}]", "data.validate_on=eval_sets", "data.batch_size=16", "data.val_size=32",
    "model.mixer=log_linear_mamba2", "model.d_model=16", "model.lambda_bias_init=zero",
    "logger.wandb.mode=disabled",
]


def make_run(folder: Path, *overrides: str, set_weights=None, checkpoint: bool = True, cfg=None):
    """A run directory by hand: config.yaml and (optionally) last.ckpt of a fresh model changed by `set_weights`."""
    cfg = cfg or load_run_config(None, [*TINY, *overrides, f"out_dir={folder}"])
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(to_yaml(cfg))
    module = LitLanguageModel(cfg.model, cfg.train)
    if set_weights is not None:
        with torch.no_grad():
            set_weights(module.model)
    if checkpoint:
        torch.save({"state_dict": module.state_dict()}, folder / "last.ckpt")
    return module.model


def target_profile(n_heads: int, n_distinct: int) -> torch.Tensor:
    """A profile in (0.05, 0.95) that every parameterisation can hold: decaying with the level, per head."""
    level = torch.arange(n_distinct, dtype=torch.float64)
    return (0.9 * 0.7**level)[None, :] * (1 - 0.1 * torch.arange(n_heads, dtype=torch.float64))[:, None]


def set_profile(model) -> None:
    """lambda independent of the input (the input projections, the lambda head's too, zeroed) with the bias at
    the target profile."""
    for mixer, head in zip([b.mixer for b in model.blocks], lambda_heads(model), strict=True):
        mixer.in_proj.weight.zero_()
        if head.proj is not None:
            for p in head.proj.parameters():
                p.zero_()
        if head.param.bias is not None:
            head.param.bias.copy_(head.param.inverse(target_profile(*head.param.bias.shape)))


@pytest.mark.parametrize("lambda_param", LAMBDA_PARAMS.names())
def test_a_hand_set_profile_comes_out_exactly(tmp_path, lambda_param):
    model = make_run(tmp_path / "run", f"model.lambda_param={lambda_param}", set_weights=set_profile)
    inspection = inspect_run(tmp_path / "run", device="cpu")
    rows = read_csv(tmp_path / "run" / LEVELS_CSV)
    assert [repr(r) for r in rows] == [repr(r) for r in inspection.rows]  # repr: NaN effective means compare equal
    levels = num_levels(16)
    assert sorted({r.level for r in rows}) == list(range(levels))
    tokens_level0 = 32 * 8 + 32 * 16  # every position of both validation sets
    with torch.no_grad(), capture_lambda(model.eval()) as captured:
        model(torch.randint(0, 16, (4, 16)))
    for layer, ((lam,), head) in enumerate(zip(captured, lambda_heads(model), strict=True)):
        expected = lam[0, 0]  # (H, L): the lambda the model uses, the same at every token
        assert (lam == expected).all()
        formula = head(torch.zeros(1, model.cfg.d_model), torch.zeros(1, head.n_heads))[0].detach()
        torch.testing.assert_close(expected, formula, rtol=1e-6, atol=0)
        if lambda_param in ("softplus", "static", "sigmoid", "bounded"):
            torch.testing.assert_close(expected.double(), target_profile(*expected.shape), rtol=1e-5, atol=1e-6)
        for r in (r for r in rows if r.layer == layer):
            value = float(expected[r.head, r.level])
            assert r.mean == value and r.std == 0.0 and set(r.quantiles.values()) == {value}
            if r.level == 0:
                assert r.tokens == tokens_level0
    occupied_level4 = 32 * 8  # positions 8..15 of the length-16 set
    assert {r.tokens for r in rows if r.level == 4} == {occupied_level4}


def test_the_plot_is_written_and_shows_something(tmp_path, capsys):
    make_run(tmp_path / "run", "model.mixer=log_linear_gated_deltanet", "model.n_layers=2")
    assert main(["inspect", str(tmp_path / "run"), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "layer 0:" in out and "layer 1:" in out
    png = tmp_path / "run" / LEVELS_PNG
    assert png.stat().st_size > 10_000
    image = imread(png)
    assert image.shape[0] > 200 and image.shape[1] > 300 and np.ptp(image[..., :3]) > 0.5
    with open(tmp_path / "run" / LEVELS_CSV) as f:
        rows = list(csv.DictReader(f))
    assert all(0 <= float(r["effective_mean"]) <= 1 for r in rows) and {r["effective_tokens"] for r in rows} != {"0"}


def test_a_non_log_linear_run_is_refused_with_one_line(tmp_path, capsys):
    make_run(tmp_path / "run", "model.mixer=mamba2")
    assert main(["inspect", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mamba2 run" in err and "log-linear" in err


def test_a_missing_checkpoint_is_refused_with_one_line(tmp_path, capsys):
    make_run(tmp_path / "run", checkpoint=False)
    assert main(["inspect", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "last.ckpt not found" in err
    assert main(["inspect", str(tmp_path / "nowhere")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_sweep_report_lambda_draws_one_figure_per_cell(tmp_path, capsys):
    """A tiny sweep (2 parameterisations x 2 d_model, 2 learning rates) written by hand: untrained models and
    made-up accuracies; one figure per d_model, the parameterisations at their best learning rate."""
    spec_path = write_spec(tmp_path, {"model.lambda_param": ["softplus", "static"], "model.d_model": [16, 32],
                                      "train.lr": [1e-3, 1e-2]}, **{"model.mixer": "log_linear_mamba2"})
    spec, out = load_spec(spec_path), tmp_path / "out"
    runs = expand(spec)
    write_manifest(out, spec, runs)
    for i, run in enumerate(runs):
        folder = run_dir(out, run.run_id)
        make_run(folder, cfg=run.config)
        accuracy = 0.5 + 0.1 * (run.config.train.lr > 5e-3) + 0.01 * i
        write_json_atomic(folder / "result.json", {"status": "max_steps", "val_accuracy": accuracy})
    assert main(["sweep", "report", str(out), "--lambda"]) == 0
    err = capsys.readouterr().err
    figures = sorted(p.name for p in out.glob("lambda_*.png"))
    assert figures == ["lambda_log_linear_mamba2_d16.png", "lambda_log_linear_mamba2_d32.png"], err
    selected = [r for r in runs if r.config.train.lr == 1e-2]  # the runs the cells report: only they are inspected
    assert all((run_dir(out, r.run_id) / LEVELS_CSV).is_file() == (r in selected) for r in runs)
    report = (out / REPORT).read_text()
    assert report.count("| softplus | 0.01 |") == 2 and report.count("| static | 0.01 |") == 2
    assert "lambda_log_linear_mamba2_d16.png" in report
    assert report.count("effective weight per level at the recall positions (1 runs)") == 4  # per λ and cell
    tables = [run_dir(out, r.run_id) / name for r in selected for name in (LEVELS_CSV, RECALL_CSV)]
    csv_times = [path.stat().st_mtime_ns for path in tables]
    assert main(["sweep", "report", str(out), "--lambda"]) == 0  # a second report reuses the tables
    assert [path.stat().st_mtime_ns for path in tables] == csv_times
    (run_dir(out, selected[0].run_id) / RECALL_CSV).unlink()  # a table written before the recall one: redone
    assert main(["sweep", "report", str(out), "--lambda"]) == 0
    assert (run_dir(out, selected[0].run_id) / RECALL_CSV).is_file()


@pytest.mark.gpu
def test_cuda_matches_cpu(tmp_path):
    make_run(tmp_path / "run")  # impl auto: the fused kernels on the GPU
    cpu = inspect_run(tmp_path / "run", device="cpu")
    gpu = inspect_run(tmp_path / "run", device="cuda")
    for a, b in zip(cpu.rows, gpu.rows, strict=True):
        assert (a.layer, a.head, a.level, a.tokens) == (b.layer, b.head, b.level, b.tokens)
        assert a.mean == pytest.approx(b.mean, rel=1e-3, abs=1e-5)
        assert a.effective_mean == pytest.approx(b.effective_mean, rel=1e-3, abs=1e-5)
    assert cpu.recall_rows
    for a, b in zip(cpu.recall_rows, gpu.recall_rows, strict=True):
        assert (a.layer, a.head, a.key_level, a.level, a.queries) == (b.layer, b.head, b.key_level, b.level, b.queries)
        assert a.effective_mean == pytest.approx(b.effective_mean, rel=1e-3, abs=1e-5)
        assert a.uniform_mean == pytest.approx(b.uniform_mean, rel=1e-3, abs=1e-5)


def test_the_cell_figure_draws_every_seed_and_the_median_per_parameterisation_with_the_control_at_one():
    runs = {"softplus": [Profile([0, 1, 2], [0.7, 0.6 + 0.1 * i, 0.5], [0.5, 0.3, 0.2]) for i in range(3)],
            "static": [Profile([0, 1], [1.0, 2.0 + i], [0.6, 0.4]) for i in range(2)]}
    fig = cell_figure("cell", runs, {"softplus": "50.0 (1.0)", "static": "40.0 (2.0)"}, "Mamba-2 58.1 (16.8)")
    axes = fig.axes
    assert len(axes) == 4 and axes[0].get_title() == "softplus: 50.0 (1.0)"
    for col, name in enumerate(runs):
        for row_axes, extra in ((axes[col], 1), (axes[2 + col], 0)):
            lines = row_axes.get_lines()
            assert len(lines) == len(runs[name]) + 1 + extra  # one per seed, the median (and λ = 1 above)
        (control,) = [line for line in axes[col].get_lines() if line.get_linestyle() == "--"]
        assert set(control.get_ydata()) == {1.0}
    median = axes[0].get_lines()[len(runs["softplus"])]
    assert list(median.get_ydata()) == pytest.approx([0.7, 0.7, 0.5])
    assert "control, λ = 1 on every level (the base mixer): Mamba-2 58.1 (16.8)" in fig._suptitle.get_text()


def test_the_cell_figure_compares_the_key_levels_share_at_recall_with_its_share_at_lambda_one():
    def run(i):
        return Profile([0, 1], [1.0, 1.2], [0.5, 0.5], [2, 3], [0.2 + 0.01 * i, 0.4], [0.1, 0.3])

    fig = cell_figure("cell", {"softplus": [run(i) for i in range(3)]}, {"softplus": "50.0 (1.0)"})
    recall = fig.axes[2]
    assert "key level's share" in recall.get_ylabel()
    dashed = [line for line in recall.get_lines() if line.get_linestyle() == "--"]
    solid = [line for line in recall.get_lines() if line.get_linestyle() == "-"]
    assert len(dashed) == len(solid) == 4  # 3 seeds and the median, at λ = 1 and as trained
    assert list(dashed[-1].get_ydata()) == pytest.approx([0.1, 0.3])
    assert list(solid[-1].get_ydata()) == pytest.approx([0.21, 0.4])


def test_the_profile_takes_the_key_levels_share_and_its_control_from_the_recall_rows():
    rows = [LevelRow(0, 0, level, 10, 1.0, 0.0, {}, 0.5, 10) for level in (0, 1, 2)]
    recall = [RecallRow(layer, 0, 2, level, 8, share, control)
              for layer, (own, own_control) in enumerate([(0.4, 0.3), (0.6, 0.5)])
              for level, share, control in ((2, own, own_control), (1, 0.9, 0.9))]
    profile = profile_of(rows, recall)
    assert profile.key_levels == [2]
    assert profile.key_share == pytest.approx([0.5]) and profile.key_share_at_one == pytest.approx([0.4])


def test_the_control_is_the_base_mixers_cell_at_its_own_learning_rate(tmp_path):
    entries = [run_entry("log_linear_mamba2", 16, 1e-3, seed, finished(0.5), **{"model.lambda_param": "softplus"})
               for seed in range(2)]
    entries += [run_entry("mamba2", 16, lr, seed, finished(acc), **{"model.lambda_param": "softplus"})
                for lr, acc in ((1e-3, 0.3), (1e-2, 0.7)) for seed in range(2)]
    entries += [run_entry("gated_deltanet", 16, 1e-3, seed, finished(0.9)) for seed in range(2)]
    sweep = load_sweep(make_sweep(tmp_path, entries))
    log_linear = next(r for r in sweep.records if r.mixer == "log_linear_mamba2")
    assert control_accuracy(sweep, log_linear) == "Mamba-2 70.0 (0.0)"
    alone = load_sweep(make_sweep(tmp_path / "alone", entries[:2]))
    assert control_accuracy(alone, alone.records[0]) is None


def test_an_unfinished_run_is_said_to_be_unfinished_with_the_step_of_its_weights(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run)
    saved = torch.load(run / "last.ckpt", weights_only=True)
    torch.save({**saved, "global_step": 40}, run / "last.ckpt")  # no result.json: still training, or stopped
    assert main(["inspect", str(run), "--device", "cpu", "--probe-sequences", "0"]) == 0
    assert "unfinished run: its weights at step 40 (last.ckpt)" in capsys.readouterr().out.splitlines()[0]
