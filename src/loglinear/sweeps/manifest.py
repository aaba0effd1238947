"""A sweep's output folder: `manifest.json` (the runs it expects), `runs/<run_id>/` (one folder per run).

The manifest is written before any run starts, by every launcher, so the report knows which runs
are missing; under a two-stage protocol it is written again with the confirmation runs once the selection
is decided (each run has its `stage`); each run folder is what `loglinear train` writes (config.yaml,
result.json, ...) plus `train.log`, the output of its process. `aside/<date>-<time>/` holds the runs that
`sweep run --set-aside` moved out of the way of an edited spec (protocol/held.py), as they lay.

What a sweep folder records names paths relative to the sweep folder, so that it reads the same wherever it is moved
or cloned: the manifest's `spec` (`../../configs/sweeps/NAME.yaml` for a folder two levels below the repository) and
each run's `out_dir` (`runs/<run_id>`: its process runs in the sweep folder, sweeps/runner.py). Folders written
before name absolute paths there; nothing reads those fields to find a file, so they are read alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from loglinear.runs.config import ConfigError
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps.spec import Run, SweepSpec
from loglinear.sweeps.spec_keys import as_mapping

MANIFEST = "manifest.json"
RUNS = "runs"
LOG = "train.log"
ASIDE = "aside"
"""Where `sweep run --set-aside` moves the runs an edited spec no longer plans (`set_aside`)."""


def default_out(spec: SweepSpec) -> Path:
    return Path("sweeps_out") / spec.name


def run_dir(out: Path, run_id: str) -> Path:
    return out / RUNS / run_id


def sweep_folder(directory: Path) -> Path:
    """The sweep folder of the run folder `directory` (`<sweep>/runs/<run_id>`)."""
    return directory.parents[1]


def relative_to_sweep(path: Path, out: Path) -> str:
    """`path` as the sweep folder `out` names it: relative to it (`..` where it lies outside), or absolute where
    no relative path leads there (another drive)."""
    try:
        return os.path.relpath(path.resolve(), out.resolve())
    except ValueError:
        return str(path.resolve())


def adopt_legacy(out: Path, runs: list[Run]) -> list[Run]:
    """`runs`, each whose folder in `out` has its earlier id (`Run.alias`, none under its id) under that id: a run
    made before its labels left its identity is found, skipped when finished, resumed when not."""
    return [dataclasses.replace(run, run_id=run.alias, alias=run.run_id)
            if run.alias is not None and run_dir(out, run.alias).is_dir() and not run_dir(out, run.run_id).is_dir()
            else run for run in runs]


def write_manifest(out: Path, spec: SweepSpec, runs: list[Run]) -> Path:
    """Record the sweep and every run it expects (id, varied values, `loglinear train` arguments, config)."""
    path = out / MANIFEST
    write_json_atomic(path, manifest_of(spec, runs, out))
    return path


def manifest_of(spec: SweepSpec, runs: list[Run], out: Path) -> dict[str, Any]:
    """The manifest of the sweep folder `out` that expects `runs` of `spec` (what `write_manifest` writes)."""
    return {
        "name": spec.name,
        "spec": relative_to_sweep(spec.path, out) if spec.path else None,
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        "varied_keys": spec.varied_keys,
        "zip": [list(group) for group in spec.zip],
        "report": as_mapping(spec.report),
        "protocol": as_mapping(spec.protocol),
        "runs": [
            {"id": r.run_id, "dir": f"{RUNS}/{r.run_id}", "point": r.point, "args": r.args, "config": _config(r),
             **({"stage": r.stage} if r.stage else {})}
            for r in runs
        ],
    }


def check_owner(out: Path, spec: SweepSpec) -> None:
    """A sweep folder belongs to the spec whose name its manifest records: another spec's `sweep run --out` (or
    `sweep wandb --out`) into it is a ConfigError, before anything is written. The same name with an edited spec
    is the same sweep (that is how a sweep grows); a corrupt manifest is written anew."""
    if not (out / MANIFEST).is_file():
        return
    try:
        owner = read_manifest(out).get("name")
    except ConfigError:
        return
    if owner != spec.name:
        raise ConfigError(f"{out} holds sweep {owner!r} (its {MANIFEST}), not {spec.name!r} of "
                          f"{spec.path or 'the spec'}: give another --out, or remove {out} to reuse the folder")


def set_aside(out: Path, run_ids: list[str], files: tuple[str, ...], target: Path | None = None) -> Path:
    """Move the run folders `run_ids` of the sweep folder `out`, and its files `files` (its manifest copied), into
    `target` or a new folder `out/aside/<date>-<time>/`, where they lie as they lay in `out`; nothing is deleted.
    Returns the folder."""
    if target is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = out / ASIDE / stamp
        for n in range(1, 1000):
            if not target.exists():
                break
            target = out / ASIDE / f"{stamp}-{n}"
    (target / RUNS).mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST).is_file() and not (target / MANIFEST).exists():
        shutil.copy2(out / MANIFEST, target / MANIFEST)
    for name in files:
        if (out / name).is_file():
            os.replace(out / name, target / name)
    for rid in run_ids:
        os.replace(run_dir(out, rid), target / RUNS / rid)
    return target


def read_manifest(out: Path) -> dict[str, Any]:
    path = out / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {out} is not a sweep folder "
                                f"(run `loglinear sweep run SPEC --out {out}`)")
    rewrite = f"rerun `loglinear sweep run SPEC --out {out}` (or --dry-run) to write it anew"
    try:
        manifest = json.loads(path.read_text())
    except ValueError as e:
        raise ConfigError(f"{path} is corrupt ({e}); {rewrite}") from None
    runs = manifest.get("runs") if isinstance(manifest, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in runs):
        raise ConfigError(f"{path} is not a sweep manifest (no list of runs with ids); {rewrite}")
    return manifest




def _config(run: Run) -> dict[str, Any]:
    """The resolved configuration without `out_dir` (the run's folder says where it is)."""
    config = dataclasses.asdict(run.config)
    config.pop("out_dir", None)
    return config
