"""What the Slurm launcher reads from Slurm, without a cluster: sinfo's partitions, squeue's tasks, the
defaults that fit a partition, and `loglinear sweep status` on a sweep folder with a (fake) queue."""

from __future__ import annotations

import json

import pytest

from loglinear.cli import sweep_main
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import slurm
from loglinear.sweeps.launchers import partition_defaults
from loglinear.sweeps.manifest import write_manifest
from loglinear.sweeps.slurm import JOBS_FILE, Partition, QueuedTask, SlurmError, gpus_in, minutes
from loglinear.sweeps.spec import expand, load_spec
from loglinear.sweeps.status import format_status, sweep_status

from .sweep_helpers import write_spec

SINFO = "debug*|2|(null)|1:00:00\ngpu|64|gpu:a100:8(S:0-1)|2-00:00:00\nbig|128+|gpu:4,gpu:v100:4|infinite\n"
SQUEUE = ("12_0|RUNNING|None\n12_1|PENDING|JobArrayTaskLimit\n12_2|PENDING|ReqNodeNotAvail, UnavailableNodes:n1\n"
          "9|PENDING|Priority\n")


@pytest.fixture
def fake_slurm(monkeypatch):
    """Slurm's client commands answering with SINFO and SQUEUE."""
    calls = []

    def client(*command):
        calls.append(command)
        return {"sinfo": SINFO, "squeue": SQUEUE}[command[0]]

    monkeypatch.setattr(slurm, "client", client)
    return calls


def test_gres_and_time_limits():
    gres = ("(null)", "gpu:4", "gpu:a100:4(S:0-1)", "gpu:a100:2,gpu:v100:2", "gpu", "mps:100,gpu:2")
    assert [gpus_in(g) for g in gres] == [0, 4, 4, 4, 1, 2]
    assert [minutes(t) for t in ("infinite", "30", "5:30", "1:00:00", "2-00:00:00", "2-12", "1-02:03:04")] == \
        [None, 30, 5, 60, 2880, 3600, 1563]


def test_partitions_from_sinfo(fake_slurm):
    assert slurm.partition() == Partition("debug", 2, 0, 60)
    assert slurm.partition("gpu") == Partition("gpu", 64, 8, 2880)
    assert slurm.partition("big") == Partition("big", 128, 8, None)
    with pytest.raises(SlurmError, match=r"no partition 'nope' \(partitions: big, debug, gpu\)"):
        slurm.partition("nope")


def test_defaults_fit_the_partition(fake_slurm):
    assert partition_defaults({"slurm_partition": "debug"}) == {"timeout_min": 60, "cpus_per_task": 1}
    assert partition_defaults({"slurm_partition": "gpu"}) == \
        {"timeout_min": 24 * 60, "gpus_per_node": 1, "cpus_per_task": 8}
    assert partition_defaults({"slurm_partition": "big", "slurm_gres": "gpu:v100:1", "timeout_min": 5}) == \
        {"cpus_per_task": 8}
    given = {"slurm_partition": "gpu", "gpus_per_node": 2, "cpus_per_task": 4, "slurm_time": "1:00:00"}
    assert partition_defaults(given) == {}


def test_queue_lists_the_tasks_of_the_jobs_asked_for(fake_slurm):
    tasks = slurm.queue(["12"])
    assert tasks == {"12_0": QueuedTask("RUNNING", "None"), "12_1": QueuedTask("PENDING", "JobArrayTaskLimit"),
                     "12_2": QueuedTask("PENDING", "ReqNodeNotAvail, UnavailableNodes:n1")}
    assert tasks["12_0"].running and not tasks["12_1"].running
    assert tasks["12_1"].never_starts is None and "down, drained" in tasks["12_2"].never_starts
    assert slurm.queue([]) == {} and len(fake_slurm) == 1


def test_client_errors_are_one_line():
    with pytest.raises(SlurmError, match="not found"):
        slurm.client("no-such-slurm-command")
    assert slurm.error_line("sbatch: error: Batch job submission failed: Invalid partition name specified\n") == \
        "sbatch: error: Batch job submission failed: Invalid partition name specified"


def test_sweep_status_from_run_folders_and_the_queue(tmp_path, fake_slurm):
    spec = load_spec(write_spec(tmp_path, {"train.lr": [1.0e-3, 2.0e-3, 3.0e-3, 4.0e-3, 5.0e-3, 6.0e-3]}))
    runs = expand(spec)
    out = tmp_path / "out"
    write_manifest(out, spec, runs)
    write_json_atomic(out / "runs" / runs[0].run_id / "result.json", {"status": "max_steps"})
    failed = {"status": "failed", "error": "ValueError: boom\nmore"}
    write_json_atomic(out / "runs" / runs[1].run_id / "result.json", failed)
    (out / "runs" / runs[5].run_id).mkdir(parents=True)
    (out / "runs" / runs[5].run_id / "last.ckpt").write_bytes(b"checkpoint")
    tasks = {"12_0": runs[2].run_id, "12_1": runs[3].run_id, "12_2": runs[4].run_id, "12_3": runs[5].run_id}
    (out / JOBS_FILE).write_text(json.dumps({"jobs": [{"job": "12", "tasks": tasks}]}))
    states = {s.run_id: s for s in sweep_status(out)}
    assert [(states[r.run_id].status, states[r.run_id].detail) for r in runs] == [
        ("max_steps", ""), ("failed", "ValueError: boom"), ("running", ""), ("pending", "JobArrayTaskLimit"),
        ("pending", "ReqNodeNotAvail, UnavailableNodes:n1: the nodes it needs are down, drained or reserved"),
        ("stopped", "resumes from last.ckpt"),
    ]
    text = format_status("tiny", list(states.values()))
    assert text.splitlines()[0] == "tiny: 6 runs: 1 done, 1 failed, 2 pending, 1 running, 1 stopped"
    assert "12_1" in text and "train.lr=0.004" in text


def test_sweep_status_without_slurm_reads_the_run_folders(tmp_path, monkeypatch, capsys):
    spec = load_spec(write_spec(tmp_path, {"train.lr": [1.0e-3, 2.0e-3]}))
    runs = expand(spec)
    out = tmp_path / "out"
    write_manifest(out, spec, runs)
    write_json_atomic(out / "runs" / runs[0].run_id / "result.json", {"status": "early_stopped"})
    (out / JOBS_FILE).write_text(json.dumps({"jobs": [{"job": "12", "tasks": {"12_0": runs[1].run_id}}]}))
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue
    assert sweep_main(["status", str(out)]) == 0
    captured = capsys.readouterr()
    assert "queue is not readable here (squeue not found" in captured.err
    assert captured.out.splitlines()[0] == "tiny: 2 runs: 1 done, 1 not started"
