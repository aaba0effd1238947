"""The `loglinear` command parses and dispatches only: a command imports its own layer when it runs, and only
training loads the training libraries (a sweep's parent process, its status and its report do not)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from . import child_process

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
