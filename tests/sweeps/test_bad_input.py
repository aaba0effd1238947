"""Faults around `loglinear sweep run` and `sweep status`: a run folder another process holds, a run's process
that ends without a result, an `--out` that is a file or read-only, a full disk before or during the sweep.
Each is one line on stderr and exit status 1 (a fault of the machine) or 2 (bad input); the runner never
writes into a folder another process holds, and a run stopped by a fault of the machine stays resumable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loglinear.cli import main
from loglinear.runs.folder import LOCK, exclusive, read_result, write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import LOG, run_dir, write_manifest
from loglinear.sweeps.progress import ELSEWHERE
from loglinear.sweeps.runner import RunFault, RunProcess, SweepOutcome, finish_job
from loglinear.sweeps.spec import expand, load_spec

from .. import child_process
from .sweep_helpers import write_spec

FILL_HOOK = """\
import os, sys
if os.environ.get("FILL_DISK") and "train" in sys.argv:
    with open(os.path.join(os.environ["FILL_DISK"], ".filler"), "ab", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    f.write(bytes(chunk))
            except OSError:
                pass
"""


def one_line(capsys, code: int, expected: int) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[")]
    assert code == expected and len(err) == 1, (code, err)
    return err[0]


def exited(directory: Path, code: int) -> RunProcess:
    """A finished RunProcess whose `loglinear train` exited with `code`, without writing a result."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LOG).write_text("the last line of the log\n")
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    process.wait()
    return RunProcess([None], [directory], process, open(directory / LOG, "a"), 0)  # type: ignore[list-item]


def test_a_refused_run_in_a_folder_held_elsewhere_is_not_written_into(tmp_path):
    run = tmp_path / "run"
    with exclusive(run / LOCK, "held by the test"):
        assert finish_job(exited(run, 2)) == {"run": ELSEWHERE}
    assert sorted(p.name for p in run.iterdir()) == [LOCK, LOG]


def test_status_1_without_a_result_is_a_fault_of_the_machine_not_a_failure(tmp_path):
    with pytest.raises(RunFault, match=r"exited with status 1 without a result, a fault of the machine .*"
                                       r"the last line of the log.*stays resumable"):
        finish_job(exited(tmp_path / "run", 1))
    assert read_result(tmp_path / "run") is None
    assert finish_job(exited(tmp_path / "crashed", 3)) == {"crashed": "failed"}  # a crash is still the run's failure
    assert "status 3" in read_result(tmp_path / "crashed")["error"]


def test_sweep_status_shows_a_run_whose_folder_is_held_as_running(tmp_path, capsys):
    spec = load_spec(write_spec(tmp_path, {"train.seed": [0, 1]}))
    runs, out = expand(spec), tmp_path / "out"
    write_manifest(out, spec, runs)
    with exclusive(run_dir(out, runs[0].run_id) / LOCK, "held by the test"):
        assert main(["sweep", "status", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    held = next(line for line in lines if line.startswith(runs[0].run_id))
    other = next(line for line in lines if line.startswith(runs[1].run_id))
    assert f"running (pid {os.getpid()})" in held and "not started" in other


def test_a_run_trained_by_another_process_is_left_alone(tmp_path, capsys):
    spec_path = write_spec(tmp_path, {"train.seed": [0, 1]})
    runs, out = expand(load_spec(spec_path)), tmp_path / "out"
    held = run_dir(out, runs[0].run_id)
    with exclusive(held / LOCK, "held by the test"):
        code = main(["sweep", "run", str(spec_path), "--out", str(out), "--workers", "1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{held.resolve()} is being trained by another process (pid {os.getpid()}): not started here" in err
    assert "1 of 2 runs did not finish, 1 of them being trained by another process" in err
    assert sorted(p.name for p in held.iterdir()) == [LOCK]  # no config.yaml, train.log or result.json
    assert read_result(run_dir(out, runs[1].run_id))["status"] == "max_steps"
    assert runs[0].run_id in (out / "table.md").read_text().split("## Missing or failed runs")[1]


def test_out_that_is_a_file_is_bad_input(tmp_path, capsys):
    spec_path = write_spec(tmp_path, {"train.seed": [0]})
    (tmp_path / "file").write_text("")
    for command in ("run", "wandb"):
        line = one_line(capsys, main(["sweep", command, str(spec_path), "--out", str(tmp_path / "file")]), 2)
        assert f"--out {tmp_path / 'file'} is a file, not a folder" in line
    line = one_line(capsys, main(["sweep", "run", str(spec_path), "--out", str(tmp_path / "file" / "sub")]), 2)
    assert str(tmp_path / "file") in line


def test_a_read_only_out_is_one_line_naming_the_path(small_disk, capsys):
    spec_path = write_spec(small_disk.path.parent, {"train.seed": [0]})
    small_disk.read_only()
    line = one_line(capsys, main(["sweep", "run", str(spec_path), "--out", str(small_disk.path / "out")]), 1)
    assert line.startswith(f"loglinear sweep: cannot write {small_disk.path / 'out'}") and "Read-only" in line


def test_a_full_disk_before_the_sweep_is_one_line(small_disk, capsys):
    spec_path = write_spec(small_disk.path.parent, {"train.seed": [0]})
    out = small_disk.path / "out"
    small_disk.fill()
    line = one_line(capsys, main(["sweep", "run", str(spec_path), "--out", str(out)]), 1)
    assert line.startswith(f"loglinear sweep: disk full writing {out}/") and "(0 B free on its disk)" in line
    assert not (out / "runs").exists()


def test_a_disk_that_fills_during_a_run_stops_the_sweep_and_the_run_resumes(small_disk, tmp_path):
    spec_path = write_spec(tmp_path, {"train.seed": [0]})
    (run,) = expand(load_spec(spec_path))
    out = small_disk.path / "out"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FILL_HOOK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
           "FILL_DISK": str(small_disk.path), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "loglinear", "sweep", "run", str(spec_path), "--out", str(out), "--quiet"]
    proc = child_process.run(command, cpu_s=600, env=env)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert f"{run_dir(out, run.run_id).resolve()}: loglinear train exited with status 1 without a result" in err[0]
    assert "Traceback" not in proc.stderr and read_result(run_dir(out, run.run_id)) is None

    small_disk.make_room()
    env.pop("FILL_DISK")
    proc = child_process.run(command, cpu_s=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir(out, run.run_id) / "result.json").read_text())["status"] == "max_steps"


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_sweep_folder_belongs_to_one_spec(tmp_path, capsys, dry_run):
    mine = load_spec(write_spec(tmp_path, {"train.seed": [0, 1]}, name="mine"))
    out = tmp_path / "out"
    write_manifest(out, mine, expand(mine))
    manifest = (out / "manifest.json").read_bytes()
    other = write_spec(tmp_path, {"train.seed": [5]}, name="other")
    line = one_line(capsys, main(["sweep", "run", str(other), "--out", str(out), *dry_run]), 2)
    assert f"{out} holds sweep 'mine'" in line and "not 'other'" in line
    line = one_line(capsys, main(["sweep", "wandb", str(other), "--out", str(out)]), 2)
    assert f"{out} holds sweep 'mine'" in line
    assert (out / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]


def test_two_architectures_with_one_row_label_are_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_mixers.py").write_text(
        "from loglinear.models.mamba2 import Mamba2\n\n\n"
        "class MyMamba2(Mamba2):\n    pass\n\n\n"
        "class NamedMamba2(Mamba2):\n    display_name = 'My Mamba-2'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    pooled = write_spec(tmp_path, {"model.mixer": ["mamba2", "my_mixers:MyMamba2"]}, name="pooled")
    line = one_line(capsys, main(["sweep", "run", str(pooled), "--out", str(out), "--dry-run"]), 2)
    assert "'mamba2' (loglinear.models.mamba2:Mamba2) and 'my_mixers:MyMamba2' (my_mixers:MyMamba2)" in line
    assert "share the row label 'Mamba-2'" in line and not out.exists()
    apart = load_spec(write_spec(tmp_path, {"model.mixer": ["mamba2", "my_mixers:NamedMamba2"]}, name="apart"))
    assert len(expand(apart)) == 2


def stand_in_training(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
    """`run_local` without training: each run not finished yet gets a result."""
    for run in runs:
        if read_result(run_dir(out, run.run_id)) is None:
            write_json_atomic(run_dir(out, run.run_id) / "result.json",
                              {"status": "max_steps", "val_accuracy": 0.5, "final_val": {"val/acc": 0.5},
                               "test": {"test/acc": 0.5}, "step": 20, "steps_to_threshold": None})
    return SweepOutcome({run.run_id: "max_steps" for run in runs})


@pytest.mark.parametrize("grid, protocol, shrunk, words", [
    ({"train.seed": [0, 1]}, None, {"train.seed": [0]}, ["it is no point of the spec's grid"]),
    ({"train.lr": [1.0e-3, 1.0e-2]}, {"selection_seeds": [0, 1, 2, 3], "confirmation_seeds": [4, 5]},
     "confirmation_seeds", ["seed 5 is no confirmation seed"]),
], ids=["a seed dropped", "a confirmation seed dropped"])
def test_a_shrunk_spec_is_refused_before_the_manifest_changes(tmp_path, capsys, monkeypatch, grid, protocol, shrunk,
                                                               words):
    """A spec under the same name that no longer plans some finished runs the report holds: refused before
    anything is written (the manifest and the report as they were), naming a run and why; the same spec again
    runs."""
    monkeypatch.setattr(runner, "run_local", stand_in_training)
    spec_path, out = write_spec(tmp_path, grid), tmp_path / "out"
    spec = yaml.safe_load(spec_path.read_text())
    if protocol is not None:
        spec["protocol"] = protocol
        spec_path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", "run", str(spec_path), "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    if protocol is None:
        spec["grid"] = shrunk
    else:
        spec["protocol"][shrunk] = spec["protocol"][shrunk][:-1]
    spec_path.write_text(yaml.safe_dump(spec))
    capsys.readouterr()
    line = one_line(capsys, main(["sweep", "run", str(spec_path), "--out", str(out), "--quiet"]), 2)
    assert "no longer plans 1 finished or started run(s)" in line and all(w in line for w in words), line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
