"""The report's selection-stability section in words: each cell's pick with its margin and leave-one-seed-out
agreement (protocol/stability.py), and one sentence over the cells."""

from __future__ import annotations

from collections.abc import Hashable

from loglinear.protocol.results import candidate_text
from loglinear.protocol.stability import Stability
from loglinear.reports.paired import signed


def format_stability(stability: Stability | None) -> str:
    """`0.003 by +0.9 over 0.01, kept 1/2`; `0.003 (the only rate scored)`; `-` without a pick (with several
    selected keys, each candidate as `candidate_text` writes it)."""
    if stability is None:
        return "-"
    pick = candidate_text(stability.keys, stability.pick)
    if stability.runner_up is None:
        return f"{pick} (the only rate scored)"
    runner_up = candidate_text(stability.keys, stability.runner_up)
    over = f"by {signed(100 * stability.margin)} over {runner_up}"  # type: ignore[operator]
    kept = "one seed" if stability.left_out == 0 else f"kept {stability.kept}/{stability.left_out}"
    return f"{pick} {over}, {kept}"


def stability_summary(found: dict[Hashable, Stability]) -> str:
    """One sentence: how many cells keep their pick with any one selection seed left out, and how many by a margin
    under one point."""
    chosen = [s for s in found.values() if s.runner_up is not None]
    tested = [s for s in chosen if s.left_out]
    if not tested:
        return "No cell chose among several learning rates on two selection seeds or more, so no pick can be checked."
    close = sum(abs(s.margin) < 0.01 for s in chosen)  # type: ignore[arg-type]
    return (f"{sum(s.agrees for s in tested)} of {len(tested)} cells that chose among several rates on several seeds "
            f"keep their pick with any one selection seed left out; {close} of {len(chosen)} picks lead the next rate "
            f"by less than 1 point of validation accuracy.")
