"""The repository's promises about itself: CI runs the README's test command (lint, then tests); an installed
package finds the presets."""

import re
import subprocess
from pathlib import Path

import pytest

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
