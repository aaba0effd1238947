"""Scale-out launchers: the wandb sweep file (its agents' `loglinear train` commands resolve to the runs of
the manifest) and a submitit job array on submitit's local executor."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from loglinear.cli import sweep_main
from loglinear.runs.config import load_run_config, run_id, to_container
from loglinear.sweeps import launchers
from loglinear.sweeps.launchers import TrainJob, parse_executor_args
from loglinear.sweeps.runner import RunProcess
from loglinear.sweeps.spec import SpecError, expand, load_spec

from .. import child_process
from .sweep_helpers import sweep_cli, write_spec

GRID = {
    "model.mixer": ["attention", "mamba2"],
    "train.lr": [1.0e-3, 3.0e-3],
    "model.tie_embeddings": [True, False],
    "data.task_args.num_kv_pairs": [1, [1, 2]],
    "model.lambda_param": ["softplus"],
}


def agent_args(sweep: dict, point: dict) -> list[str]:
    """The arguments a wandb agent passes to `loglinear train` for `point` (wandb formats `f"{key}={value}"`)."""
    command = sweep["command"]
    assert command[:2] == ["loglinear", "train"] and command[-1] == "${args_no_hyphens}"
    return command[2:-1] + [f"{key}={value}" for key, value in point.items()]


def agent_config(args: list[str]):
    preset = args[0] if "=" not in args[0] else None  # as `loglinear train` reads its arguments
    return load_run_config(preset, args[1:] if preset else args)


def identity(cfg) -> dict:
    return {k: v for k, v in to_container(cfg).items() if k not in ("out_dir", "logger")}


@pytest.fixture
def wandb_sweep(tmp_path):
    spec_path = write_spec(tmp_path, GRID)
    out = tmp_path / "out"
    assert sweep_main(["wandb", str(spec_path), "--out", str(out)]) == 0
    return spec_path, out, yaml.safe_load((out / "wandb_sweep.yaml").read_text())


def test_wandb_sweep_file_runs_loglinear_train_over_the_grid(wandb_sweep):
    _, out, sweep = wandb_sweep
    assert sweep["program"] == "loglinear" and sweep["method"] == "grid"
    assert sweep["metric"] == {"name": "val/acc", "goal": "maximize"}
    assert f"out_dir={out}/runs/{{run_id}}" in sweep["command"]
    assert "logger.progress=false" in sweep["command"] and "train.max_steps=20" in sweep["command"]
    assert sweep["parameters"] == {key: {"values": values} for key, values in GRID.items()}
    assert (out / "wandb_sweep.yaml").read_text().startswith("# wandb sweep of")
    assert len(json.loads((out / "manifest.json").read_text())["runs"]) == 16


def test_wandb_agents_resolve_to_the_manifest_runs(wandb_sweep):
    spec_path, _, sweep = wandb_sweep
    runs = {r.run_id: r for r in expand(load_spec(spec_path))}
    parameters = {key: p["values"] for key, p in sweep["parameters"].items()}
    for values in itertools.product(*parameters.values()):
        cfg = agent_config(agent_args(sweep, dict(zip(parameters, values, strict=True))))
        rid = run_id(cfg)
        assert rid in runs
        assert identity(cfg) == identity(runs.pop(rid).config)
    assert not runs


def test_wandb_agents_write_into_the_runs_folder(wandb_sweep):
    """`loglinear train` replaces `{run_id}` in out_dir by the run's id (runs/config.py)."""
    spec_path, out, sweep = wandb_sweep
    first = expand(load_spec(spec_path))[0]
    cfg = agent_config(agent_args(sweep, first.point))
    assert cfg.out_dir == str(out / "runs" / first.run_id)


def test_wandb_refuses_zip_groups(tmp_path, capsys):
    zipped = {"model.mixer": ["attention", "mamba2"], "train.lr": [1.0e-3, 1.0e-2]}
    spec_path = write_spec(tmp_path, {}, zip_groups=[zipped])
    assert sweep_main(["wandb", str(spec_path), "--out", str(tmp_path / "out")]) == 2
    assert "cartesian" in capsys.readouterr().err


def test_executor_arguments():
    assert parse_executor_args(["timeout_min=600", "slurm_partition=gpu", "cluster=local"]) == {
        "timeout_min": 600, "slurm_partition": "gpu", "cluster": "local"}
    with pytest.raises(SpecError, match="KEY=VALUE"):
        parse_executor_args(["600"])


def test_submitit_job_array_fills_the_same_run_folders(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec_path = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2"]})
    out = tmp_path / "out"
    args = ["run", str(spec_path), "--out", str(out), "--launcher", "submitit", "--executor", "cluster=local",
            "--quiet"]
    assert sweep_main(args) == 0
    for run in expand(load_spec(spec_path)):
        result = json.loads((out / "runs" / run.run_id / "result.json").read_text())
        assert result["status"] == "max_steps"
    assert (out / "table.md").is_file() and any((out / "submitit").iterdir())
    requeued = TrainJob().checkpoint([run], [str(out / "runs" / run.run_id)], 1)
    assert isinstance(requeued, submitit.helpers.DelayedSubmission) and isinstance(requeued.function, TrainJob)


def test_a_wandb_agent_command_trains_the_same_run_as_sweep_run(tmp_path, monkeypatch):
    """The sweep file's command with one grid point's arguments, run by hand as an agent would (wandb off:
    logger keys are not part of a run), lands in the folder `loglinear sweep run` uses for that point and
    trains the same run."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec_path = write_spec(tmp_path, {"model.mixer": ["attention"], "train.lr": [3.0e-3]})
    (run,) = expand(load_spec(spec_path))
    agent_out, sweep_out = tmp_path / "agent", tmp_path / "sweep"
    assert sweep_main(["wandb", str(spec_path), "--out", str(agent_out)]) == 0
    sweep = yaml.safe_load((agent_out / "wandb_sweep.yaml").read_text())
    command = agent_args(sweep, run.point) + ["logger.wandb.mode=disabled"]
    agent = child_process.run([shutil.which("loglinear"), "train", *command], cpu_s=600)
    assert agent.returncode == 0, agent.stderr
    assert sweep_cli("run", str(spec_path), "--out", str(sweep_out), "--quiet").returncode == 0
    names = [[p.name for p in (out / "runs").iterdir()] for out in (agent_out, sweep_out)]
    assert names == [[run.run_id], [run.run_id]]
    by_agent, by_sweep = (json.loads((out / "runs" / run.run_id / "result.json").read_text())
                          for out in (agent_out, sweep_out))
    assert {k: v for k, v in by_agent.items() if k not in ("wall_time_s", "config")} == \
        {k: v for k, v in by_sweep.items() if k not in ("wall_time_s", "config")}
    assert identity(load_run_config(str(agent_out / "runs" / run.run_id / "config.yaml"), [])) == identity(run.config)


@pytest.mark.parametrize("stop", ["os.kill(os.getpid(), signal.SIGTERM)", "sys.exit(143)"])
def test_a_task_whose_run_slurm_stopped_exits_without_a_result(tmp_path, monkeypatch, stop):
    """SIGTERM from Slurm (requeue, preemption): `loglinear train` saves and exits 143 (or dies of the signal);
    the task exits too, with no result for submitit and none in the run folder, so a requeued task resumes the run."""
    run = expand(load_spec(write_spec(tmp_path, {"model.mixer": ["attention"]})))[0]

    def start_job(runs, directories, env):
        process = subprocess.Popen([sys.executable, "-c", f"import os, signal, sys; {stop}"])
        return RunProcess(runs, directories, process, open(tmp_path / "train.log", "a"), 0)

    monkeypatch.setattr(launchers, "start_job", start_job)
    with pytest.raises(SystemExit) as stopped:
        TrainJob()([run], [str(tmp_path)], 1)
    assert stopped.value.code in (143, -signal.SIGTERM)
    assert not (tmp_path / "result.json").exists()


def test_timeout_checkpoint_stops_the_run_from_a_signal_handler(tmp_path, monkeypatch):
    """Before a time limit submitit calls `checkpoint` in its SIGUSR2 handler, while the task waits for its
    run: the run gets SIGINT, and the handler returns as soon as it exited (not after the grace period)."""
    submitit = pytest.importorskip("submitit")
    run = expand(load_spec(write_spec(tmp_path, {"model.mixer": ["attention"]})))[0]
    child = ("import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); "
             "print('ready', flush=True); time.sleep(600)")
    job, handled = TrainJob(), {}

    def start_job(runs, directories, env):
        process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline() == "ready\n"
        threading.Thread(target=timeout_signal_once_started, daemon=True).start()
        return RunProcess(runs, directories, process, open(tmp_path / "train.log", "a"), 0)

    def timeout_signal_once_started():  # Slurm's warning, once the task has its run's process
        while job._process is None:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGUSR2)

    def on_timeout(signum, frame):  # what submitit's handler does: checkpoint, requeue, exit
        started = time.monotonic()
        handled["requeue"] = job.checkpoint([run], [str(tmp_path)], 1)
        handled["seconds"] = time.monotonic() - started
        raise SystemExit(-1)

    monkeypatch.setattr(launchers, "start_job", start_job)
    monkeypatch.setattr(launchers, "GRACE_S", 600.0)  # far above a child's exit on a busy machine
    previous = signal.signal(signal.SIGUSR2, on_timeout)
    try:
        with pytest.raises(SystemExit):
            job([run], [str(tmp_path)], 1)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert isinstance(handled["requeue"], submitit.helpers.DelayedSubmission)
    assert handled["seconds"] < launchers.GRACE_S and job._process.process.wait() == 130
