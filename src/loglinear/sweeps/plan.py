"""Which runs a spec plans, whatever their results: its first stage (every point, on each selection seed under a
two-stage protocol); under a protocol also grid extensions (a selection run of one of the grid's configurations
at a learning rate beyond its rates) and confirmation runs (one of the grid's configurations on a confirmation
seed). Which extensions and which confirmation rates a sweep runs follows from its selection runs' results
(protocol/extension.py, protocol/confirmation.py); what can be told without them is whether a recorded run is one
of those kinds."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from loglinear.sweeps.spec import Run, SweepSpec
from loglinear.sweeps.spec_keys import CONFIRMATION, LR_KEY, SEED_KEYS, SELECTION


def configuration(point: Mapping[str, Any]) -> str:
    """A point's configuration: its varied values but the learning rate and the seeds (as sorted JSON)."""
    return json.dumps({k: v for k, v in point.items() if k != LR_KEY and k not in SEED_KEYS}, sort_keys=True,
                      default=str)


def stray(spec: SweepSpec, stage_one: Sequence[Run], run: Run) -> str | None:
    """Why `run` (a point resolved under `spec`, with the stage it was recorded with) is no run the spec plans, in
    words; None when it is one: a run of `stage_one` (`expand(spec)`), a grid extension or a confirmation run."""
    first = {i: r for r in stage_one for i in r.ids}
    known = next((first[i] for i in run.ids if i in first), None)
    if known is not None:
        return None if run.stage == known.stage else \
            f"its stage is {_stage(run.stage)} where the spec gives {_stage(known.stage)}"
    if spec.protocol is None:
        return "it is no point of the spec's grid"
    rates = {configuration(r.point): set() for r in stage_one}
    for r in stage_one:
        rates[configuration(r.point)].add(r.point.get(LR_KEY))
    if configuration(run.point) not in rates:
        return "its configuration is none of the spec's grid"
    seed, protocol = run.point.get(SEED_KEYS[0]), spec.protocol
    if run.stage == SELECTION and seed in protocol.selection_seeds:
        return None if run.point.get(LR_KEY) not in rates[configuration(run.point)] else "it is no point of the grid"
    if run.stage == CONFIRMATION and seed in protocol.confirmation_seeds:
        return None
    return f"seed {seed} is no {run.stage or 'selection or confirmation'} seed of the spec's protocol"


def _stage(stage: str | None) -> str:
    return repr(stage) if stage else "blank"
