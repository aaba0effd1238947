"""The interleaved-layout MQAR study says what its header says: the layout, the arms and their state sizes, the
same three rates for every arm, 16 confirmation seeds and the declared primary comparison."""

from __future__ import annotations

from pathlib import Path

from loglinear.models import build_model
from loglinear.sweeps.spec import expand, load_spec, planned_runs

SPEC = Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "mqar_levels_cpu.yaml"


def test_levels_study_is_interleaved_state_limited_and_declares_its_primary():
    spec = load_spec(SPEC)
    runs = expand(spec)
    assert len(runs) == 42 and planned_runs(spec) == 42 + 7 * 16
    assert spec.protocol.selection_seeds == [0, 9]
    assert spec.protocol.confirmation_seeds == [s for s in range(1, 18) if s != 9]
    assert spec.report.primary.mixer == "log_linear_mamba2" and spec.report.primary.equal_state
    arms: dict[tuple, set] = {}
    sizes = {}
    for run in runs:
        cfg = run.config
        assert cfg.data.task_args["layout"] == "interleaved"
        assert max(s["num_kv_pairs"] for s in cfg.data.eval_sets) == 16 and cfg.model.attention_heads == 1
        arm = (cfg.model.mixer, cfg.model.state_dim, cfg.model.deltanet_key_dim)
        arms.setdefault(arm, set()).add((cfg.train.lr, cfg.train.seed))
        sizes[arm] = build_model(cfg.model).blocks[0].mixer.state_size(64)
    assert len(arms) == 7
    assert all(points == {(lr, s) for lr in (3.0e-3, 1.0e-2, 3.0e-2) for s in (0, 9)} for points in arms.values())
    assert sizes == {
        ("gated_deltanet", 8, None): 448, ("gated_deltanet", 8, 43): 1988, ("log_linear_gated_deltanet", 8, None): 1984,
        ("mamba2", 8, None): 400, ("mamba2", 49, None): 1958, ("log_linear_mamba2", 8, None): 1936,
        ("attention", 8, None): 2048,
    }
