"""benchmarks/ is a package run from the repository root: every module imports as `benchmarks.NAME`, the kernel
benchmark's peers are one registry, and a script starts as `python -m benchmarks.NAME`."""

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

import benchmarks
from benchmarks.kernel_inputs import SMOKE_SHAPES
from benchmarks.kernel_peers import PEERS, Libraries, methods_for
from benchmarks.kernels import table

from . import child_process

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__))
NO_FLA = Libraries(missing={"fla": "ModuleNotFoundError: No module named 'fla'",
                            "mamba_ssm": "ModuleNotFoundError: No module named 'mamba_ssm'"})


def test_every_script_is_a_module_of_the_package():
    scripts = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
    assert MODULES == scripts


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    importlib.import_module(f"benchmarks.{name}")


def test_the_peer_registry_lists_its_peers_and_names_them_on_a_miss():
    assert PEERS.names() == ["ours", "ours_linear", "fla_ll", "mamba2", "fla_gdn", "sdpa"]
    with pytest.raises(ValueError, match="unknown kernel peer 'flash'; valid: ours, ours_linear, fla_ll"):
        PEERS["flash"]


@pytest.mark.parametrize(("variant", "peers"), [
    ("mamba2", ["ours", "ours_linear", "fla_ll", "mamba2", "sdpa"]),
    ("gdn", ["ours", "ours_linear", "fla_gdn", "sdpa"]),
])
def test_each_variant_times_its_peers_and_a_missing_library_is_a_cell(variant, peers):
    methods = methods_for(variant, SMOKE_SHAPES[variant, "paper"], NO_FLA, torch.device("cpu"))
    assert list(methods) == peers
    for name, method in methods.items():
        runnable = name in ("ours", "ours_linear", "sdpa")
        assert (method.setup is not None) == runnable, name
        assert method.reason == ("" if runnable else "not installed"), name


def test_the_table_has_a_row_per_peer_then_the_ratios_of_those_measured():
    methods = methods_for("gdn", SMOKE_SHAPES["gdn", "mqar"], NO_FLA, torch.device("cpu"))
    res = {"ours": {64: 3.0}, "ours_linear": {64: 2.0}, "fla_gdn": {64: "not installed"}, "sdpa": {64: 1.5}}
    rows = [line.split(" | ") for line in table("gdn", methods, res, [64]).splitlines()[2:]]
    assert [(r[0].lstrip("| "), r[1].rstrip(" |")) for r in rows] == [
        ("ours log-linear (triton)", "3.00"),
        ("ours linear (triton, lam=None)", "2.00"),
        ("linear GDN (fla chunk_gated_delta_rule)", "not installed"),
        ("SDPA flash attention (causal, 2 heads x 16)", "1.50"),
        ("**ours / ours linear**", "1.50"),
        ("**ours / fla linear GDN**", "-"),
        ("**ours / SDPA**", "2.00"),
    ]


def test_a_script_runs_as_a_module_from_the_repository_root():
    out = child_process.run([sys.executable, "-m", "benchmarks.operator_cpu", "--help"], cwd=ROOT,
                            cpu_s=120)
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout


def test_the_compile_benchmark_says_whether_the_machine_was_idle():
    from benchmarks.compile_cpu import machine_note

    assert "otherwise idle" in machine_note("0.41")
    assert "shared the machine" in machine_note("1.47")
    assert "unknown" in machine_note("?")


def test_the_packing_benchmark_runs_its_smoke_size():
    done = child_process.run([sys.executable, "-m", "benchmarks.packing", "--quick"], cwd=ROOT, cpu_s=600)
    assert done.returncode == 0, done.stderr
    assert "mamba2 | 16 | alone |" in done.stdout and "mamba2 | 16 | 2 |" in done.stdout


def test_the_step_clock_counts_the_training_steps_after_the_skipped_ones_and_none_holding_a_validation(
        tmp_path, monkeypatch, capsys):
    from benchmarks import train_step

    run = ["data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8",
           "data.task_args.num_kv_pairs=1", "data.batch_size=8", "data.val_size=8", "data.test_size=8",
           "model.mixer=attention", "model.d_model=16", "model.attention_heads=1", "train.max_steps=8",
           "train.val_every=4", "train.early_stop_threshold=null", "logger.wandb.mode=disabled",
           "logger.progress=false", f"out_dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", ["train_step", "--skip", "2", *run])
    train_step.main()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    # steps 2, 4, 5 and 6 of 0-7: the first two are skipped, step 3 ends in the validation after the fourth step,
    # and step 7 has no next step to end it
    assert line.startswith("steps=4 cpu_ms=") and "minor_faults=" in line


def test_the_least_disturbed_step_is_the_fastest_repeat_of_each_step_not_of_each_repeat():
    from benchmarks.preset_step import CONFIGS, least_disturbed

    # the base's repeats are each slow at a different step: per step the fastest is 0.1 s, per repeat the mean 0.15
    runs = {("m", c): [{1: 0.05, 2: 0.05}] * 2 for c in CONFIGS}
    runs["m", "base"] = [{1: 0.2, 2: 0.1}, {1: 0.1, 2: 0.2}]
    row = least_disturbed(runs, ["m"]).splitlines()[2]
    assert row == "| `m` | 100.0 | " + " | ".join(["50.0: 2.00x"] * (len(CONFIGS) - 1)) + " |"
