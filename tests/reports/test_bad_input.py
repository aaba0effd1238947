"""Faults around the report and `loglinear inspect`: Ctrl-C while plotting, a full disk, a read-only sweep,
a lambda table left empty, a checkpoint or config.yaml that cannot be read or does not match. Each is one
line on stderr and exit status 1 (a fault of the machine), 2 (bad input) or 130 (interrupted), and leaves
every file whole: the previous one or none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from loglinear.cli import main
from loglinear.reports.lambda_inspect import LEVELS_CSV, read_csv
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.spec import expand, load_spec

from ..sweeps.sweep_helpers import write_spec
from .report_helpers import finished, make_sweep, run_entry
from .test_lambda_inspect import make_run

PLOT = "acc_vs_d_model.png"


def one_line(capsys, code: int, expected: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == expected and len(err) == 1, (code, err)
    return err[0]


def a_sweep(folder: Path) -> Path:
    entries = [run_entry(m, d, 1e-3, s, finished(0.5 + 0.1 * s)) for m in ("attention", "mamba2") for d in (16, 32)
               for s in range(2)]
    return make_sweep(folder, entries)


def no_temporary_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_ctrl_c_while_plotting_leaves_the_previous_plot_whole(tmp_path, capsys, monkeypatch):
    out = a_sweep(tmp_path / "sweep")
    assert main(["sweep", "report", str(out)]) == 0
    plot = (out / PLOT).read_bytes()

    def interrupted(self, f, **kwargs):
        f.write(plot[:124])  # what the old direct write left behind
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 130)
    assert line.startswith("loglinear sweep: interrupted")
    assert (out / PLOT).read_bytes() == plot and no_temporary_files(out)


def test_an_unreadable_result_is_named_in_the_report(tmp_path):
    out = a_sweep(tmp_path / "sweep")
    (out / "runs" / "run000" / "result.json").write_text("{trunc")
    assert main(["sweep", "report", str(out)]) == 0
    missing = (out / "table.md").read_text().split("## Missing or failed runs")[1]
    assert "`runs/run000`" in missing and "unreadable: " in missing and "result.json is not valid JSON" in missing


def test_a_full_disk_while_reporting_is_one_line_and_leaves_the_files_whole(small_disk, capsys):
    out = a_sweep(small_disk.path / "sweep")
    assert main(["sweep", "report", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for name in ("table.md", PLOT):
        (out / name).unlink()  # a report written anew must write these again
    small_disk.fill()
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 1)
    assert "disk full writing" in line and str(out) in line
    assert no_temporary_files(out)
    for p in out.iterdir():
        if p.is_file():
            assert p.read_bytes() == before[p.name], p  # nothing half written
    small_disk.make_room()
    assert main(["sweep", "report", str(out)]) == 0
    assert (out / PLOT).read_bytes() == before[PLOT]


def test_a_read_only_sweep_is_one_line_naming_the_file(small_disk, capsys):
    out = a_sweep(small_disk.path / "sweep")
    small_disk.read_only()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 1)
    assert line.startswith(f"loglinear sweep: cannot write {out}/") and "Read-only file system" in line


def test_inspect_on_a_full_disk_is_one_line_and_leaves_no_empty_table(small_disk, capsys):
    run = small_disk.path / "run"
    make_run(run)
    small_disk.fill()
    line = one_line(capsys, main(["inspect", str(run), "--device", "cpu"]), 1)
    assert line.startswith(f"loglinear inspect: disk full writing {run / LEVELS_CSV}")
    assert not (run / LEVELS_CSV).exists() and no_temporary_files(run)


def test_an_empty_lambda_table_is_redone_not_reused(tmp_path, capsys):
    spec = load_spec(write_spec(tmp_path, {"train.seed": [0]}, **{"model.mixer": "log_linear_mamba2"}))
    out = tmp_path / "out"
    (run,) = expand(spec)
    write_manifest(out, spec, [run])
    folder = run_dir(out, run.run_id)
    make_run(folder, cfg=run.config)
    write_json_atomic(folder / "result.json", {"status": "max_steps", "val_accuracy": 0.5})
    (folder / LEVELS_CSV).write_text("")  # newer than the checkpoint: what a full disk used to leave
    assert main(["sweep", "report", str(out), "--lambda"]) == 0
    rows = read_csv(folder / LEVELS_CSV)
    assert rows and all(np.isfinite(r.mean) for r in rows)
    (figure,) = out.glob("lambda_*.png")
    assert np.ptp(imread(figure)[..., :3]) > 0.5


@pytest.mark.parametrize("damage, words", [
    ("truncate", ["last.ckpt cannot be read", "not a whole checkpoint"]),
    ("d_model", ["last.ckpt does not match", "config.yaml (was it edited?)", "size mismatch"]),
    ("yaml", ["config.yaml: not valid YAML"]),
    ("mapping", ["config.yaml: a run's config.yaml must be a YAML mapping"]),
])
def test_inspect_a_run_that_cannot_be_read_or_does_not_match(tmp_path, capsys, damage, words):
    run = tmp_path / "run"
    make_run(run)
    checkpoint, config = run / "last.ckpt", run / "config.yaml"
    if damage == "truncate":
        checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    elif damage == "d_model":
        config.write_text(config.read_text().replace("d_model: 16", "d_model: 32"))
    elif damage == "yaml":
        config.write_text("model: {d_model: 16\n")
    else:
        config.write_text("- 1\n")
    line = one_line(capsys, main(["inspect", str(run), "--device", "cpu"]), 2)
    for word in words:
        assert word in line, line
    assert not (run / LEVELS_CSV).exists()


REPORT_FILES = ("table.md", "results.csv", "paired.csv", PLOT)


def report_bytes(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in REPORT_FILES}


def test_a_report_with_fewer_results_does_not_replace_the_one_on_disk_unless_forced(tmp_path, capsys):
    out = a_sweep(tmp_path / "sweep")
    assert main(["sweep", "report", str(out)]) == 0
    before = report_bytes(out)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("manifest.json", *REPORT_FILES):  # a copy of the sweep without its runs/
        (copy / name).write_bytes((out / name).read_bytes())
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(copy)]), 2)
    assert "results.csv reports 8 finished runs, this report would have 0" in line and "--force" in line
    assert report_bytes(copy) == before
    assert main(["sweep", "report", str(copy), "--force"]) == 0
    assert (copy / "results.csv").read_bytes() != before["results.csv"]  # forced: the report of what is there


def test_a_report_of_another_specs_manifest_does_not_replace_the_one_on_disk(tmp_path, capsys):
    out = a_sweep(tmp_path / "sweep")
    assert main(["sweep", "report", str(out)]) == 0
    before = report_bytes(out)
    spec = load_spec(write_spec(tmp_path, {"train.seed": [0, 1]}, name="other"))
    write_manifest(out, spec, expand(spec))  # what an old `sweep run OTHER --out SWEEP` left
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 2)
    assert "reports 8 finished runs, this report would have 0" in line
    assert report_bytes(out) == before


def test_a_report_whose_mixer_cannot_be_imported_is_refused_not_relabelled(tmp_path, capsys):
    entries = [run_entry(m, 16, 1e-3, s, finished(0.5)) for m in ("attention", "no_such_module:Conv") for s in (0, 1)]
    out = make_sweep(tmp_path / "sweep", entries)
    line = one_line(capsys, main(["sweep", "report", str(out)]), 2)
    assert "mixer 'no_such_module:Conv': cannot import it (ModuleNotFoundError" in line and "PYTHONPATH" in line
    assert not (out / "table.md").exists()
