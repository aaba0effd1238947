"""The repository's promises about itself: CI runs the README's test command (lint, then tests); an installed
package finds the presets."""

import re
from pathlib import Path

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
