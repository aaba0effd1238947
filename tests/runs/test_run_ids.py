"""Run ids: an option added to the configuration after runs were made leaves their ids alone at its default; the
keys that only label how a run ended are no part of them."""

from pathlib import Path

import pytest

from loglinear.runs.config import (
    CONFIGS_DIR,
    ID_LABELS,
    ID_OMITTED_AT_DEFAULT,
    legacy_run_id,
    load_run_config,
    run_id,
)

PRESET = CONFIGS_DIR / "mqar_cpu.yaml"
SET_APART = {"model.init": "authors", "model.A_init": "arange", "model.A_init_min": 2.0, "model.A_init_max": 8.0,
             "model.in_proj_std": 0.1,
             "model.out_proj_init": "fan_in_uniform", "model.conv_bias_init": "zero", "model.deltanet_key_dim": 12,
             "model.mixer_options": "{width: 3}", "data.train_size": 1000,
             "train.compile": "true", "train.cuda_graphs": "true",
             "train.threshold_evals": 2}
MIXER = {"model.mixer_options": "causal_conv_mixer:CausalConvMixer"}
"""The mixer that reads the key, where mamba2 does not (a mixer with options: examples/causal_conv_mixer.py)."""
NEEDS = {"train.cuda_graphs": ["train.compile=true"]}
"""What a key needs set for its value to be valid (in all three configs compared)."""


@pytest.mark.parametrize("key", sorted(ID_OMITTED_AT_DEFAULT))
def test_an_option_at_its_default_is_no_part_of_the_id_and_set_it_is(key, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    mixer = f"model.mixer={MIXER.get(key, 'mamba2')}"
    needs = NEEDS.get(key, [])
    earlier = run_id(load_run_config(PRESET, [mixer, *needs]))
    default = "null" if ID_OMITTED_AT_DEFAULT[key] is None else ID_OMITTED_AT_DEFAULT[key]
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
