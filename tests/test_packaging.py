"""The repository's promises about itself: CI runs the README's test command (lint, then tests); every package is
installed."""

import re
import tomllib
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


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {name: Path(path) for name, path in config["package-dir"].items()}
    found = set()
    for name, path in dirs.items():
        for init in (ROOT / path).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / path)
            found.add(".".join([name, *relative.parts]))
    assert found == listed
