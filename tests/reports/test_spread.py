"""A primary's spread read from the committed study its spec names (reports/spread.py): the standard deviation of
the same comparison's paired differences, recomputed here from the study's results.csv by hand; a typed value that
disagrees, a missing source, a source without its spec and an ambiguous cell refused in one line."""

from __future__ import annotations

import csv
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from loglinear.protocol.power import DesignError
from loglinear.reports.spread import resolve_spread
from loglinear.sweeps.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ROOT / "results" / "mqar_levels_cpu"
GDN_CELL = "deltanet_key_dim=default, state_dim=-, d_model=16"


def by_hand(mixer: str, baseline: str) -> float:
    """mqar_levels_cpu's confirmation pairs of the same-size arms (default key dim, state_dim 8), from its CSV."""
    with open(LEVELS / "results.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["stage"] == "confirmation" and r["model.deltanet_key_dim"] == ""
                and r["model.state_dim"] in ("8", "") and r["mixer"] in (mixer, baseline)]
    scores: dict[str, dict[str, float]] = {}
    for row in rows:
        scores.setdefault(row["seed"], {})[row["mixer"]] = 100 * float(row["test_score"])
    return statistics.stdev(s[mixer] - s[baseline] for s in scores.values()) / 100


def study_spec(folder: Path, primary: dict, name: str = "spread", study: str = "mqar_levels_cpu") -> Path:
    """A spec beside a copy of `study`'s spec and results (the layout of configs/sweeps/ and results/)."""
    sweeps = folder / "configs" / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    source = yaml.safe_load((ROOT / "configs" / "sweeps" / f"{study}.yaml").read_text())
    source["base"]["preset"] = str(ROOT / "configs" / "mqar_cpu.yaml")
    (sweeps / f"{study}.yaml").write_text(yaml.safe_dump(source, sort_keys=False))
    if not (folder / "results" / study).exists():
        shutil.copytree(ROOT / "results" / study, folder / "results" / study)
    spec = {"name": name, "base": dict(source["base"]), "grid": {"model.mixer": ["gated_deltanet",
                                                                                "log_linear_gated_deltanet"]},
            "zip": [{"train.seed": [1, 2, 3], "data.seed": [1, 2, 3]}],
            "report": {"primary": {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet",
                                   "test": "accuracy", **primary}}}
    path = sweeps / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_spread_is_read_from_the_committed_study_and_agrees_with_a_count_by_hand(tmp_path):
    path = study_spec(tmp_path, {"effect": {"difference": 0.05, "sd_source": "results/mqar_levels_cpu",
                                            "sd_cell": GDN_CELL}})
    spec = resolve_spread(load_spec(path))
    expected = by_hand("log_linear_gated_deltanet", "gated_deltanet")
    assert spec.report.primary.effect.sd == pytest.approx(expected, abs=1e-6) and round(expected, 3) == 0.153
    mamba = study_spec(tmp_path, {"effect": {"difference": 0.1, "sd_source": "results/mqar_levels_cpu",
                                             "sd_cell": "deltanet_key_dim=-, state_dim=8, d_model=16"}}, "mamba")
    raw = yaml.safe_load(mamba.read_text())
    raw["report"]["primary"].update(mixer="log_linear_mamba2", baseline="mamba2")
    mamba.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert resolve_spread(load_spec(mamba)).report.primary.effect.sd == pytest.approx(
        by_hand("log_linear_mamba2", "mamba2"), abs=1e-6)


@pytest.mark.parametrize(("effect", "match"), [
    ({"sd": 0.2}, "gives an sd of 0.1528 \\(15.28 points\\), not the typed 0.2"),
    ({"sd_cell": "d_model=99"}, "holds no comparison"),
    ({"sd_source": "results/nowhere"}, "not found"),
    ({"sd_source": "results/mqar_levels_cpu/design.md"}, "is a file, not a committed study: type the sd"),
])
def test_a_spread_that_cannot_be_read_is_refused_in_one_line(tmp_path, effect, match):
    primary = {"effect": {"difference": 0.05, "sd_source": "results/mqar_levels_cpu", "sd_cell": GDN_CELL, **effect}}
    with pytest.raises(DesignError, match=match) as error:
        resolve_spread(load_spec(study_spec(tmp_path, primary)))
    assert "\n" not in str(error.value)


def test_a_comparison_made_in_several_cells_needs_its_cell_named(tmp_path):
    """mamba2_init_cpu compares log-linear Mamba-2 with Mamba-2 under three initialisations."""
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2",
               "effect": {"difference": 0.1, "sd_source": "results/mamba2_init_cpu"}}
    with pytest.raises(DesignError, match="in 3 cells: name one with sd_cell") as error:
        resolve_spread(load_spec(study_spec(tmp_path, primary, study="mamba2_init_cpu")))
    assert "\n" not in str(error.value)


def test_a_typed_spread_that_agrees_is_kept_and_a_pilot_file_keeps_its_typed_value(tmp_path):
    primary = {"effect": {"difference": 0.05, "sd": 0.153, "sd_source": "results/mqar_levels_cpu",
                          "sd_cell": GDN_CELL}}
    assert round(resolve_spread(load_spec(study_spec(tmp_path, primary))).report.primary.effect.sd, 3) == 0.153
    pilot = {"effect": {"difference": 0.05, "sd": 0.3, "sd_source": "results/mqar_levels_cpu/design.md"}}
    assert resolve_spread(load_spec(study_spec(tmp_path, pilot))).report.primary.effect.sd == 0.3


def test_a_source_without_its_spec_beside_this_one_and_a_study_s_own_folder_are_refused(tmp_path):
    path = study_spec(tmp_path, {"effect": {"difference": 0.05, "sd_source": "results/mqar_levels_cpu",
                                            "sd_cell": GDN_CELL}})
    (path.parent / "mqar_levels_cpu.yaml").unlink()
    with pytest.raises(DesignError, match="is not beside this one"):
        resolve_spread(load_spec(path))
    own = study_spec(tmp_path, {"effect": {"difference": 0.05, "sd_source": "results/mqar_levels_cpu"}},
                     "mqar_levels_cpu_again")
    (tmp_path / "results" / "mqar_levels_cpu_again").mkdir()
    (tmp_path / "results" / "mqar_levels_cpu_again" / "results.csv").write_text("run_id\n")
    raw = yaml.safe_load(own.read_text())
    raw["report"]["primary"]["effect"]["sd_source"] = "results/mqar_levels_cpu_again"
    own.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(DesignError, match="this study's own folder"):
        resolve_spread(load_spec(own))
