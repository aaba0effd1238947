"""A pack interrupted and resumed, packed or alone, ends as the same runs never interrupted; so does a run
interrupted alone and resumed in a pack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loglinear.packing.train import train_pack
from loglinear.runs.config import load_run_config, to_yaml
from loglinear.runs.train import train

from .. import child_process
from ..slow_cases import default_and_slow
from .pairs import GRID, assert_same_run, configs, overrides

HERE = Path(__file__).parent
MODEL = "log_linear_mamba2"


def _write(cfgs) -> list[str]:
    paths = []
    for cfg in cfgs:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "config.yaml").write_text(to_yaml(cfg))
        paths.append(str(Path(cfg.out_dir) / "config.yaml"))
    return paths


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    return child_process.run([sys.executable, *args], cpu_s=600, env=env)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    for cfg in configs(root, "alone", MODEL):
        train(cfg)
    return root / "alone"


def _same_as_reference(reference: Path, root: Path) -> None:
    for cfg in configs(root, "packed", MODEL):
        name = Path(cfg.out_dir).name
        assert_same_run(reference / name, root / "packed" / name)


@pytest.mark.parametrize("step", default_and_slow([20, 25], [20]))
def test_a_pack_interrupted_and_resumed_ends_as_one_never_interrupted(tmp_path, reference, step):
    paths = _write(configs(tmp_path, "packed", MODEL))
    stopped = _python(str(HERE / "pack_harness.py"), str(step), "SIGINT", *paths)
    assert stopped.returncode == 130, stopped.stderr
    checkpoint = "last.ckpt" if step % 20 == 0 else "interrupted.ckpt"
    assert all((Path(p).parent / checkpoint).is_file() and not (Path(p).parent / "result.json").exists()
               for p in paths)
    train_pack([load_run_config(path) for path in paths])  # resumed in another process: this one
    _same_as_reference(reference, tmp_path)


def test_a_pack_interrupted_resumes_alone(tmp_path, reference):
    cfgs = configs(tmp_path, "packed", MODEL)
    assert _python(str(HERE / "pack_harness.py"), "25", "SIGTERM", *_write(cfgs)).returncode == 143
    for cfg in cfgs:
        train(cfg)
    _same_as_reference(reference, tmp_path)


def test_runs_interrupted_alone_resume_in_a_pack(tmp_path, reference):
    harness = str(HERE.parent / "runs" / "interrupt_harness.py")
    for seed, lr in GRID:
        args = overrides(tmp_path, "packed", MODEL, (), seed, lr)
        done = _python(harness, args[-1].split("=", 1)[1], "train", "30", "SIGINT", *args[:-1])
        assert done.returncode == 130, done.stderr
    cfgs = configs(tmp_path, "packed", MODEL)
    train_pack(cfgs)
    _same_as_reference(reference, tmp_path)
