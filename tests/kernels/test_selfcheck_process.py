"""The self-check's child process: its outcome comes back, and a crash, a hang or garbage fails the check
with a reason instead of ending the caller."""

from __future__ import annotations

import json
import sys

from loglinear.kernels.selfcheck_process import outcome_of

from .. import child_process


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_passing_child_gives_its_outcome():
    line = json.dumps({"failure": None, "closest": "o of case: 1e-07"})
    assert outcome_of(child(f"print('noise'); print({line!r})"), 60) == (None, "o of case: 1e-07")


def test_a_failing_check_keeps_its_reason():
    line = json.dumps({"failure": "dq relative error 1e-02", "closest": ""})
    assert outcome_of(child(f"print({line!r})"), 60) == ("dq relative error 1e-02", "")


def test_a_crashed_child_is_a_failure_naming_its_exit_status_and_last_words():
    failure, closest = outcome_of(child("import sys; print('CUDA error: an illegal memory access', file=sys.stderr); "
                                        "sys.exit(134)"), 60)
    assert failure == "the check's child process ended with exit status 134: CUDA error: an illegal memory access"
    assert closest == ""


def test_a_hung_child_is_a_failure_after_the_time_limit():
    failure, _ = outcome_of(child("import time; time.sleep(30)"), 0.5)
    assert failure.startswith("the check did not finish within") and "child process" in failure


def test_a_child_printing_no_outcome_is_a_failure():
    failure, _ = outcome_of(child("print('not json')"), 60)
    assert failure.startswith("the check's child process ended with exit status 0: not json")


def test_the_child_runs_the_check(tmp_path):
    """The real entry point on the CPU (Triton's interpreter, inherited from the tests' environment), one case."""
    done = child_process.run([sys.executable, "-m", "loglinear.kernels.selfcheck_child", "cpu", "float32",
                              "--cases", "1"], cpu_s=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["failure"] is None and "of mamba2" in found["closest"]
