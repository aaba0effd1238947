"""The tests' guard on child processes: a runaway and a hung child fail, each named as such; a slow one does not."""

import subprocess
import sys
import time

import pytest

from . import child_process
from .child_process import ChildFailed, communicate, run, wait_until

SPIN = "while True: pass"
SPIN_IN_A_GRANDCHILD = ("import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])")
linux_only = pytest.mark.skipif(not child_process.PROC.is_dir(), reason="reads CPU time from /proc")


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(child_process, "POLL_S", 0.2)
    monkeypatch.setattr(child_process, "STALL_S", 2.0)
    monkeypatch.setattr(child_process, "STALL_CPU_S", 0.005)  # no clock tick in the window


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_that_ends_gives_what_subprocess_run_gives(quick):
    done = run(python("import sys; print(sys.stdin.read().upper()); sys.exit(3)"), cpu_s=60, input="hi")
    assert (done.returncode, done.stdout, done.stderr) == (3, "HI\n", "")


@linux_only
def test_a_child_over_its_cpu_budget_ran_away(quick):
    with pytest.raises(ChildFailed, match=r"ran away: used \d+ s of CPU, over its budget of 0 s.*load average"):
        run(python(SPIN), cpu_s=0.3)


@linux_only
def test_a_grandchild_counts_and_is_stopped_too(quick):
    proc = subprocess.Popen(python(SPIN_IN_A_GRANDCHILD), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    guard = child_process.Guard(proc, cpu_s=0.3)
    while len(child_process._tree(proc.pid)) < 2:
        time.sleep(0.05)
    (grandchild,) = set(child_process._tree(proc.pid)) - {proc.pid}
    with pytest.raises(ChildFailed, match="ran away"):
        while True:
            guard.check()
            time.sleep(0.2)
    time.sleep(0.2)
    assert child_process._stat(grandchild) is None or "Z" in (child_process.PROC / str(grandchild) / "stat").read_text()


@linux_only
def test_a_child_using_no_cpu_hung(quick):
    with pytest.raises(ChildFailed, match=r"hung: used 0\.\d s of CPU in the last \d+ s"):
        run(python("import time; print('started', flush=True); time.sleep(600)"), cpu_s=60)


@linux_only
def test_a_slow_child_that_keeps_working_is_not_stopped(quick):
    """Twice the stall window of work: it uses CPU all along, so it is slow, not hung."""
    code = "import time\nend = time.monotonic() + 4.5\nwhile time.monotonic() < end: pass\nprint('done')"
    assert run(python(code), cpu_s=60).stdout == "done\n"


def test_without_proc_a_wall_clock_guard_stands_in_and_says_so(quick, monkeypatch, tmp_path):
    monkeypatch.setattr(child_process, "PROC", tmp_path / "no-proc")
    monkeypatch.setattr(child_process, "WALL_PER_CPU_S", 1.0)
    with pytest.raises(ChildFailed, match="a wall-clock guard: this system shows no child's CPU time"):
        run(python("import time; time.sleep(600)"), cpu_s=0.5)


def test_communicate_guards_a_started_child(quick, monkeypatch, tmp_path):
    monkeypatch.setattr(child_process, "PROC", tmp_path / "no-proc")
    monkeypatch.setattr(child_process, "WALL_PER_CPU_S", 1.0)
    proc = subprocess.Popen(python("import time; time.sleep(600)"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    with pytest.raises(ChildFailed, match="still running after"):
        communicate(proc, cpu_s=0.5)
    assert proc.returncode is not None


def test_wait_until_says_whether_the_condition_came_or_the_child_ended(quick, tmp_path):
    flag = tmp_path / "flag"
    writer = subprocess.Popen(python(f"import time, pathlib; pathlib.Path({str(flag)!r}).touch(); time.sleep(600)"))
    try:
        assert wait_until(writer, flag.is_file, cpu_s=60)
    finally:
        writer.kill()
        writer.wait()
    quitter = subprocess.Popen(python("pass"))
    assert not wait_until(quitter, (tmp_path / "never").is_file, cpu_s=60)


@linux_only
def test_wait_until_fails_a_hung_child(quick, tmp_path):
    sleeper = subprocess.Popen(python("import time; time.sleep(600)"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    with pytest.raises(ChildFailed, match="hung"):
        wait_until(sleeper, (tmp_path / "never").is_file, cpu_s=60)
