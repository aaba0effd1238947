"""What `sweep run --dry-run --pack N` says of a sweep's GPU time: its packs' training steps at the rates the packing
benchmark measured on a GPU (benchmarks/RESULTS.md, section "packing: training throughput", which
`python -m benchmarks.packing` rewrites), or plainly that no GPU figure exists.

A pack trains until its longest run's budget; early stopping only shortens it. The figures are the training step
alone (forward, loss, backward, optimiser at 256 tokens with 64 scored positions a sequence): validation, test,
making the data and start-up are not in them, and shorter sequences (a length mixture) cost no more than 256 tokens.
A pack whose size the benchmark did not measure takes the run-steps/s of the largest measured pack below it (packing
gains with size on a GPU, so that overstates the time), of the smallest above it when there is none below.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loglinear.sweeps.spec import Run, SweepSpec, confirmation_points, expand, points
from loglinear.sweeps.spec_keys import SELECTION, seed_point

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "RESULTS.md"
SECTION = "packing: training throughput"


@dataclass(frozen=True)
class PackingFigures:
    """The GPU packing benchmark's run-steps/s by (mixer, d_model, pack size; 0: a run alone), at `batch`."""

    machine: str
    date: str
    batch: int
    rates: dict[tuple[str, int, int], float]

    def rate(self, mixer: str, d_model: int, size: int) -> tuple[float, int] | None:
        """Run-steps/s for a pack of `size` runs (1: a run alone) and the pack size it was measured at (0: alone)."""
        if size == 1 and (mixer, d_model, 0) in self.rates:
            return self.rates[mixer, d_model, 0], 0
        measured = sorted(n for m, d, n in self.rates if m == mixer and d == d_model and n > 0)
        if not measured:
            return None
        below = [n for n in measured if n <= size]
        at = below[-1] if below else measured[0]
        return self.rates[mixer, d_model, at], at


def read_figures(path: Path | None = None) -> PackingFigures | None:
    """The section's figures in `path` (default RESULTS) when it holds a GPU measurement, else None (no file, no
    section, a CPU's)."""
    try:
        text = (path or RESULTS).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    section = re.search(rf"<!-- begin:{re.escape(SECTION)} -->(.*?)<!-- end:{re.escape(SECTION)} -->", text, re.S)
    if section is None:
        return None
    body = section.group(1)
    machine = re.search(r"^- machine: (.*)$", body, re.M)
    if machine is None or ", GPU " not in machine.group(1):
        return None
    date = re.search(r"^- date: (.*)$", body, re.M)
    batch = re.search(r"\bbatch (\d+)", body)
    rates = {}
    for mixer, d_model, pack, rate in re.findall(r"^\| (\w+) \| (\d+) \| (alone|\d+) \| ([\d.,]+) \|", body, re.M):
        rates[mixer, int(d_model), 0 if pack == "alone" else int(pack)] = float(rate.replace(",", ""))
    if batch is None or not rates:
        return None
    return PackingFigures(machine.group(1).split(", GPU ")[-1], date.group(1) if date else "undated",
                          int(batch.group(1)), rates)


def stage_seconds(jobs: Sequence[Sequence[Run]], figures: PackingFigures) -> tuple[float, list[str]]:
    """The GPU seconds of the training steps of `jobs` (packs, one after another), and a line for each kind of pack
    that no figure covers (another mixer, d_model or batch size than measured), which the sum leaves out."""
    seconds, uncovered = 0.0, Counter()
    for job in jobs:
        model = job[0].config.model
        batch = job[0].config.data.batch_size
        found = figures.rate(model.mixer, model.d_model, len(job)) if batch == figures.batch else None
        if found is None:
            uncovered[f"{model.mixer} at d_model {model.d_model}, batch {batch}, pack of {len(job)}"] += 1
            continue
        rate, _ = found
        seconds += max(r.config.train.max_steps for r in job) * len(job) / rate
    return seconds, [kind if n == 1 else f"{kind} ({n} packs)" for kind, n in uncovered.items()]


def describe_figures(figures: PackingFigures | None) -> str:
    if figures is None:
        return (f"GPU time: no GPU figure (benchmarks/RESULTS.md's \"{SECTION}\" holds no GPU measurement: run "
                "`python -m benchmarks.packing` on the GPU); not estimated")
    return (f"GPU time of the training steps alone, from benchmarks/RESULTS.md's \"{SECTION}\" ({figures.machine}, "
            f"{figures.date}, batch {figures.batch}); validation, test, data and start-up not included")


def gpu_time_lines(spec: SweepSpec, jobs: list[list[Run]], packs: Callable[[list[Run]], list[list[Run]]],
                   figures: PackingFigures | None) -> list[str]:
    """The dry run's lines on GPU time: the listed unfinished runs' packs (`jobs`), and under a protocol the
    confirmation stage and one grid-extension round, packed by `packs` as the sweep will pack them (a confirmation
    run's pack does not depend on which learning rate was selected, so any candidate stands in for it)."""
    lines = [describe_figures(figures)]
    if figures is None:
        return lines
    stages = [("these unfinished runs", jobs)]
    if spec.protocol is not None:
        chosen = _one_candidate_each(spec)
        confirmation = expand(spec, confirmation_points(spec, chosen))
        extension = expand(spec, [({**p, **seed_point(s)}, SELECTION) for p in chosen
                                  for s in spec.protocol.selection_seeds])
        stages += [(f"confirmation, {len(confirmation)} runs", packs(confirmation)),
                    (f"each grid-extension round, if any, at most {len(extension)} runs", packs(extension))]
    for name, stage in stages:
        seconds, missing = stage_seconds(stage, figures)
        gap = f"; no figure for {'; '.join(missing)} (not counted)" if missing else ""
        lines.append(f"  {name}: {len(stage)} packs, {seconds / 60:.1f} GPU minutes{gap}")
    return lines


def _one_candidate_each(spec: SweepSpec) -> list[dict]:
    """One point of each configuration the report selects a candidate for (the first of its candidates)."""
    selected = set(spec.report.select)
    chosen: dict[str, dict] = {}
    for point in points(spec):
        chosen.setdefault(json.dumps({k: v for k, v in point.items() if k not in selected}, sort_keys=True,
                                     default=str), point)
    return list(chosen.values())
