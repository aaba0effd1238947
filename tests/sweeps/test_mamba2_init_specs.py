"""The Mamba-2 initialisation studies: the design their headers state."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglinear.sweeps.spec import expand, load_spec, planned_runs

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
INIT_KEYS = ("A_init", "in_proj_std", "out_proj_init", "conv_bias_init")
DEFAULTS = ("uniform", 0.02, "normal", "uniform")
INITS = {DEFAULTS, ("arange", 0.02, "normal", "uniform"), ("arange", 0.1, "fan_in_uniform", "zero")}
"""The defaults, A = 1..H alone, and Hugging Face transformers' rules."""


@pytest.mark.parametrize(("name", "rates", "total", "steps"), [
    ("mamba2_init_cpu", (3.0e-3, 1.0e-2, 3.0e-2), 128, 5000),
    ("mamba2_init_parity_cpu", (1.0e-3, 3.0e-3, 1.0e-2, 3.0e-2), 144, 4000),
])
def test_each_mamba2_init_arm_with_its_log_linear_twin_and_the_references_at_defaults(name, rates, total, steps):
    """Mamba-2 and log-linear Mamba-2 under each of the three initialisations, Gated DeltaNet and attention at the
    defaults; every arm on the same rates and selection seeds; confirmation seeds enough for an exact McNemar
    test of the declared primary to reach p < 0.05; the primary's cell is the transformers initialisation."""
    spec = load_spec(CONFIGS / "sweeps" / f"{name}.yaml")
    runs = expand(spec)
    arms: dict[tuple, set[tuple[float, int]]] = {}
    for run in runs:
        model, train = run.config.model, run.config.train
        arm = (model.mixer, tuple(getattr(model, key) for key in INIT_KEYS))
        arms.setdefault(arm, set()).add((train.lr, train.seed))
        assert train.max_steps == steps and train.seed == run.config.data.seed
    expected = {(mixer, init) for mixer in ("mamba2", "log_linear_mamba2") for init in INITS}
    assert set(arms) == expected | {("gated_deltanet", DEFAULTS), ("attention", DEFAULTS)}
    assert all(points == {(lr, s) for lr in rates for s in spec.protocol.selection_seeds} for points in arms.values())
    confirmation = spec.protocol.confirmation_seeds
    assert len(confirmation) >= 8 and 2 * 0.5 ** len(confirmation) < 0.05
    assert not set(confirmation) & {0, 1, 2}  # the pilots' seeds
    per_arm = len(rates) * len(spec.protocol.selection_seeds) + len(confirmation)
    assert planned_runs(spec) == total == len(arms) * per_arm
    primary = spec.report.primary
    assert (primary.mixer, primary.baseline) == ("log_linear_mamba2", "mamba2")
    if primary.length is not None:  # parity: declared as test accuracy above 99% at that length, the event `above`
        assert primary.test == "above"
    assert primary.cell.startswith("A_init=arange, in_proj_std=0.1, out_proj_init=fan_in_uniform, conv_bias_init=zero")
