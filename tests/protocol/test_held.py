"""A sweep folder keeps what it holds across an edited spec (protocol/held.py): a spec that would drop or orphan a
finished or started run is refused before anything is written, naming the runs, in every stage and with or without
a report; `--set-aside` moves those runs aside instead; the same spec again resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from loglinear.cli import sweep_main
from loglinear.runs.config import identity
from loglinear.runs.folder import status_of, write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import MANIFEST, RUNS
from loglinear.sweeps.runner import SweepOutcome

from ..reports.report_helpers import finished
from ..sweeps.sweep_helpers import write_spec
from .test_two_stage import VALIDATION, two_stage_spec


def stand_in(started: list, values=None, stop_at: str | None = None):
    """`run_local` without training: each run without a result gets one (its final validation accuracy
    `values(run)`, default VALIDATION at its rate), except that in stage `stop_at` the first two runs get a
    checkpoint only and the command stops as its time limit would stop it."""
    values = values or (lambda run: VALIDATION[run.point["train.lr"]])

    def run_local(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None, deadline=None):
        todo = [r for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        started.append([(r.stage, r.point["train.lr"], r.point["train.seed"]) for r in todo])
        stop = bool(todo) and todo[0].stage == stop_at
        for i, run in enumerate(todo):
            folder = out / RUNS / run.run_id
            if stop and i < 2:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "last.ckpt").write_bytes(b"half done")
            elif not stop:
                write_json_atomic(folder / "result.json", finished(values(run)))
        statuses = {r.run_id: "pending" if stop else "max_steps" for r in runs}
        return SweepOutcome(statuses, interrupted=stop, timed_out=stop)

    return run_local


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def edit(path: Path, **changes) -> str:
    """Change the spec at `path` (`grid` or `protocol` keys); returns its text before."""
    text = path.read_text()
    spec = json.loads(text)
    for key, value in changes.items():
        spec[key] = {**spec[key], **value}
    path.write_text(json.dumps(spec))
    return text


def refused(capsys, argv: list[str], count: int, *words: str) -> str:
    capsys.readouterr()
    assert sweep_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no longer plans {count} finished or started run(s)" in err[0], err
    assert "nothing was written" in err[0] and "--set-aside" in err[0] and all(w in err[0] for w in words), err
    return err[0]


def test_a_grid_edited_between_stages_is_refused_and_the_spec_restored_resumes(tmp_path, monkeypatch, capsys):
    """Stopped in its confirmation stage (two confirmation runs half done), the sweep is rerun with another grid:
    its selection runs at 1e-3, its extensions at 0.1 and 1 and the started confirmation runs at 0.1 are none of
    the new grid's nor within its extensions' reach: refused, nothing written, nothing trained."""
    path, out = two_stage_spec(tmp_path, extensions=2), tmp_path / "out"
    started: list = []
    monkeypatch.setattr(runner, "run_local", stand_in(started, stop_at="confirmation"))
    argv = ["run", str(path), "--out", str(out), "--quiet"]
    assert sweep_main(argv) == 75
    original = edit(path, grid={"train.lr": [3.0e-3, 1.0e-2]})
    before, calls = files(out), len(started)
    line = refused(capsys, argv, 8, "its learning rate 0.001 is none of the grid's, nor one that its 2 grid "
                                    "extension(s) can reach", "selection train.lr=0.001 train.seed=0", "and 5 more")
    assert files(out) == before and len(started) == calls
    path.write_text(original)
    monkeypatch.setattr(runner, "run_local", stand_in(started))
    assert sweep_main(argv) == 0, line
    assert started[calls:] == [[], [], [], [("confirmation", 0.1, s) for s in (2, 3, 4)]]


def test_a_finished_sweep_that_drops_a_rate_is_refused_before_training_then_set_aside(tmp_path, monkeypatch,
                                                                                       capsys):
    """With `extensions: 0` the finished runs of a dropped rate are no grid extension; refused before the manifest
    is rewritten or a run trains. `--set-aside` moves them, with the report that held them, aside and runs."""
    path, out = two_stage_spec(tmp_path, extensions=0), tmp_path / "out"
    started: list = []
    monkeypatch.setattr(runner, "run_local", stand_in(started))
    argv = ["run", str(path), "--out", str(out), "--quiet"]
    assert sweep_main(argv) == 0
    # the selection runs at 1e-3 at once; the confirmation runs at 1e-2 once the new grid picks 0.1
    dropped = sorted(e["id"] for e in json.loads((out / MANIFEST).read_text())["runs"]
                     if e["point"]["train.lr"] == 1.0e-3 or e["stage"] == "confirmation")
    edit(path, grid={"train.lr": [1.0e-2, 1.0e-1]})
    before, calls = files(out), len(started)
    refused(capsys, argv, 2, "its learning rate 0.001 is none of the grid's, nor one that its 0 grid extension(s) can "
                             "reach")
    assert files(out) == before and len(started) == calls
    assert sweep_main([*argv, "--dry-run", "--set-aside"]) == 0 and files(out) == before
    assert sweep_main([*argv, "--set-aside"]) == 0
    (aside,) = (out / "aside").iterdir()
    assert sorted(p.name for p in (aside / RUNS).iterdir()) == dropped
    assert sorted(p.name for p in aside.iterdir()) == ["manifest.json", "results.csv", RUNS, "table.md"]
    assert (aside / "results.csv").read_bytes() == before["results.csv"]
    assert not any((out / RUNS / rid).exists() for rid in dropped) and (out / "table.md").is_file()


@pytest.mark.parametrize("with_report", [False, True])
def test_a_spec_that_drops_a_finished_run_of_an_unfinished_sweep_is_refused(tmp_path, monkeypatch, capsys,
                                                                              with_report):
    """A single-stage sweep with two of its three runs finished (a time limit stopped it), or finished and reported:
    a spec without one of the finished runs is refused whether a report holds it or not."""
    path, out = write_spec(tmp_path, {"train.seed": [0, 1, 2]}), tmp_path / "out"

    def two_of_three(runs, out, *args, **kwargs):
        for run in runs[:2]:
            write_json_atomic(out / RUNS / run.run_id / "result.json", finished(0.5))
        return SweepOutcome({r.run_id: "max_steps" for r in runs[:2]} | {runs[2].run_id: "pending"},
                            interrupted=not with_report, timed_out=not with_report)

    monkeypatch.setattr(runner, "run_local", two_of_three)
    argv = ["run", str(path), "--out", str(out), "--quiet"]
    assert sweep_main(argv) == (1 if with_report else 75)
    assert (out / "results.csv").is_file() == with_report
    spec = yaml.safe_load(path.read_text())
    spec["grid"]["train.seed"] = [0, 2]
    path.write_text(yaml.safe_dump(spec))
    before = files(out)
    refused(capsys, argv, 1, "train.seed=1", "it is no point of the spec's grid")
    assert files(out) == before


def test_a_carried_run_that_the_new_selection_drops_is_refused_before_the_confirmation_stage(tmp_path, monkeypatch,
                                                                                             capsys):
    """A selection seed added to a finished two-stage sweep: what its confirmation runs are waits on the new runs,
    so the old later-stage runs stay listed; once the new seed moves the pick from 0.1 to 1e-2, the confirmation
    runs at 0.1 and the extension at 1 are refused before the confirmation manifest is written or a confirmation
    run trains (the new selection runs are kept)."""
    path, out = two_stage_spec(tmp_path, extensions=2), tmp_path / "out"
    started: list = []
    monkeypatch.setattr(runner, "run_local", stand_in(started))
    argv = ["run", str(path), "--out", str(out), "--quiet"]
    assert sweep_main(argv) == 0
    old = {e["id"] for e in json.loads((out / MANIFEST).read_text())["runs"]}

    def seed_5_favours_1e_2(run):
        seed, lr = run.point["train.seed"], run.point["train.lr"]
        return VALIDATION[lr] if seed != 5 else float(lr == 1.0e-2)

    monkeypatch.setattr(runner, "run_local", stand_in(started, seed_5_favours_1e_2))
    edit(path, protocol={"selection_seeds": [0, 1, 5]})
    calls = len(started)
    refused(capsys, argv, 5, "the results under this spec do not select it")
    assert [[stage for stage, _, _ in call] for call in started[calls:]] == [["selection"] * 2, ["selection"]]
    listed = {e["id"] for e in json.loads((out / MANIFEST).read_text())["runs"]}
    assert old <= listed and all((out / RUNS / rid / "result.json").is_file() for rid in old)


ROOT = Path(__file__).resolve().parents[2]
IN_FOLDERS = sorted(p.name for p in (ROOT / "results").iterdir() if (p / MANIFEST).is_file() and (p / RUNS).is_dir())
"""The committed sweep folders that hold their runs (a study in progress among them), written before a sweep folder
kept what it holds."""


def test_the_committed_sweep_folders_are_found():
    assert "mqar_paper_cpu" in IN_FOLDERS and len(IN_FOLDERS) > 1


def as_run(entry: dict) -> dict:
    """A manifest entry as what it names: its config by identity (a field added since the folder was made is in the
    config a rerun writes, at its default, and is no part of what the run computes)."""
    return {**entry, "config": identity(entry["config"])}


@pytest.mark.slow
@pytest.mark.parametrize("study", IN_FOLDERS)
def test_a_committed_sweep_folder_resumes_under_its_spec_without_a_refusal(tmp_path, monkeypatch, study):
    """A copy of a committed sweep folder (its manifest and its runs' records, no checkpoint) rerun with its own
    spec: nothing is refused, the manifest lists the same runs (each with the same identity), and no run with a
    result is handed to train."""
    out = tmp_path / "results" / study
    shutil.copytree(ROOT / "results" / study, out, ignore=shutil.ignore_patterns("*.png"))
    entries = {e["id"]: as_run(e) for e in json.loads((out / MANIFEST).read_text())["runs"]}
    asked: list = []

    def nothing_trained(runs, out, *args, **kwargs):
        todo = [r.run_id for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        asked.append([r.run_id for r in runs if r.run_id not in todo])
        statuses = {r.run_id: status_of(out / RUNS / r.run_id) for r in runs}
        return SweepOutcome(statuses, interrupted=bool(todo), timed_out=bool(todo))

    monkeypatch.setattr(runner, "run_local", nothing_trained)
    code = sweep_main(["run", str(ROOT / "configs" / "sweeps" / f"{study}.yaml"), "--out", str(out), "--quiet"])
    assert code in (0, 1, 75)
    again = {e["id"]: as_run(e) for e in json.loads((out / MANIFEST).read_text())["runs"]}
    assert again == entries
    finished_here = {p.parent.name for p in (ROOT / "results" / study / RUNS).glob("*/result.json")}
    assert finished_here <= {rid for call in asked for rid in call}  # each one found finished, in its stage
