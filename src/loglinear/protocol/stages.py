"""What a two-stage sweep trains after its first stage, told before anything runs (`sweep run --dry-run`): the
grid extension it may make (protocol/extension.py) and the confirmation runs (protocol/confirmation.py), which
follow from the selection runs' results."""

from __future__ import annotations

from loglinear.protocol.extension import extendable
from loglinear.sweeps.spec import Run, SweepSpec, planned_runs


def later_stages(spec: SweepSpec, runs: list[Run]) -> str | None:
    """One line: the grid extension and the confirmation runs to come after the selection runs `runs`; None for a
    spec without a protocol."""
    if spec.protocol is None:
        return None
    seeds = ", ".join(map(str, spec.protocol.confirmation_seeds))
    if not extendable(spec):
        extensions = "no grid extension (each cell has a single learning rate: no pick sits at an edge)"
    elif spec.protocol.extensions == 0:
        extensions = "no grid extension (protocol.extensions: 0; an edge pick is marked, not extended)"
    else:
        extensions = (f"for each cell whose pick sits at an edge of its learning rates, up to "
                      f"{spec.protocol.extensions} more beyond it on the selection seeds")
    more = planned_runs(spec) - len(runs)
    steps = more * max((r.config.train.max_steps for r in runs), default=0)
    return (f"then, once these selection runs are done: {extensions}; then each cell's "
            f"selected learning rate on the confirmation seeds {seeds} "
            f"({more} runs more, {steps:,} run-steps at most, without extensions)")
