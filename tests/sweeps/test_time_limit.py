"""`sweep run --time-limit S`: a study spread over commands of bounded length, each ending with a progress line and
the status that says "not finished, run again", the next resuming where the last stopped."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from loglinear.cli import sweep_main
from loglinear.runs.config import ConfigError
from loglinear.sweeps import runner
from loglinear.sweeps.commands import Launch
from loglinear.sweeps.runner import SweepOutcome, run_local
from loglinear.sweeps.spec import expand, load_spec

from .sweep_helpers import sweep_cli, write_spec


def test_a_spent_time_limit_starts_nothing_and_says_the_sweep_is_not_finished(tmp_path):
    runs = expand(load_spec(write_spec(tmp_path, {"train.seed": [0, 1]})))
    outcome = run_local(runs, tmp_path / "out", workers=1, deadline=time.monotonic())
    assert outcome.timed_out and outcome.interrupted
    assert set(outcome.statuses.values()) == {"pending"}
    assert not (tmp_path / "out" / "runs").exists()


def test_the_time_limit_is_the_local_launcher_s():
    with pytest.raises(ConfigError, match="--time-limit is for the local launcher"):
        Launch("submitit", deadline=time.monotonic() + 60)


class _Clock:
    """The runner's `time`, whose clock jumps past any time limit once `reached()` holds: the limit falls when the
    test chooses, on a slow machine as on a fast one."""

    def __init__(self, reached: Callable[[], bool]) -> None:
        self.reached, self.jumped = reached, False

    def monotonic(self) -> float:
        self.jumped = self.jumped or self.reached()
        return time.monotonic() + (LIMIT_S if self.jumped else 0.0)

    def __getattr__(self, name: str):
        return getattr(time, name)


LIMIT_S = 3600
"""The sweep's --time-limit: longer than the runs take, so only the clock's jump reaches it."""


def test_a_time_limited_sweep_stops_its_runs_with_their_checkpoints_and_the_next_command_resumes(
        tmp_path, monkeypatch, capsys):
    # the limit falls once the pack has saved a checkpoint, when its runs have most of their 500 steps ahead
    spec = write_spec(tmp_path, {"train.seed": [0, 1, 2]}, **{"train.max_steps": 500, "train.val_every": 10,
                                                               "train.early_stop_threshold": None})
    out = tmp_path / "out"
    folders = [out / "runs" / r.run_id for r in expand(load_spec(spec))]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(runner, "time", _Clock(lambda: all((f / "last.ckpt").is_file() for f in folders[:2])))
    argv = ["run", str(spec), "--out", str(out), "--workers", "1", "--pack", "2"]
    assert sweep_main([*argv, "--time-limit", str(LIMIT_S)]) == 75
    err = capsys.readouterr().err
    assert "time limit reached, not finished" in err and "run the same command again" in err
    assert "[tiny] done 0, diverged 0, failed 0, running 0, pending 3 / total 3" in err
    assert not any((f / "result.json").exists() for f in folders)
    assert not (out / "table.md").exists()
    paused = [f for f in folders if (f / "interrupted.ckpt").is_file() or (f / "last.ckpt").is_file()]
    assert paused == folders[:2]  # the pack of two saved; the third run had not started
    monkeypatch.undo()

    second = sweep_cli(*argv, env={"OMP_NUM_THREADS": "1"})
    assert second.returncode == 0, second.stderr
    for folder in folders:
        assert json.loads((folder / "result.json").read_text())["status"] == "max_steps"
    for folder in folders:  # the pack's runs trained in two commands, the third in one
        assert (folder / "train.log").read_text().count("=== 20") == (2 if folder in paused else 1)


def test_a_time_limit_must_be_a_positive_number_of_seconds(tmp_path, capsys):
    spec = write_spec(tmp_path, {"train.seed": [0]})
    assert sweep_main(["run", str(spec), "--out", str(tmp_path / "out"), "--time-limit", "0"]) == 2
    assert "--time-limit" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_time_limit_too_short_for_any_progress_ends_the_retries_with_its_own_status(tmp_path, capsys, monkeypatch):
    """No run reaches a checkpoint within the limit: the first such stop says run it again (75), the second in a row
    exits 78 with one line saying why; a command that makes progress clears the count."""
    spec = write_spec(tmp_path, {"train.seed": [0, 1]})
    out = tmp_path / "out"
    # the limit falls at the runner's first look, before a run could save, however fast or slow the machine (a
    # wall-clock second was no such limit on a busy machine: a run signalled while it was starting trained to its
    # end within the grace period, and that progress cleared the count)
    monkeypatch.setattr(runner, "time", _Clock(lambda: True))
    argv = ["run", str(spec), "--out", str(out), "--workers", "1", "--quiet", "--time-limit", str(LIMIT_S)]
    assert sweep_main(argv) == 75
    assert "run the same command again" in capsys.readouterr().err
    assert sweep_main(argv) == 78
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("loglinear sweep: time limit reached 2 times in a row without progress: no run reached a "
                       "checkpoint within it (its start, data and first training step take longer); give a longer "
                       "--time-limit (or fewer runs per --pack)")
    assert not list(out.glob("runs/*/*.ckpt"))

    def one_step_each(runs, out, *args, **kwargs):
        for run in runs:
            (out / "runs" / run.run_id).mkdir(parents=True, exist_ok=True)
            (out / "runs" / run.run_id / "interrupted.ckpt").write_bytes(b"a step")
        return SweepOutcome({r.run_id: "pending" for r in runs}, interrupted=True, timed_out=True)

    monkeypatch.setattr(runner, "run_local", one_step_each)
    assert sweep_main(argv) == 75 and not (out / ".time_limit_stalls").exists()
