"""Sweep specs: validation errors, cartesian expansion with zip groups, stable run ids, dry runs, shipped specs."""

from __future__ import annotations

import dataclasses
import itertools
import math
import signal
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from loglinear.cli import sweep_main
from loglinear.runs.config import CONFIGS_DIR, resolve, to_yaml
from loglinear.sweeps.arguments import override
from loglinear.sweeps.resolver import PointResolver
from loglinear.sweeps.spec import (
    SpecError,
    SweepSpec,
    confirmation_points,
    expand,
    load_spec,
    parse_spec,
    planned_runs,
    points,
)

from .sweep_helpers import TINY_BASE, write_spec

SHIPPED = sorted((CONFIGS_DIR / "sweeps").glob("*.yaml"))


def spec_of(grid=None, zip_groups=None, **base) -> SweepSpec:
    """A parsed spec on the tiny base (without the keys the grid and zip vary)."""
    varied = set(grid or {}) | {k for group in zip_groups or [] for k in group}
    raw = {"name": "t", "base": {k: v for k, v in {**TINY_BASE, **base}.items() if k not in varied}, "grid": grid or {}}
    if zip_groups:
        raw["zip"] = zip_groups
    return parse_spec(raw)


@pytest.mark.parametrize("raw, words", [
    ({"name": "t", "grid": {}, "seeds": [1]}, ["unknown key 'seeds'"]),
    ({"name": "a b"}, ["name"]),
    ({"name": "t", "grid": {"train.lr": 0.1}}, ["grid.train.lr", "list"]),
    ({"name": "t", "grid": {"train.lr": []}}, ["grid.train.lr", "non-empty"]),
    ({"name": "t", "zip": [{"model.d_model": [16, 32], "model.attention_heads": [1]}]}, ["zip[0]", "equal lengths"]),
    ({"name": "t", "grid": {"train.lr": [0.1]}, "zip": [{"train.lr": [0.1]}]}, ["train.lr", "twice"]),
    ({"name": "t", "grid": {"data": ["data/parity.yaml"], "data.seed": [0]}}, ["overlap"]),
    ({"name": "t", "base": {"out_dir": "x"}}, ["base.out_dir"]),
    ({"name": "t", "base": {"preset": "no_such_preset.yaml"}}, ["no_such_preset.yaml", "not found"]),
    ({"name": "t", "report": {"treshold": 0.9}}, ["report", "treshold"]),
    ({"name": "t", "report": {"threshold": 1.5}}, ["report", "threshold", "[0, 1)"]),
    ({"name": "t", "report": {"primary": {"mixer": "mamba2", "baseline": "attention", "test": "t"}}},
     ["report", "primary.test"]),
    ({"name": "t", "report": {"primary": {"mixer": "mamba2"}}}, ["report", "baseline"]),
    ({"name": "t", "protocol": {"selection_seeds": [0, 1]}}, ["protocol", "confirmation_seeds"]),
    ({"name": "t", "protocol": {"selection_seeds": [0, 1], "confirmation_seeds": [1, 2]}}, ["protocol", "[1]"]),
    ({"name": "t", "protocol": {"selection_seeds": [0, 1], "confirmation_seeds": [7] * 6}},
     ["protocol", "confirmation_seeds", "seed 7 more than once"]),
    ({"name": "t", "protocol": {"selection_seeds": [0, 0], "confirmation_seeds": [1]}},
     ["protocol", "selection_seeds", "seed 0 more than once"]),
    ({"name": "t", "protocol": {"selection_seeds": [0], "confirmation_seeds": [1]}, "grid": {"train.seed": [0]}},
     ["train.seed", "protocol"]),
    ({"name": "t", "protocol": {"selection_seeds": 4, "confirmation_seeds": [5]}},
     ["protocol.selection_seeds: must be a list, got 4"]),
    ({"name": "t", "protocol": {"selection_seeds": [0], "confirmation_seeds": "5"}},
     ["protocol.confirmation_seeds: must be a list, got '5'"]),
    ({"name": "t", "report": {"threshold": 0.99, "plateau": 0.995}},
     ["report", "plateau 0.995 is above threshold 0.99"]),
    ({"name": "t", "report": {"threshold": 0.5, "plateau": 0.9}}, ["report", "plateau 0.9 is above threshold 0.5"]),
    ({"name": "t", "report": {"threshold": 0.4, "plateau": 0.5}}, ["report", "plateau 0.5 is above threshold 0.4"]),
    ({"name": "t", "report": {"plateau": 0.995}}, ["report", "plateau 0.995 is above threshold 0.99"]),
])
def test_bad_specs_fail_with_one_line_naming_the_key(raw, words):
    with pytest.raises(SpecError) as error:
        parse_spec(raw)
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_a_protocol_runs_every_point_on_the_selection_seeds_then_the_chosen_points_on_the_confirmation_seeds():
    raw = {"name": "t", "base": TINY_BASE, "grid": {"train.lr": [1e-3, 1e-2]},
           "protocol": {"selection_seeds": [0, 1], "confirmation_seeds": [5, 6, 7]}}
    spec = parse_spec(raw)
    first = expand(spec)
    assert [(r.point["train.lr"], r.point["train.seed"], r.stage) for r in first] == [
        (1e-3, 0, "selection"), (1e-3, 1, "selection"), (1e-2, 0, "selection"), (1e-2, 1, "selection")]
    assert all(r.config.data.seed == r.config.train.seed for r in first)
    # the chosen point, given by two of its selection runs, becomes one configuration on each confirmation seed
    second = expand(spec, confirmation_points(spec, [first[2].point, first[3].point]))
    assert [(r.point["train.lr"], r.config.train.seed, r.config.data.seed, r.stage) for r in second] == [
        (1e-2, 5, 5, "confirmation"), (1e-2, 6, 6, "confirmation"), (1e-2, 7, 7, "confirmation")]
    assert not {r.run_id for r in first} & {r.run_id for r in second}
    assert planned_runs(spec) == len(first) + len(second) == 7
    two_mixers = parse_spec({**raw, "grid": {**raw["grid"], "model.mixer": ["attention", "mamba2"]}})
    assert planned_runs(two_mixers) == 2 * 2 * 2 + 2 * 3
    assert planned_runs(spec_of(grid={"train.lr": [1e-3, 1e-2], "train.seed": [0, 1, 2]})) == 6


def test_typo_in_the_grid_fails_the_whole_sweep_before_any_run():
    spec = spec_of(grid={"model.mixer": ["attention", "mamba2"], "model.d_modle": [16]})
    with pytest.raises(SpecError, match=r"model\.d_modle") as error:
        expand(spec)
    assert "\n" not in str(error.value)
    with pytest.raises(SpecError, match="mamba3"):
        expand(spec_of(grid={"model.mixer": ["attention", "mamba3"]}))


def test_expansion_is_the_cartesian_product_times_the_zip_rows():
    spec = spec_of(
        grid={"model.mixer": ["attention", "mamba2"], "train.lr": [1.0e-3, 3.0e-3, 1.0e-2]},
        zip_groups=[{"model.d_model": [16, 32], "model.attention_heads": [1, 2]}],
    )
    runs = expand(spec)
    assert len(runs) == 2 * 3 * 2
    assert len({r.run_id for r in runs}) == len(runs)
    expected = itertools.product(["attention", "mamba2"], [1.0e-3, 3.0e-3, 1.0e-2], [(16, 1), (32, 2)])
    for run, (mixer, lr, (d_model, heads)) in zip(runs, expected, strict=True):
        assert run.point == {"model.mixer": mixer, "train.lr": lr, "model.d_model": d_model,
                             "model.attention_heads": heads}
        cfg = run.config
        got = (cfg.model.mixer, cfg.train.lr, cfg.model.d_model, cfg.model.attention_heads)
        assert got == (mixer, lr, d_model, heads)
        assert run.args[-4:] == [override(k, v) for k, v in run.point.items()]


def test_run_ids_ignore_key_order_nesting_logger_and_out_dir():
    flat = spec_of(grid={"train.seed": [0, 1]})
    nested = parse_spec({
        "name": "other",
        "base": {"logger": {"wandb": {"mode": "offline"}, "progress": False}, **dict(reversed(TINY_BASE.items()))},
        "grid": {"train.seed": [0, 1]},
    })
    assert [r.run_id for r in expand(flat)] == [r.run_id for r in expand(nested)]
    changed = spec_of(grid={"train.seed": [0, 1]}, **{"train.max_steps": 21})
    assert not {r.run_id for r in expand(changed)} & {r.run_id for r in expand(flat)}


def test_run_ids_are_the_same_in_another_process(tmp_path):
    path = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2"]})
    here = [r.run_id for r in expand(load_spec(path))]
    code = ("import sys; from loglinear.sweeps.spec import expand, load_spec; "
            "print(' '.join(r.run_id for r in expand(load_spec(sys.argv[1]))))")
    other = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert other.stdout.split() == here


@pytest.mark.parametrize("value", [None, True, False, 3, 1.0e-4, 3.0, math.inf, "3", "a b", "it's", "x: y", "{run_id}",
                                   [4, 8], [{}, {"seq_len": 16}], {"a": None}, ["1e-3", None]])
def test_overrides_read_back_as_the_same_value(value):
    text = override("k", value)
    parsed = OmegaConf.to_container(OmegaConf.from_dotlist([text]))["k"]
    assert type(parsed) is type(value) and parsed == value


def test_group_files_in_the_grid_are_found_beside_the_spec_and_in_configs(tmp_path):
    (tmp_path / "my_parity.yaml").write_text("task: parity\ntask_args: {seq_len: 8}\nval_size: 16\ntest_size: 16\n")
    base = {k: v for k, v in TINY_BASE.items() if not k.startswith("data.")}
    grid = {"data": ["my_parity.yaml", "data/s3.yaml"]}
    spec = parse_spec({"name": "t", "base": base, "grid": grid}, tmp_path / "t.yaml")
    assert spec.grid["data"] == [str((tmp_path / "my_parity.yaml").resolve()), "data/s3.yaml"]
    assert [r.config.data.task for r in expand(spec)] == ["parity", "s3"]


def test_resolved_configs_round_trip_through_yaml():
    """The runner hands each run its resolved config.yaml; `loglinear train` must read it back unchanged."""
    grid = {"model.mixer": ["attention", "log_linear_gated_deltanet"], "data.task_args.num_kv_pairs": [1, [1, 2]]}
    for run in expand(spec_of(grid=grid)):
        text = to_yaml(run.config)
        assert to_yaml(resolve(OmegaConf.create(text))) == text


def test_dry_run_lists_the_runs_and_a_bad_spec_exits_2(tmp_path, capsys):
    path = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2"], "train.seed": [0, 1]})
    assert sweep_main(["run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    ids = [r.run_id for r in expand(load_spec(path))]
    assert "4 runs, 0 finished" in out
    for rid in ids:
        assert rid in out
    assert "model.mixer=mamba2 train.seed=1" in out
    assert not (tmp_path / "out").exists()

    bad = write_spec(tmp_path, {"model.d_modle": [16]}, name="bad")
    assert sweep_main(["run", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.d_modle" in err


def diagonal(spec: SweepSpec) -> SweepSpec:
    """A spec whose runs take every value of every varied key (run i takes value i mod n of each axis)."""
    axes = [[{k: v} for v in vs] for k, vs in spec.grid.items()]
    axes += [[dict(zip(group, row, strict=True)) for row in zip(*group.values(), strict=True)] for group in spec.zip]
    columns: dict[str, list] = {}
    for i in range(max(len(axis) for axis in axes)):
        for axis in axes:
            for key, value in axis[i % len(axis)].items():
                columns.setdefault(key, []).append(value)
    return dataclasses.replace(spec, grid={}, zip=[columns])


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_specs_resolve_every_value(path):
    spec = load_spec(path)
    assert spec.name == path.stem
    runs = expand(diagonal(spec))
    seeds = len(spec.protocol.selection_seeds) if spec.protocol else 1
    assert len(runs) == len(next(iter(diagonal(spec).zip[0].values()))) * seeds


def test_shipped_spec_sizes():
    sizes = {p.stem: sum(1 for _ in points(load_spec(p))) for p in SHIPPED}
    assert sizes["demo_cpu"] == 9 and sizes["mqar_paper"] == 840
    assert {"mqar_lambda", "state_tracking", "demo_cpu_pilot"} <= set(sizes)
    paper = load_spec(CONFIGS_DIR / "sweeps" / "mqar_paper.yaml")
    assert paper.grid["model.d_model"] == [16, 32, 64] and paper.grid["train.seed"] == [0, 1, 2, 3, 4]
    assert len(set(paper.zip[0]["model.mixer"])) == 5


def reference_and_fast(spec: SweepSpec) -> tuple[list, list]:
    resolver = PointResolver(spec.preset, spec.base_overrides(), "{run_id}")
    every = list(points(spec))
    return [resolver.reference(p) for p in every], [resolver.resolve(p) for p in every]


@pytest.mark.parametrize("name", ["demo_cpu.yaml", "state_tracking_cpu.yaml", "parity_gdn_confirm_cpu.yaml"])
def test_a_sweeps_runs_resolve_as_loglinear_train_resolves_each(name):
    reference, fast = reference_and_fast(load_spec(CONFIGS_DIR / "sweeps" / name))
    assert fast == reference


def test_group_files_mappings_and_derived_keys_resolve_as_the_reference(tmp_path):
    (tmp_path / "long.yaml").write_text("task: mqar\ntask_args: {vocab_size: 32, seq_len: 16, num_kv_pairs: 2}\n")
    spec = spec_of(grid={"data": [str(tmp_path / "long.yaml"), "data/mqar_cpu.yaml"], "model.vocab_size": [64, 128]},
                   zip_groups=[{"model.mixer": ["attention", "log_linear_mamba2"], "train.lr": [1, 2.5e-3]}],
                   **{"data.seed": 3})
    reference, fast = reference_and_fast(spec)
    assert fast == reference and len(fast) == 8
    assert {c.data.seed for c in fast} == {3} and {c.model.vocab_size for c in fast} == {64, 128}
    assert {type(c.train.lr) for c in fast} == {float}


def test_a_base_without_a_task_resolves_on_the_fast_path_when_the_varied_keys_give_one(monkeypatch):
    """MAD's spec gives data.task only among its varied keys; its 3,960 runs once took over 15 minutes to list
    because every run went the reference way."""
    spec = spec_of(grid={"train.lr": [1e-3, 2e-3]}, zip_groups=[{
        "data.task": ["mqar", "parity"],
        "data.task_args": [{"vocab_size": 32, "seq_len": 16, "num_kv_pairs": 2}, {"seq_len": 16}]}])
    assert "data.task" not in spec.base
    reference, _ = reference_and_fast(spec)
    resolver = PointResolver(spec.preset, spec.base_overrides(), "{run_id}")
    monkeypatch.setattr(resolver, "reference", lambda point: pytest.fail(f"{point} took the reference path"))
    assert [resolver.resolve(p) for p in points(spec)] == reference and len(reference) == 4
    assert {c.data.task for c in reference} == {"mqar", "parity"}
    missing = parse_spec({"name": "t", "base": {k: v for k, v in TINY_BASE.items() if k != "data.task"},
                          "grid": {"train.lr": [1e-3]}})
    with pytest.raises(SpecError, match="data.task is required"):
        expand(missing)


def test_interpolations_and_bad_values_take_the_reference_path(tmp_path):
    spec = spec_of(grid={"train.max_steps": [20, 40]}, **{"train.val_every": "${train.max_steps}"})
    reference, fast = reference_and_fast(spec)
    assert fast == reference and [c.train.val_every for c in fast] == [20, 40]
    bad = spec_of(grid={"train.lr": [1e-3, "fast"]})
    with pytest.raises(SpecError, match=r"run train\.lr=fast: train\.lr: Value 'fast' of type 'str' could not"):
        expand(bad)


def test_an_option_added_later_leaves_the_ids_of_earlier_runs_alone():
    """A key declared ADDED (loglinear/identity.py) is no part of a run's id at its default, and is when set."""
    earlier = [r.run_id for r in expand(spec_of(grid={"model.mixer": ["gated_deltanet"]}))]
    at_default = expand(spec_of(grid={"model.mixer": ["gated_deltanet"]}, **{"model.deltanet_key_dim": None}))
    set_apart = expand(spec_of(grid={"model.mixer": ["gated_deltanet"]}, **{"model.deltanet_key_dim": 12}))
    assert [r.run_id for r in at_default] == earlier != [r.run_id for r in set_apart]


def test_the_demos_run_ids_are_pinned():
    """Ids change only when what a run computes changes: a new option at its default must not move them."""
    ids = [r.run_id for r in expand(load_spec(CONFIGS_DIR / "sweeps" / "demo_cpu.yaml"))]
    assert ids[:3] == ["90fed1596e", "641cf6a920", "4ce93bfd30"]


def test_a_dry_run_into_a_reader_that_stops_ends_quietly():
    """`loglinear sweep run SPEC --dry-run | head -1`: no traceback, the exit status of a shell tool cut off."""
    spec = CONFIGS_DIR / "sweeps" / "mqar_paper.yaml"  # 840 runs: more than a pipe's buffer holds
    command = [sys.executable, "-m", "loglinear", "sweep", "run", str(spec), "--dry-run", "--out", "unused"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"mqar_paper: 840 runs")
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait() == 128 + signal.SIGPIPE, stderr
    assert stderr == ""


def test_dry_run_says_when_the_budget_cannot_label_its_runs(tmp_path, capsys):
    """2 validations (20 steps, every 10) below the default plateau window of 10: every run that ends by its budget
    would be `too short`; with a window of 2 the line goes."""
    path = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2"]})
    assert sweep_main(["run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert ("the budget cannot label its runs: 2 validations (train.max_steps 20, train.val_every 10) below "
            "train.plateau_window 10: a run that ends by its budget is labelled `too short`, neither plateau nor "
            "improving") in capsys.readouterr().out
    path = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2"]}, **{"train.plateau_window": 2})
    assert sweep_main(["run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "cannot label" not in capsys.readouterr().out
