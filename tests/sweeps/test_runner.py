"""The local runner: worker environments, a tiny sweep end to end with failing runs isolated, and a sweep
killed mid-run that resumes without redoing finished runs."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from loglinear.cli import sweep_main
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.progress import Progress, eta_seconds
from loglinear.sweeps.runner import DEFAULT_RUNS_PER_GPU, exclusive_sweep, worker_envs
from loglinear.sweeps.spec import expand, load_spec

from .. import child_process
from .sweep_helpers import write_spec

CRASH_HOOK = """\
import os, sys
if os.environ.get("CRASH_RUN") and any(os.environ["CRASH_RUN"] in a for a in sys.argv):
    os._exit(3)
"""


def test_workers_share_cores_and_gpus():
    cpu = worker_envs(None, runs=10, gpus=[], cores=8)
    assert len(cpu) == 8 and {e["OMP_NUM_THREADS"] for e in cpu} == {"1"}
    assert all("CUDA_VISIBLE_DEVICES" not in e for e in cpu)
    two = worker_envs(2, runs=10, gpus=[], cores=8)
    assert [e["OMP_NUM_THREADS"] for e in two] == ["4", "4"] == [e["MKL_NUM_THREADS"] for e in two]
    assert len(worker_envs(None, runs=3, gpus=[], cores=8)) == 3
    gpus = worker_envs(None, runs=10, gpus=["2", "5"], cores=16)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in gpus] == ["2", "5"] and gpus[0]["OMP_NUM_THREADS"] == "8"
    assert [e["CUDA_VISIBLE_DEVICES"] for e in worker_envs(3, runs=10, gpus=["0", "1"], cores=6)] == ["0", "1", "0"]
    assert {e["OMP_NUM_THREADS"] for e in worker_envs(2, runs=10, gpus=[], cores=8, threads="1")} == {"1"}


def test_runs_per_gpu_puts_k_workers_on_each_gpu():
    envs = worker_envs(None, runs=40, gpus=["3", "7"], cores=16, runs_per_gpu=4)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3", "7"] * 4
    assert {e["OMP_NUM_THREADS"] for e in envs} == {"2"} == {e["MKL_NUM_THREADS"] for e in envs}
    # fewer runs than slots: no idle worker, and the runs spread evenly over the GPUs
    assert [e["CUDA_VISIBLE_DEVICES"] for e in worker_envs(None, runs=3, gpus=["0", "1"], cores=16, runs_per_gpu=4)] \
        == ["0", "1", "0"]
    # more workers than cores: one thread each; the user's OMP_NUM_THREADS wins
    assert {e["OMP_NUM_THREADS"] for e in worker_envs(None, runs=40, gpus=["0"], cores=4, runs_per_gpu=16)} == {"1"}
    assert {e["OMP_NUM_THREADS"] for e in worker_envs(None, 40, ["0"], 16, threads="3", runs_per_gpu=2)} == {"3"}
    # the default is DEFAULT_RUNS_PER_GPU on each GPU
    assert len(worker_envs(None, runs=40, gpus=["0", "1"], cores=16)) == 2 * DEFAULT_RUNS_PER_GPU


def test_runs_per_gpu_refuses_a_cpu_machine_and_workers_beside_it():
    with pytest.raises(ConfigError, match="needs a visible CUDA device"):
        worker_envs(None, runs=4, gpus=[], cores=8, runs_per_gpu=2)
    with pytest.raises(ConfigError, match="exclude each other"):
        worker_envs(2, runs=4, gpus=["0"], cores=8, runs_per_gpu=2)


def test_runs_per_gpu_bad_usage_exits_2_before_running_anything(tmp_path, capsys):
    spec_path = write_spec(tmp_path, {"train.seed": [0]})
    out = tmp_path / "out"
    assert sweep_main(["run", str(spec_path), "--out", str(out), "--workers", "2", "--runs-per-gpu", "2"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert sweep_main(["run", str(spec_path), "--out", str(out), "--runs-per-gpu", "0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    assert sweep_main(["run", str(spec_path), "--out", str(out), "--runs-per-gpu", "2", "--launcher", "submitit"]) == 2
    assert capsys.readouterr().err.strip() == ("loglinear sweep: error: --runs-per-gpu is for the local launcher "
                                               "(a Slurm task trains one run on its own GPU)")
    assert not (out / "runs").exists()


@pytest.mark.parametrize("pack", [[], ["--pack", "2"]])
def test_runs_per_gpu_without_a_gpu_exits_2_with_one_line_before_the_folder_is_made(tmp_path, capsys, monkeypatch,
                                                                                    pack):
    monkeypatch.setattr(runner, "visible_gpus", lambda: [])
    spec_path = write_spec(tmp_path, {"train.seed": [0, 1]})
    assert sweep_main(["run", str(spec_path), "--out", str(tmp_path / "out"), "--runs-per-gpu", "2", *pack]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "loglinear sweep: error: --runs-per-gpu needs a visible CUDA device and none is visible here; " \
                  "on a CPU give --workers"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("launcher, executor, words", [
    ("local", "slurm_partition=gpu", "--executor is for --launcher submitit"),
    ("submitit", "timeout_min", "--executor takes KEY=VALUE"),
])
def test_executor_arguments_are_refused_before_the_folder_is_made(tmp_path, capsys, launcher, executor, words):
    spec_path = write_spec(tmp_path, {"train.seed": [0]})
    assert sweep_main(["run", str(spec_path), "--out", str(tmp_path / "out"), "--launcher", launcher,
                       "--executor", executor]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_progress_line_counts_runs_and_estimates_the_time_left():
    stream = io.StringIO()
    progress = Progress("demo", stream=stream)
    statuses = ["early_stopped", "max_steps", "diverged", "failed", "running", "pending"]
    # mean of finished runs 150 s: 150 for the pending run + 100 left of the running one, over 2 workers
    progress.update(statuses, eta_seconds([100.0, 200.0], pending=1, running_elapsed=[50.0], workers=2))
    progress.update(statuses, 1.0)  # same counts: no new line off a terminal
    assert stream.getvalue() == "[demo] done 2, diverged 1, failed 1, running 1, pending 1 / total 6, ETA 2m05s\n"
    assert eta_seconds([], pending=3, running_elapsed=[], workers=2) is None


def test_a_resumed_runs_time_is_not_taken_for_a_whole_runs(tmp_path, monkeypatch):
    """The first run resumes from a checkpoint and ends at once: no estimate until a run trained whole here."""
    runs = expand(load_spec(write_spec(tmp_path, {"train.seed": [0, 1, 2]})))
    out = tmp_path / "out"
    (out / "runs" / runs[0].run_id).mkdir(parents=True)
    (out / "runs" / runs[0].run_id / "last.ckpt").write_bytes(b"")
    finish = "import json, pathlib, sys, time; time.sleep({}); " \
             "pathlib.Path(sys.argv[1]).with_name('result.json').write_text(json.dumps({{'status': 'max_steps'}}))"
    seconds = {runs[0].run_id: 0.0, runs[1].run_id: 0.5, runs[2].run_id: 0.5}
    monkeypatch.setattr(runner, "train_command", lambda configs: [
        sys.executable, "-c", finish.format(seconds[configs[0].parent.name]), str(configs[0])])
    estimates = []

    class Recorder(Progress):
        def update(self, statuses, eta):
            if "running" in statuses:
                estimates.append((statuses.count("max_steps"), eta))

    outcome = runner.run_local(runs, out, workers=1, progress=Recorder("tiny", enabled=False))
    assert list(outcome.statuses.values()) == ["max_steps"] * 3
    assert {eta for done, eta in estimates if done == 1} == {None}
    after_a_whole_run = [eta for done, eta in estimates if done == 2]
    assert after_a_whole_run and None not in after_a_whole_run


def test_tiny_sweep_isolates_failing_runs_and_reports(tmp_path, monkeypatch, capsys):
    """Four runs, two workers: two finish, one fails inside `loglinear train` (a strategy Lightning does not
    know, found only when training starts), one process dies without a result. The sweep reports all four."""
    spec_path = write_spec(tmp_path, {}, zip_groups=[{
        "model.mixer": ["attention", "mamba2", "attention", "attention"],
        "train.strategy": ["auto", "auto", "bogus", "auto"],
        "train.seed": [0, 0, 0, 1],
    }])
    runs = expand(load_spec(spec_path))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CRASH_HOOK)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("CRASH_RUN", runs[3].run_id)
    out = tmp_path / "out"

    assert sweep_main(["run", str(spec_path), "--out", str(out), "--workers", "2"]) == 1
    captured = capsys.readouterr()

    statuses = [json.loads((out / "runs" / r.run_id / "result.json").read_text()) for r in runs]
    assert [s["status"] for s in statuses[:2]] == ["max_steps", "max_steps"]
    assert statuses[2]["status"] == "failed" and "invalid strategy name" in statuses[2]["error"]
    assert statuses[3]["status"] == "failed" and "status 3" in statuses[3]["error"]
    assert "failed 2, running 0, pending 0 / total 4" in captured.err
    table = (out / "table.md").read_text()
    accuracy = table.split("## Test accuracy")[1].split("##")[0]
    accuracy_rows = [row for row in accuracy.splitlines() if row.startswith("|")]
    assert all(row in captured.out for row in accuracy_rows)  # the summary cut from it (reports/report.py)
    assert f"{out / 'table.md'}" in captured.out
    # 3 attention runs share a cell (zipped with the seed)
    assert "[1/3] |" in table.split("| Transformer |")[1].splitlines()[0]
    assert "| Mamba-2 |" in table
    missing = table.split("## Missing or failed runs")[1]
    assert runs[2].run_id in missing and runs[3].run_id in missing and runs[0].run_id not in missing
    for name in ("acc_vs_lr.png", "mqar_acc_vs_kv_pairs.png", "results.csv"):
        assert (out / name).is_file()
    assert not (out / "acc_vs_d_model.png").exists()  # one model size: nothing to draw against it
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["id"] for r in manifest["runs"]] == [r.run_id for r in runs]


def test_killed_sweep_resumes_without_redoing_finished_runs(tmp_path):
    spec_path = write_spec(tmp_path, {"train.seed": [0, 1, 2]}, **{"train.max_steps": 200, "train.val_every": 10,
                                                                            "train.early_stop_threshold": None})
    first, second, third = [tmp_path / "out" / "runs" / r.run_id for r in expand(load_spec(spec_path))]
    command = [sys.executable, "-m", "loglinear", "sweep", "run", str(spec_path), "--out", str(tmp_path / "out")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread, whatever else runs on the machine
    sweep = subprocess.Popen([*command, "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        saved = child_process.wait_until(
            sweep, lambda: (first / "result.json").is_file() and (second / "last.ckpt").is_file(), cpu_s=600)
        assert saved, "the sweep ended before the second run saved"
        sweep.send_signal(signal.SIGINT)
        _, err = child_process.communicate(sweep, cpu_s=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 130, err
    assert "resume with: loglinear sweep run" in err
    assert (second / "last.ckpt").is_file() and not (second / "result.json").exists()
    assert not (third / "result.json").exists()
    finished_at = (first / "result.json").stat().st_mtime_ns

    resumed = child_process.run(command, cpu_s=300, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert (first / "result.json").stat().st_mtime_ns == finished_at
    assert (first / "train.log").read_text().count("=== ") == 1
    assert (second / "train.log").read_text().count("=== ") == 2
    for run in (first, second, third):
        result = json.loads((run / "result.json").read_text())
        assert result["status"] in ("early_stopped", "max_steps")


def test_a_moved_sweep_skips_the_finished_runs_it_carries_without_checkpoints(tmp_path):
    """A sweep folder copied elsewhere with its manifest and one finished run's records (no checkpoint, no
    train.log) resumes there: that run is not trained again, the other one is, and the report has both. The
    records name paths relative to the sweep folder, so they read the same there; records written with absolute
    paths (as before) are read alike."""
    spec_path = write_spec(tmp_path, {"train.seed": [0, 1]})
    first, second = [r.run_id for r in expand(load_spec(spec_path))]
    here, there = tmp_path / "here", tmp_path / "there"
    assert sweep_main(["run", str(spec_path), "--out", str(here), "--workers", "1", "--quiet"]) == 0
    assert json.loads((here / "manifest.json").read_text())["spec"] == "../tiny.yaml"
    for rid in (first, second):
        folder = here / "runs" / rid
        assert (folder / "config.yaml").read_text().startswith(f"out_dir: runs/{rid}\n")
        assert json.loads((folder / "result.json").read_text())["config"]["out_dir"] == f"runs/{rid}"
        assert str(tmp_path) not in (folder / "train.log").read_text()
    (there / "runs" / first).mkdir(parents=True)
    shutil.copy(here / "manifest.json", there)
    for name in ("config.yaml", "metrics.csv", "result.json"):
        old = (here / "runs" / first / name).read_text().replace(f"runs/{first}", str(here / "runs" / first))
        (there / "runs" / first / name).write_text(old)

    assert sweep_main(["run", str(spec_path), "--out", str(there), "--workers", "1", "--quiet"]) == 0

    carried = there / "runs" / first
    assert sorted(p.name for p in carried.iterdir()) == ["config.yaml", "metrics.csv", "result.json"]
    assert json.loads((carried / "result.json").read_text())["config"]["out_dir"] == str(here / "runs" / first)
    assert json.loads((there / "runs" / second / "result.json").read_text())["status"] in ("early_stopped",
                                                                                           "max_steps")
    with open(there / "results.csv", newline="") as f:
        assert sorted(row["run_id"] for row in csv.DictReader(f)) == sorted([first, second])


def test_a_runs_process_imports_what_the_runner_imports_from_the_sweep_folder(monkeypatch, tmp_path):
    """A run's process starts in its sweep folder: relative PYTHONPATH entries are made absolute for it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", str(tmp_path / "abs")]))
    assert runner.child_environ()["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "src"), str(tmp_path / "abs")])


def test_a_second_runner_on_the_same_folder_is_refused(tmp_path, capsys):
    spec_path = write_spec(tmp_path, {"train.seed": [0]})
    out = tmp_path / "out"
    with exclusive_sweep(out):
        assert sweep_main(["run", str(spec_path), "--out", str(out)]) == 2
    assert "another `loglinear sweep run` is running" in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_a_run_made_while_its_labels_were_part_of_its_id_is_found_under_that_id(tmp_path):
    """A finished run of a spec with a plateau window of its own, in the folder its earlier id names (a committed
    study's, made while the labels of a run's end were part of its id): `sweep run` finds it there and trains
    nothing; the manifest and the report list it under that id."""
    spec_path = write_spec(tmp_path, {"train.seed": [0]}, **{"train.plateau_window": 2})
    (run,) = expand(load_spec(spec_path))
    assert run.alias is not None and run.alias != run.run_id
    out = tmp_path / "out"
    write_json_atomic(out / "runs" / run.alias / "result.json",
                      {"status": "max_steps", "val_accuracy": 0.5, "final_val": {"val/acc": 0.5},
                       "test": {"test/acc": 0.5}, "step": 20, "steps_to_threshold": None, "convergence": "plateau"})
    assert sweep_main(["run", str(spec_path), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == [run.alias]
    assert [e["id"] for e in json.loads((out / "manifest.json").read_text())["runs"]] == [run.alias]
    with open(out / "results.csv", newline="") as f:
        assert [(row["run_id"], row["convergence"]) for row in csv.DictReader(f)] == [(run.alias, "plateau")]
