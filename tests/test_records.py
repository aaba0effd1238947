"""Committed records read the same wherever the repository is cloned: results/ names no absolute path of the
machine that ran it (its runs' logs included: their interpreter and folders as a sweep now writes them), and every
committed sweep folder, in results/ and records/, names its spec and its runs' folders relative to itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ABSOLUTE = re.compile(r"(?<![\w.~])/(?:work|tmp|root|home|Users|opt|mnt|scratch)/")
"""An absolute path of a machine: these roots, not a URL's path (`https://host/...` has a word before it)."""
SWEEPS = sorted(p.parent for folder in ("results", "records") for p in (ROOT / folder).rglob("manifest.json"))


def text_files(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix not in {".png", ".pdf"}]


def test_the_committed_results_name_no_absolute_path():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in text_files(ROOT / "results")
             for m in [ABSOLUTE.search(p.read_text(errors="replace"))] if m]
    assert not found, found[:5]


def test_there_are_committed_sweep_folders_to_check():
    assert any(p.is_relative_to(ROOT / "results") for p in SWEEPS)


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_committed_sweep_folder_names_its_spec_and_runs_relative_to_itself(sweep):
    spec = json.loads((sweep / "manifest.json").read_text()).get("spec")
    assert spec is None or not Path(spec).is_absolute(), spec
    for run in sorted((sweep / "runs").glob("*/")):
        if (run / "config.yaml").is_file():
            assert yaml.safe_load((run / "config.yaml").read_text())["out_dir"] == f"runs/{run.name}"
        if (run / "result.json").is_file():
            config = json.loads((run / "result.json").read_text()).get("config") or {}
            assert config.get("out_dir", f"runs/{run.name}") == f"runs/{run.name}"


def test_the_absolute_path_pattern_finds_a_machines_paths_only():
    assert ABSOLUTE.search("out_dir: /work/studies/x/runs/1") and ABSOLUTE.search('"spec": "/tmp/d6/x.yaml"')
    assert not ABSOLUTE.search("https://github.com/root/x and ../../configs/sweeps/x.yaml and ~/tmp/x")
