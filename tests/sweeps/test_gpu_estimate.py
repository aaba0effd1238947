"""`sweep run --dry-run --pack N`: the GPU time of a sweep's packs from the packing benchmark's GPU figures, or plainly
none when benchmarks/RESULTS.md holds no GPU measurement."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from loglinear.cli import sweep_main, sweep_run
from loglinear.protocol.power import check_design
from loglinear.reports.spread import resolve_spread
from loglinear.sweeps import gpu_estimate
from loglinear.sweeps.gpu_estimate import read_figures
from loglinear.sweeps.spec import load_spec

SPEC = Path(__file__).parents[2] / "configs" / "sweeps" / "mqar_paper_gpu.yaml"


def _section(machine: str, rows: list[tuple[str, int, str, float]], batch: int = 256) -> str:
    table = "\n".join(f"| {m} | {d} | {n} | {r:,.1f} | 0 | 1.00 |  |" for m, d, n, r in rows)
    return (f"# Benchmark results\n\n<!-- begin:packing: training throughput -->\n## packing: training throughput\n\n"
            f"- machine: {machine}\n- date: 2026-12-01 10:00\n- command: `python -m benchmarks.packing`\n\n"
            f"The paper's MQAR model at 256 tokens, vocabulary 8,192, batch {batch}, 64 scored positions per sequence."
            f"\n\n| mixer | d_model | pack | run-steps/s | sequences/s | cost | note |\n|---|---|---|---|---|---|---|\n"
            f"{table}\n<!-- end:packing: training throughput -->\n")


GPU = "AMD EPYC, 16 cores visible, torch 2.13.0 (16 threads), GPU NVIDIA H100 80GB HBM3"
ROWS = [("gated_deltanet", 32, "alone", 25.0), ("gated_deltanet", 32, "4", 500.0), ("gated_deltanet", 32, "16", 2000.0),
        ("log_linear_gated_deltanet", 32, "4", 250.0), ("log_linear_gated_deltanet", 32, "16", 1000.0)]


def test_no_gpu_figure_is_said_so(tmp_path):
    assert read_figures(tmp_path / "absent.md") is None
    cpu = tmp_path / "cpu.md"
    cpu.write_text(_section("AMD EPYC, 2 cores visible, torch 2.13.0+cpu (1 threads)", ROWS, batch=64))
    assert read_figures(cpu) is None
    other = tmp_path / "other.md"
    other.write_text("# Benchmark results\n\n## packing: something else\n")
    assert read_figures(other) is None


def test_gpu_figures_are_read_by_mixer_size_and_pack(tmp_path):
    path = tmp_path / "gpu.md"
    path.write_text(_section(GPU, ROWS))
    figures = read_figures(path)
    assert figures is not None and figures.batch == 256 and figures.machine == "NVIDIA H100 80GB HBM3"
    assert figures.rate("gated_deltanet", 32, 1) == (25.0, 0)  # a run alone: the alone row
    assert figures.rate("gated_deltanet", 32, 16) == (2000.0, 16)
    assert figures.rate("gated_deltanet", 32, 8) == (500.0, 4)  # the largest measured pack below
    assert figures.rate("gated_deltanet", 32, 2) == (500.0, 4)  # none below: the smallest above
    assert figures.rate("gated_deltanet", 64, 16) is None


@pytest.fixture(scope="module")
def designed():
    """The study's spec with its spread and its design, made once for the dry runs here: the spread is read from a
    committed study's results.csv and the power simulated, seconds of CPU each time (tests/protocol/test_power.py
    and test_paper_gpu_study.py check both)."""
    spec = resolve_spread(load_spec(SPEC))
    return spec, check_design(spec)


@pytest.fixture
def dry_run(tmp_path, monkeypatch, capsys, designed):
    spec, design = designed
    monkeypatch.setattr(sweep_run, "resolve_spread", lambda read: copy.deepcopy(spec) if read.path == spec.path else
                        resolve_spread(read))
    monkeypatch.setattr(sweep_run, "check_design", lambda given: design if given.path == spec.path else
                        check_design(given))

    def run(section: str | None) -> pytest.CaptureResult:
        results = tmp_path / "RESULTS.md"
        if section is not None:
            results.write_text(section)
        monkeypatch.setattr(gpu_estimate, "RESULTS", results)
        assert sweep_main(["run", str(SPEC), "--out", str(tmp_path / "out"), "--dry-run", "--pack", "16"]) == 0
        assert not (tmp_path / "out").exists()
        return capsys.readouterr()

    return run


def test_the_dry_run_of_the_paper_study_gives_each_stage_s_gpu_minutes(dry_run):
    out = dry_run(_section(GPU, ROWS)).out
    assert "GPU time of the training steps alone, from benchmarks/RESULTS.md's \"packing: training throughput\" " \
           "(NVIDIA H100 80GB HBM3, 2026-12-01 10:00, batch 256)" in out
    # a pack of 16 per arm: 22,500 steps x 16 runs at 2,000 and 1,000 run-steps/s = 180 + 360 s
    assert "  these unfinished runs: 2 packs, 9.0 GPU minutes" in out
    # 70 confirmation seeds an arm: 4 packs of 16 (180 and 360 s) and one of 6 at the pack-of-4 rate (270 and 540 s)
    assert "  confirmation, 140 runs: 10 packs, 49.5 GPU minutes" in out
    # a round adds one rate on the 4 selection seeds to each arm: packs of 4 at 500 and 250 run-steps/s, 180 + 360 s
    assert "  each grid-extension round, if any, at most 8 runs: 2 packs, 9.0 GPU minutes" in out
    only_one = dry_run(_section(GPU, ROWS[:3])).out
    assert "these unfinished runs: 2 packs, 3.0 GPU minutes" in only_one
    assert "3.0 GPU minutes; no figure for log_linear_gated_deltanet at d_model 32, batch 256, pack of 16 " \
           "(not counted)" in only_one
    assert "16.5 GPU minutes; no figure for log_linear_gated_deltanet at d_model 32, batch 256, pack of 16 " \
           "(4 packs); log_linear_gated_deltanet at d_model 32, batch 256, pack of 6 (not counted)" in only_one


def test_the_dry_run_says_plainly_that_no_gpu_figure_exists(dry_run):
    out = dry_run(None).out
    assert "GPU time: no GPU figure (benchmarks/RESULTS.md's \"packing: training throughput\" holds no GPU " \
           "measurement" in out and "GPU minutes" not in out
    cpu = dry_run(_section("AMD EPYC, 2 cores visible, torch 2.13.0+cpu (1 threads)", ROWS, batch=64)).out
    assert "GPU time: no GPU figure" in cpu and "GPU minutes" not in cpu


def test_a_figure_that_is_not_a_positive_number_is_left_out_with_one_line(tmp_path, dry_run):
    bad = _section(GPU, ROWS[:2] + [("gated_deltanet", 32, "16", 2000.0)] + ROWS[3:]).replace("2,000.0", "0.0")
    bad = bad.replace("| 1,000.0 |", "| 1.0.0 |")
    results = tmp_path / "RESULTS.md"
    results.write_text(bad)
    figures = read_figures(results)
    assert figures is not None and figures.rate("gated_deltanet", 32, 16) == (500.0, 4)
    assert figures.left_out == ("gated_deltanet d_model 32 pack 16: '0.0'",
                                "log_linear_gated_deltanet d_model 32 pack 16: '1.0.0'")
    captured = dry_run(bad)
    assert captured.err.strip().splitlines()[-1] == (  # after the design's line
        "loglinear sweep: warning: benchmarks/RESULTS.md's \"packing: training throughput\" has run-steps/s that are "
        "not a positive number, left out of the GPU time: gated_deltanet d_model 32 pack 16: '0.0'; "
        "log_linear_gated_deltanet d_model 32 pack 16: '1.0.0'")
    # the packs of 16 at the rates of the packs of 4 (500 and 250 run-steps/s): 720 + 1,440 s
    assert "these unfinished runs: 2 packs, 36.0 GPU minutes" in captured.out
    for rate in ("0.0", "-3.0", "nan"):
        results.write_text(_section(GPU, ROWS[:1]).replace("25.0", rate))
        assert read_figures(results).left_out == (f"gated_deltanet d_model 32 pack alone: {rate!r}",)
