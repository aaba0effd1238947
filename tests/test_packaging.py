"""The repository's promises about itself: CI runs the README's test command (lint, then tests); an installed
package finds the presets."""

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from . import child_process

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [b.strip() for b in blocks]


def test_ci_runs_exactly_the_readme_test_command():
    install_and_run_main, install_and_test = readme_commands()[:2]
    assert "pytest" in install_and_test and "torch==2.13.0" in install_and_test
    assert "ruff check" in install_and_test.split("pytest")[0], "the lint runs before the tests"
    assert install_and_test in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "torch==2.13.0" in install_and_run_main


def test_ci_runs_the_slow_tests_after_the_readme_test_command():
    """The README's command leaves the `slow` tests out (tests/conftest.py); CI runs them after it, the same way."""
    install_and_test = readme_commands()[1]
    tests = "python3 -m pytest" + install_and_test.split("python3 -m pytest", 1)[1]
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert lines.index(f"{tests} -m slow") > lines.index(install_and_test)


class Item:
    def __init__(self, *marks: str):
        self.marks, self.added = marks, []

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None

    def add_marker(self, mark):
        self.added.append(mark)


@pytest.mark.parametrize("markexpr, skipped", [("", True), ("not gpu", True), ("slow", False),
                                                ("slow or not slow", False)])
def test_the_slow_tests_run_only_when_the_marker_expression_names_them(markexpr, skipped):
    from .conftest import pytest_collection_modifyitems

    slow, other = Item("slow"), Item()
    pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace(markexpr=markexpr)), [slow, other])
    reasons = [mark.kwargs["reason"] for mark in slow.added if mark.name == "skip"]
    assert reasons == (["slow: not in the default run; `pytest -m slow` runs them (CI does)"] if skipped else [])
    assert not [mark for mark in other.added if "slow" in mark.kwargs.get("reason", "")]


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    """tests/kernels/test_fused_compile.py and the Slurm tests share a setup on one worker (`--dist loadgroup`)."""
    (tmp_path / "test_group.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.xdist_group('shared')\n\n\n"
        "@pytest.mark.parametrize('i', range(4))\ndef test_one(i):\n    pass\n")
    done = child_process.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p",
                              "no:cacheprovider", "-c", os.devnull, str(tmp_path / "test_group.py")],
                             cwd=tmp_path, cpu_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {line.split("]")[0] for line in done.stdout.splitlines() if "PASSED" in line}
    assert len(workers) == 1, done.stdout


def test_the_presets_ship_inside_the_package():
    """configs/ is the package's configs folder (a link), so `load_run_config("configs/...")` and the preset
    lookup of an installed package see the same files."""
    from loglinear.runs.config import CONFIGS_DIR

    assert CONFIGS_DIR.resolve() == (ROOT / "configs").resolve()
    assert (CONFIGS_DIR / "mqar_cpu.yaml").is_file()


def test_no_tracked_text_names_an_issue_number():
    """The repository speaks of the project, not of its tracker: no issue numbers in its text."""

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    pattern = re.compile(r"\b[Ii]ssues? #?\d")
    texts = [name for name in tracked if name.endswith((".md", ".py", ".yaml", ".toml", ".cff"))]
    found = [f"{name}:{i}" for name in texts
             for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
             if pattern.search(line)]
    assert not found, found
