"""`loglinear sweep status` on a local sweep: a run whose folder a process holds is running, and says how far its
metrics.csv has got; one without rows yet says only that it runs."""

from __future__ import annotations

import os

from loglinear.runs.folder import LOCK, exclusive
from loglinear.runs.metrics_rows import METRICS
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.spec import expand, load_spec
from loglinear.sweeps.status import format_status, sweep_status

from .sweep_helpers import write_spec


def test_a_running_run_says_its_process_and_how_many_steps_it_has_logged(tmp_path):
    spec = load_spec(write_spec(tmp_path, {"train.lr": [1.0e-3, 2.0e-3]}, **{"train.max_steps": 2000}))
    runs = expand(spec)
    out = tmp_path / "out"
    write_manifest(out, spec, runs)
    logged, starting = (run_dir(out, r.run_id) for r in runs)
    logged.mkdir(parents=True)
    (logged / METRICS).write_text("epoch,step,train/loss,val/acc\n0,1199,8.3,\n0,1199,,0.02\n0,1249,8.2,\n")
    with exclusive(logged / LOCK, "held by the test"), exclusive(starting / LOCK, "held by the test"):
        states = {s.run_id: s for s in sweep_status(out, with_queue=False)}
    pid = os.getpid()
    assert [(states[r.run_id].status, states[r.run_id].detail) for r in runs] == [
        ("running", f"pid {pid}, step 1,250 of 2,000"), ("running", f"pid {pid}")]
    assert f"running (pid {pid}, step 1,250 of 2,000)" in format_status("tiny", list(states.values()))


def test_a_running_run_whose_metrics_do_not_read_says_so(tmp_path):
    """A metrics.csv with bytes that are not UTF-8 (a copy gone wrong, a disk fault): the run is still running, and
    its detail says why its step is not shown; no traceback."""
    spec = load_spec(write_spec(tmp_path, {"train.lr": [1.0e-3]}, **{"train.max_steps": 2000}))
    (run,) = expand(spec)
    out = tmp_path / "out"
    write_manifest(out, spec, [run])
    folder = run_dir(out, run.run_id)
    folder.mkdir(parents=True)
    (folder / METRICS).write_bytes(b"epoch,step,train/loss\n0,1199,8.3\n0,12\xff9,8.2\n")
    with exclusive(folder / LOCK, "held by the test"):
        (state,) = sweep_status(out, with_queue=False)
    assert (state.status, state.detail) == ("running", f"pid {os.getpid()}, {METRICS} does not read: not UTF-8 text "
                                                       f"(byte 37: b'\\xff')")
