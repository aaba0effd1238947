"""The declared primary comparison is checked against the sweep's arms, cells and test lengths before anything
runs (`sweep run`, `--dry-run` too), not refused by the report after all the compute."""

from __future__ import annotations

import pytest

from loglinear.cli import main
from loglinear.protocol.primary_check import check_primary
from loglinear.sweeps.spec import SpecError, expand, load_spec

from ..sweeps.sweep_helpers import write_spec

GRID = {"model.mixer": ["mamba2", "log_linear_mamba2"], "train.seed": list(range(6))}
PAIR = {"mixer": "log_linear_mamba2", "baseline": "mamba2"}


def spec_with(tmp_path, primary, **report):
    """A spec whose primary is `primary`, declared exploratory: what is checked here is the comparison it names, not
    its power."""
    path = write_spec(tmp_path, GRID)
    primary = {"exploratory": True, **primary}
    text = path.read_text() + f"report: {dict(report, primary=primary)!r}\n".replace("'", '"')
    path.write_text(text.replace("None", "null"))
    return path


@pytest.mark.parametrize("primary, words", [
    ({"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet"},
     "log_linear_gated_deltanet vs gated_deltanet is not a comparison of this sweep"),
    ({"mixer": "mamba2", "baseline": "mamba2"}, "mamba2 vs mamba2 is not a comparison"),
    ({"mixer": "mamba2", "baseline": "log_linear_mamba2"}, "its comparisons: log_linear_mamba2 vs mamba2"),
    ({**PAIR, "cell": "d_model=64"}, "cell 'd_model=64' is not a cell of log_linear_mamba2 vs mamba2; its cells: "
                                     "d_model=16"),
    ({**PAIR, "test": "accuracy", "length": 16}, "length 16 is not a test length the report compares at; valid: none"),
    ({**PAIR, "test": "escaped"}, "the escaped test needs report.plateau"),
])
def test_a_primary_the_report_would_refuse_is_refused_before_anything_runs(tmp_path, capsys, primary, words):
    path = spec_with(tmp_path, primary)
    spec = load_spec(path)
    with pytest.raises(SpecError, match="report.primary: ") as error:
        check_primary(spec, expand(spec))
    assert words in str(error.value) and "\n" not in str(error.value)
    out = tmp_path / "out"
    assert main(["sweep", "run", str(path), "--out", str(out), "--dry-run"]) == 2
    assert words in capsys.readouterr().err and not out.exists()
    assert main(["sweep", "wandb", str(path), "--out", str(out)]) == 2
    assert words in capsys.readouterr().err and not out.exists()


def test_a_run_event_declared_at_a_test_length_is_refused_with_exit_status_2(tmp_path, capsys):
    path = spec_with(tmp_path, {**PAIR, "test": "solved", "length": 16})
    out = tmp_path / "out"
    assert main(["sweep", "run", str(path), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "primary.test solved is the run's (on validation), the same at every test length" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_primary_of_the_sweep_passes(tmp_path):
    spec = load_spec(spec_with(tmp_path, {**PAIR, "cell": "d_model=16", "test": "escaped"}, plateau=0.5))
    check_primary(spec, expand(spec))
