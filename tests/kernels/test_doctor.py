"""`loglinear doctor` on a machine without CUDA: versions, the check in Triton's interpreter, "auto uses chunk",
and its exit status (tests/conftest.py sets TRITON_INTERPRET=1, as the command does without a CUDA device)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from loglinear.cli import main
from loglinear.kernels import selfcheck
from loglinear.kernels.selfcheck import CACHE_ENV, MODE_ENV, SelfCheckWarning, cache_key, cache_path, mode_of

pytest.importorskip("triton")
from .. import child_process
from ..slow_cases import default_and_slow
from .selfcheck_helpers import break_output, new_process  # noqa: E402  (after the importorskip)

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the report of a machine without CUDA")


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(MODE_ENV, raising=False)
    new_process(monkeypatch)


def no_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A self-check that passes at once, for tests about the rest of the report."""
    monkeypatch.setattr(selfcheck, "run_check", lambda device, dtype: selfcheck.Outcome(None, "none"))


def test_doctor_says_whether_torch_compile_has_a_cpp_compiler(monkeypatch, capsys):
    no_kernels(monkeypatch)
    monkeypatch.setattr("loglinear.kernels.doctor.cpp_compiler", lambda: None)
    main(["doctor"])
    assert ("C++ compiler for torch.compile on the CPU (train.compile): none found (install g++ or set CXX); "
            "train.compile=true fails on the CPU") in capsys.readouterr().out
    monkeypatch.setattr("loglinear.kernels.doctor.cpp_compiler", lambda: "g++")
    main(["doctor"])
    assert "C++ compiler for torch.compile on the CPU (train.compile): g++\n" in capsys.readouterr().out


def test_doctor_exits_1_on_a_failed_check(monkeypatch, capsys):
    break_output(monkeypatch)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "self-check on cpu (Triton interpreter), float32: FAILED: " in out and "o relative error" in out


def test_doctor_help_and_usage(capsys):
    assert main(["doctor", "--help"]) == 0
    assert "Exit status: 0 every check passed" in capsys.readouterr().out
    assert main(["doctor", "now"]) == 2


FIRST_CASES_HOOK = """\
import os
import signal
if os.environ.get("TRITON_INTERPRET") == "1":
    from loglinear.kernels import selfcheck
    whole = selfcheck.run_check
    selfcheck.run_check = lambda device, dtype: whole(device, dtype, selfcheck.CASES[:2])
"""
"""In a process started in the interpreter, the self-check runs its first two cases (one per variant): the
doctor's commands are under test here, every case passing is tests/kernels/test_selfcheck.py's."""


@pytest.mark.parametrize("interpret", default_and_slow([None, "0"], [None]))
def test_doctor_on_a_cpu_machine_checks_in_the_interpreter_says_chunk_and_exits_0(interpret, monkeypatch, tmp_path):
    """Whether or not the environment asks for the interpreter: Triton reads TRITON_INTERPRET when its modules
    load (torch may load them first), so doctor sets it for a new process rather than in its own."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    env[CACHE_ENV] = str(tmp_path / "cache")
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(FIRST_CASES_HOOK)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hook"), env.get("PYTHONPATH", "")])
    done = child_process.run([sys.executable, "-m", "loglinear", "doctor"], env=env, cpu_s=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"torch {torch.__version__}, triton " in out and ", lightning " in out and ", loglinear " in out
    monkeypatch.setenv(CACHE_ENV, env[CACHE_ENV])
    path = cache_path(cache_key(torch.device("cpu"), torch.float32))
    assert "self-check on cpu (Triton interpreter), float32: passed (closest: " in out
    assert f"stored in {path}" in out and path.is_file()
    assert out.rstrip().endswith("no CUDA device: auto uses chunk")


@pytest.mark.parametrize("mode", ["bogus", "AUTO"])
def test_doctor_refuses_an_unknown_self_check_mode_in_one_line(monkeypatch, capsys, mode):
    monkeypatch.setenv(MODE_ENV, mode)
    assert main(["doctor"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"loglinear doctor: {MODE_ENV}: unknown self-check mode {mode!r}; valid: auto, force, skip"]


def test_an_empty_self_check_mode_is_the_default(monkeypatch):
    monkeypatch.setenv(MODE_ENV, "")
    assert mode_of() == "auto"


def test_doctor_whose_cache_cannot_be_written_says_so_and_exits_1(monkeypatch, tmp_path, capsys):
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocked / "cache"))
    no_kernels(monkeypatch)
    with pytest.warns(SelfCheckWarning, match="could not be stored"):
        assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "float32: passed (closest: none); NOT stored" in out and "; stored in" not in out
    assert f"NOT stored: {blocked / 'cache'} cannot be written" in out


@pytest.mark.parametrize("whole_group", default_and_slow([True, False], [True]))
def test_an_interrupted_doctor_is_one_line_exit_130_and_stores_no_verdict(whole_group, tmp_path):
    """Ctrl-C at a terminal reaches the whole process group (`whole_group`); `kill -INT` reaches the doctor alone.
    Either way the check running in the interpreter's process stops, and one line says so."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[CACHE_ENV] = str(tmp_path / "cache")
    doctor = subprocess.Popen([sys.executable, "-m", "loglinear", "doctor"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert doctor.stdout is not None
    for line in doctor.stdout:  # the interpreter's process has started its check
        if line.startswith("C++ compiler"):
            break
    time.sleep(1.0)
    if whole_group:
        os.killpg(doctor.pid, signal.SIGINT)
    else:
        doctor.send_signal(signal.SIGINT)
    _, err = child_process.communicate(doctor, cpu_s=300)
    assert doctor.returncode == 130, err
    assert err.strip().splitlines() == ["loglinear doctor: interrupted; the self-check that was running stored no "
                                        "verdict"]
    assert not any((tmp_path / "cache").rglob("*.json"))
