"""The `loglinear` command parses and dispatches only: a command imports its own layer when it runs, and only
training loads the training libraries (a sweep's parent process, its status and its report do not)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from . import child_process
from .slow_cases import default_and_slow

ROOT = Path(__file__).resolve().parents[1]


def loaded_after(statements: str, libraries: tuple[str, ...]) -> tuple[list[str], str]:
    """Which of `libraries` a fresh interpreter has loaded after `statements`; and its stderr."""
    script = f"import sys\n{statements}\nprint([m for m in {libraries!r} if m in sys.modules])\n"
    done = child_process.run([sys.executable, "-c", script], cwd=ROOT, cpu_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_mistyped_train_command_fails_before_the_training_and_report_libraries_load(tmp_path):
    statements = ("from loglinear.cli import main\n"
                  f"assert main(['train', 'configs/mqar_cpu.yaml', 'out_dir={tmp_path}', 'model.d_modle=32']) == 2")
    loaded, stderr = loaded_after(statements, ("lightning", "matplotlib", "scipy"))
    assert loaded == [] and "model.d_modle" in stderr


def test_sweeps_and_their_reports_run_without_the_training_libraries():
    statements = "import loglinear.cli, loglinear.sweeps.commands, loglinear.cli.sweep_run"
    assert loaded_after(statements, ("lightning", "torchmetrics"))[0] == []


INTERRUPT_AT_TORCH = """\
import importlib.abc, os, signal, sys


class InterruptAtTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, InterruptAtTorch())
"""


IGNORING_SIGINT = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
"""As a background job of a script starts: SIGINT ignored, inherited from the shell."""

COMMANDS = [("train", "configs/mqar_cpu.yaml", "train.max_steps=2", "out_dir=OUT"),
            ("sweep", "run", "configs/sweeps/demo_cpu.yaml", "--out", "OUT", "--dry-run"),
            ("inspect", "OUT")]


@pytest.mark.parametrize("command, started_ignoring", default_and_slow(
    [(c, ignoring) for ignoring in (False, True) for c in COMMANDS],
    [*((c, False) for c in COMMANDS), (COMMANDS[0], True)]),
    ids=lambda v: v[0] if isinstance(v, tuple) else ("started-ignoring" if v else "started-default"))
def test_a_ctrl_c_while_a_command_loads_its_libraries_is_one_line(tmp_path, command, started_ignoring):
    """SIGINT as torch starts to load (a Ctrl-C in the first seconds): one line and 130, not a traceback; also in a
    process started with SIGINT ignored, where a lost signal would let a run train to its end."""
    (tmp_path / "sitecustomize.py").write_text((IGNORING_SIGINT if started_ignoring else "") + INTERRUPT_AT_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    done = child_process.run([sys.executable, "-m", "loglinear", *argv], cwd=ROOT, env=env, cpu_s=300)
    assert done.returncode == 130 and done.stderr.strip() == f"loglinear {command[0]}: interrupted", done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, words", [
    (["train", "a.yaml", "--pack", "b.yaml"], "'--pack' is neither a preset nor a key=value override (--pack comes "
                                              "first: loglinear train --pack CONFIG ...)"),
    (["train", "a.yaml", "b.yaml"], "'b.yaml' is neither a preset nor a key=value override; usage: loglinear train "
                                    "[PRESET.yaml] [key=value ...]"),
    (["train", "--max-steps", "5"], "'--max-steps' is neither a preset nor a key=value override"),
])
def test_a_train_command_out_of_its_usage_says_the_usage(argv, words, capsys):
    from loglinear.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loglinear train: error: ") and words in err and "\n" not in err, err
