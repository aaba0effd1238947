"""Faults around the report and `loglinear inspect`: Ctrl-C while plotting, a full disk, a read-only sweep,
a lambda table left empty, a checkpoint or config.yaml that cannot be read or does not match. Each is one
line on stderr and exit status 1 (a fault of the machine), 2 (bad input) or 130 (interrupted), and leaves
every file whole: the previous one or none."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("damage, words", [
    (lambda csv: csv.write_bytes(bytes(range(256)) * 4), ["results.csv cannot be read", "not UTF-8", "--force"]),
    (lambda csv: csv.write_bytes(b"\xef\xbb\xbf" + csv.read_bytes().replace(b"\n", b"\r\n")),
     ["results.csv reports 8 finished runs, this report would have 7"]),
    (lambda csv: csv.unlink(), ["table.md reports 8 finished runs, this report would have 7", "--force"]),
    (lambda csv: csv.write_text("a,b\n1,2\n"), ["results.csv cannot be read", "no run_id and status columns"]),
], ids=["random bytes", "excel", "deleted", "another table"])
def test_a_report_there_that_cannot_be_read_still_protects_it(tmp_path, capsys, damage, words):
    """A run folder gone, and the report's results.csv replaced by bytes that do not read, saved by a spreadsheet
    (a byte-order mark, CRLF), deleted or another table: the report is refused, never taken for an empty one."""
    out = a_sweep(tmp_path / "sweep")
    assert main(["sweep", "report", str(out)]) == 0
    (out / "runs" / "run003" / "result.json").unlink()
    damage(out / "results.csv")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 2)
    assert all(w in line for w in words), line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert main(["sweep", "report", str(out), "--force"]) == 0


@pytest.mark.parametrize("record, label", [("AMD EPYC", "malformed machine record (str)"),
                                           ({"processor": "AMD EPYC", "cpu_capability": "AVX2", "torch": "2.1.0"},
                                            "AMD EPYC (AVX2), torch 2.1.0, threads not recorded")])
def test_a_malformed_machine_record_is_named_not_a_traceback(tmp_path, capsys, record, label):
    out = a_sweep(tmp_path / "sweep")
    result = out / "runs" / "run001" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "machine": record}))
    assert main(["sweep", "report", str(out)]) == 0
    assert f"| {label} | 1 |" in (out / "table.md").read_text()
    assert main(["sweep", "status", str(out)]) == 0


def test_a_run_folder_holding_another_runs_result_is_named_not_reported_under_its_arm(tmp_path):
    """Two run folders whose result.json were swapped: each is listed as holding another run's result, and no
    table reports it under the manifest's arm."""
    entries = [run_entry("attention", 16, 1e-3, 0, finished(0.05)), run_entry("mamba2", 16, 1e-3, 0, finished(0.45))]
    out = make_sweep(tmp_path / "sweep", entries)
    first, second = (out / "runs" / rid / "result.json" for rid in ("run000", "run001"))
    texts = first.read_text(), second.read_text()
    first.write_text(texts[1])
    second.write_text(texts[0])
    assert main(["sweep", "report", str(out)]) == 0
    table = (out / "table.md").read_text()
    missing = table.split("## Missing or failed runs")[1].split("\n## ")[0]
    assert "2 of 2 runs" in missing and missing.count("is the result of another run (model.mixer: ") == 2
    assert "45.0" not in table and "5.0" not in table.split("## Test accuracy")[1].split("##")[0]


def test_metrics_that_do_not_read_are_named_when_the_report_needs_them(tmp_path, capsys):
    """A run's metrics.csv with bytes that are not UTF-8: the report at the runs' own threshold does not need it;
    at another it is one line naming the file, and nothing is written."""
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, convergence="plateau"), curve=[(100, 0.3), (200, 0.5)])
               for s in (0, 1)]
    out = make_sweep(tmp_path / "sweep", entries)
    metrics = out / "runs" / "run001" / "metrics.csv"
    metrics.write_bytes(metrics.read_bytes().replace(b"0.3", b"0.\xff3"))
    assert main(["sweep", "report", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "report": {"threshold": 0.4}}))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "report", str(out)]), 2)
    assert f"{metrics} does not read (not UTF-8 text (byte " in line and "run run001's validations" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
