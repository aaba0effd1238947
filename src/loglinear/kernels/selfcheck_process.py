"""The self-check on a CUDA device runs in a child process: a kernel fault there cannot end or poison the caller.

An illegal memory access leaves the process's CUDA context unusable, and a hung kernel never returns; in a
child (kernels/selfcheck_child.py), either becomes a failed verdict (its exit status or the time limit)
and the caller goes on with `chunk`. The child prints the outcome as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD_TIMEOUT_S = 1200.0  # compiling every kernel variant for a new GPU takes minutes; a hang takes forever


def run_check_in_child(device: str, dtype: str, timeout_s: float = CHILD_TIMEOUT_S) -> tuple[str | None, str]:
    """(failure or None, closest) of the self-check of `device` in `dtype` ("cuda:0", "bfloat16"), in a child."""
    return outcome_of([sys.executable, "-m", "loglinear.kernels.selfcheck_child", device, dtype], timeout_s)


def outcome_of(argv: list[str], timeout_s: float) -> tuple[str | None, str]:
    """Run the child `argv`; its last stdout line is the outcome, anything else is a failure that says why."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"the check did not finish within {timeout_s:.0f} s (it runs in a child process)", ""
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            found = json.loads(lines[-1])
            return found["failure"], found["closest"]
        except (ValueError, KeyError, TypeError):
            pass
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
    return f"the check's child process ended with exit status {done.returncode}: {last}", ""
