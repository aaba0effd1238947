"""Child processes in the tests: guarded against a hang, never failed for being slow.

A wall-clock timeout is a statement about the machine: on a busy 2-core machine the same child takes several
times as long as on an idle one, tens of times at a low priority beside busy processes. The guard here watches
the CPU time of the child and of its descendants instead (Linux's /proc), and tells the ways a child never ends
apart from a slow one:
- a runaway uses more CPU seconds than its budget `cpu_s`, set far above its work (a loop that never ends);
- a blocked child uses no CPU for STALL_S seconds (a deadlock, a read that never returns); a child that waits
  its turn on a busy machine still gets a share (at nice 19 beside two busy processes per core, about 0.7 %
  of a core: 4 s in STALL_S), far above STALL_CPU_S.
A slow child runs to its end, however slow (a child that sleeps and polls forever is left to pytest's or CI's
own limit: its few CPU seconds look like a starved child's). Where /proc is missing, a wall-clock guard of
WALL_PER_CPU_S seconds per CPU second of the budget stands in, and its message says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

STALL_S = 600.0
STALL_CPU_S = 0.5
WALL_PER_CPU_S = 100.0
POLL_S = 2.0
PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ChildFailed(AssertionError):
    """The guard stopped a child: the message says whether it ran away or hung, and how the machine was."""


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its reaped children) or None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name, in parentheses, may hold spaces
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / TICKS


def _tree(root: int) -> dict[int, float]:
    """The CPU seconds of `root` and of each of its live descendants."""
    stats = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = found
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats and pid not in tree:
            tree[pid] = stats[pid][1]
            frontier += [child for child, (parent, _) in stats.items() if parent == pid]
    return tree


class Guard:
    """Watches a started child; `check()` kills it and raises ChildFailed once it has run away or hung."""

    def __init__(self, proc: subprocess.Popen, cpu_s: float):
        self.proc, self.cpu_s, self.stall_s = proc, cpu_s, STALL_S
        self.started = time.monotonic()
        self.readable = PROC.is_dir() and _stat(proc.pid) is not None
        self.history: list[tuple[float, float]] = []  # (wall, CPU seconds of the tree)

    def cpu(self) -> float:
        return sum(_tree(self.proc.pid).values())

    def check(self) -> None:
        now = time.monotonic()
        wall = now - self.started
        if not self.readable:
            if wall > WALL_PER_CPU_S * self.cpu_s:
                self._fail(f"still running after {wall:.0f} s (a wall-clock guard: this system shows no child's "
                           f"CPU time)")
            return
        cpu = self.cpu()
        self.history.append((now, cpu))
        if cpu > self.cpu_s:
            self._fail(f"ran away: used {cpu:.0f} s of CPU, over its budget of {self.cpu_s:.0f} s, in {wall:.0f} s")
        while len(self.history) > 1 and self.history[1][0] <= now - self.stall_s:
            self.history.pop(0)
        since, cpu_then = self.history[0]
        if now - since >= self.stall_s and cpu - cpu_then < STALL_CPU_S:
            self._fail(f"hung: used {cpu - cpu_then:.1f} s of CPU in the last {now - since:.0f} s "
                       f"({cpu:.0f} s in {wall:.0f} s in all)")

    def _fail(self, what: str) -> None:
        pids = sorted(_tree(self.proc.pid)) if self.readable else [self.proc.pid]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        out, err = self.proc.communicate()
        load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
        raise ChildFailed(f"{self.proc.args!r} {what}; load average {load}\n"
                          f"stdout: {(out or '')[-2000:]}\nstderr: {(err or '')[-3000:]}")


def communicate(proc: subprocess.Popen, *, cpu_s: float, input: str | None = None) -> tuple[str, str]:
    """`proc.communicate()`, guarded."""
    guard = Guard(proc, cpu_s)
    while True:
        try:
            return proc.communicate(input, timeout=POLL_S)
        except subprocess.TimeoutExpired:
            input = None  # sent already: communicate refuses it a second time
            guard.check()


def run(args: list[str], *, cpu_s: float, input: str | None = None, **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True, text=True, ...)`, guarded."""
    stdin = subprocess.PIPE if input is not None else popen.pop("stdin", None)
    proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = communicate(proc, cpu_s=cpu_s, input=input)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def wait_until(proc: subprocess.Popen, condition: Callable[[], bool], *, cpu_s: float) -> bool:
    """Wait, guarded, until `condition()` holds (True) or the child has ended (False)."""
    guard, checked = Guard(proc, cpu_s), time.monotonic()
    while not condition():
        if proc.poll() is not None:
            return condition()
        time.sleep(0.05)
        if time.monotonic() - checked >= POLL_S:
            guard.check()
            checked = time.monotonic()
    return True
