"""Run ids: an option added to the configuration after runs were made leaves their ids alone at its default; the
keys that only label how a run ended are no part of them; every committed run is found under the id it was
recorded with; a field added to the configuration, declared so, leaves every committed id alone."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from loglinear.identity import ADDED, EXCLUDED, with_role
from loglinear.models import ModelConfig
from loglinear.runs import config as run_config
from loglinear.runs.config import (
    CONFIGS_DIR,
    ID_LABELS,
    RunConfig,
    config_id,
    legacy_run_id,
    load_run_config,
    run_id,
)

ROOT = Path(__file__).resolve().parents[2]
ADDED_KEYS = with_role(RunConfig, ADDED)

PRESET = CONFIGS_DIR / "mqar_cpu.yaml"
SET_APART = {"model.init": "authors", "model.A_init": "arange", "model.A_init_min": 2.0, "model.A_init_max": 8.0,
             "model.in_proj_std": 0.1,
             "model.out_proj_init": "fan_in_uniform", "model.conv_bias_init": "zero", "model.deltanet_key_dim": 12,
             "model.mixer_options": "{width: 3}", "data.train_size": 1000,
             "train.compile": "true", "train.cuda_graphs": "true", "train.fused_loss": "true",
             "train.threshold_evals": 2, "model.linear_attention_heads": 2, "model.retnet_heads": 2}
MIXER = {"model.mixer_options": "causal_conv_mixer:CausalConvMixer", "model.linear_attention_heads": "linear_attention",
         "model.retnet_heads": "retnet"}
"""The mixer that reads the key, where mamba2 does not (a mixer with options: examples/causal_conv_mixer.py)."""
NEEDS = {"train.cuda_graphs": ["train.compile=true"]}
"""What a key needs set for its value to be valid (in all three configs compared)."""


def test_every_option_added_later_is_tried_below():
    assert sorted(SET_APART) == sorted(ADDED_KEYS)


@pytest.mark.parametrize("key", sorted(ADDED_KEYS))
def test_an_option_at_its_default_is_no_part_of_the_id_and_set_it_is(key, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    mixer = f"model.mixer={MIXER.get(key, 'mamba2')}"
    needs = NEEDS.get(key, [])
    earlier = run_id(load_run_config(PRESET, [mixer, *needs]))
    default = "null" if ADDED_KEYS[key] is None else ADDED_KEYS[key]
    at_default = run_id(load_run_config(PRESET, [mixer, *needs, f"{key}={default}"]))
    set_apart = run_id(load_run_config(PRESET, [mixer, *needs, f"{key}={SET_APART[key]}"]))
    assert at_default == earlier != set_apart


@pytest.mark.parametrize("key, value", [("train.plateau_window", 20), ("train.plateau_min_delta", 0.02)])
def test_the_labels_of_a_runs_end_are_no_part_of_its_id_but_its_earlier_id_is_kept(key, value):
    """A study that only labels its runs' ends otherwise (plateau or improving) finds the same runs; a run made
    while the labels were part of the id, away from their defaults, keeps that id as `legacy_run_id`."""
    default = load_run_config(PRESET, [f"{key}={ID_LABELS[key]}"])
    relabelled = load_run_config(PRESET, [f"{key}={value}"])
    assert run_id(relabelled) == run_id(default) == run_id(load_run_config(PRESET))
    assert legacy_run_id(default) is None
    assert legacy_run_id(relabelled) == run_id(relabelled, legacy=True) not in (None, run_id(default))


def recorded_configs() -> list[tuple[str, str, dict]]:
    """Every run configuration a committed study records, with the id it is recorded under and where: its
    manifest's entries, and the config.yaml and result.json of each run folder it keeps. (A study that keeps only its
    results.csv records its runs' varied values, not their configurations: its ids are recomputed from its spec,
    tests/reports/test_results_csv.py, `test_every_committed_study_is_the_whole_study_its_spec_plans`.)"""
    found = []
    for manifest in sorted(ROOT.glob("results/*/manifest.json")):
        runs = json.loads(manifest.read_text())["runs"]
        found += [(f"{manifest} {run['id']}", run["id"], run["config"]) for run in runs]
    for folder in sorted(ROOT.glob("results/*/runs/*")):
        found.append((str(folder / "config.yaml"), folder.name, yaml.safe_load((folder / "config.yaml").read_text())))
        result = json.loads((folder / "result.json").read_text())
        found.append((str(folder / "result.json"), folder.name, result["config"]))
    return found


RECORDED = recorded_configs()


def test_the_committed_studies_record_runs():
    assert len(RECORDED) >= 3 * 56 * 2


def ids(config: dict) -> set[str]:
    """The ids a run of `config` is found under: its id and its legacy one (`legacy_run_id`)."""
    return {config_id(config), config_id(config, legacy=True)}


def test_every_committed_run_is_found_under_the_id_it_was_recorded_with():
    """The id recomputed from each recorded configuration is the recorded one (or, for a run made while the labels of
    its end were part of the id, away from their defaults, its legacy id)."""
    assert [where for where, rid, config in RECORDED if rid not in ids(config)] == []


def extended(metadata) -> type:
    """A copy of RunConfig whose model group has one field more, `new_option` (default 3, `metadata`)."""
    option = dataclasses.field(default=3, metadata=metadata)
    model = dataclasses.make_dataclass("ModelConfig", [("new_option", int, option)], bases=(ModelConfig,))
    return dataclasses.make_dataclass("RunConfig", [("model", model, dataclasses.field(default_factory=model))],
                                      bases=(RunConfig,))


def with_new_option(config: dict, value) -> dict:
    return {**config, "model": {**config["model"], "new_option": value}}


def test_a_field_added_later_at_its_default_leaves_every_committed_id_alone(monkeypatch):
    monkeypatch.setattr(run_config, "RunConfig", extended(ADDED))
    assert [where for where, rid, config in RECORDED if rid not in ids(with_new_option(config, 3))] == []
    assert [where for where, rid, config in RECORDED if rid in ids(with_new_option(config, 4))] == []


def test_a_field_without_a_role_is_part_of_the_id(monkeypatch):
    monkeypatch.setattr(run_config, "RunConfig", extended({}))
    assert [where for where, rid, config in RECORDED if rid in ids(with_new_option(config, 3))] == []


def test_an_excluded_field_is_no_part_of_the_id_at_any_value(monkeypatch):
    monkeypatch.setattr(run_config, "RunConfig", extended(EXCLUDED))
    assert [where for where, rid, config in RECORDED
            if any(rid not in ids(with_new_option(config, value)) for value in (3, 4, None))] == []
