"""A run interrupted at any moment (SIGINT, SIGTERM, kill -9, a full disk, a corrupt checkpoint) and resumed gives
exactly the uninterrupted run's metrics.csv, result.json (apart from wall time) and final weights."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from loglinear.cli import main as cli_main
from loglinear.runs.checkpoints import AtomicCheckpointIO
from loglinear.runs.config import load_run_config
from loglinear.runs.folder import LOCK, DiskFull, exclusive, read_result
from loglinear.runs.train import train

from .. import child_process
from ..slow_cases import default_and_slow

HARNESS = Path(__file__).with_name("interrupt_harness.py")
# attention on 1 key-value pair at length 8: 40 steps, a validation every 10 (at steps 10, 20, 30, 40)
RUN = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.batch_size=32", "data.val_size=256", "data.test_size=128",
    "model.mixer=attention", "model.d_model=32", "model.attention_heads=2",
    "train.lr=1.0e-2", "train.warmup_steps=5", "train.max_steps=40", "train.val_every=10",
    "train.early_stop_threshold=null", "logger.wandb.mode=disabled", "logger.progress=false",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def harness(out: Path, hook: str = "train", step: int = 0, signame: str = "none", *extra: str) -> int:
    proc = child_process.run([sys.executable, str(HARNESS), str(out), hook, str(step), signame, *RUN, *extra],
                             env=ENV, cpu_s=600)
    assert proc.returncode != 1, proc.stderr[-3000:]
    return proc.returncode


@contextlib.contextmanager
def one_thread():
    """torch on one thread, as the harness's and the commands' processes (ENV): the same sums, to the bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_here(out: Path) -> None:
    """The run trained to its end in this process: what `harness(out)` does in a new one (the interruptions need
    processes of their own, a run's resumption does not)."""
    with one_thread():
        train(load_run_config(None, [*RUN, f"out_dir={out}"]))


def cli_here(out: Path, capsys) -> tuple[int, str]:
    """`loglinear train` on the run in this process: its exit status and what it wrote on stderr."""
    with one_thread():
        code = cli_main(["train", *RUN, f"out_dir={out}"])
    return code, capsys.readouterr().err


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="") as f:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


def step_of(checkpoint: Path) -> int:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"]


def without_time(result: dict) -> dict:
    """The result apart from its wall time, its peak GPU memory (the last session's) and where the run lives."""
    kept = {k: v for k, v in result.items() if k not in ("wall_time_s", "peak_memory_bytes")}
    kept["config"] = {k: v for k, v in kept["config"].items() if k != "out_dir"}
    return kept


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "run"
    train_here(out)
    return out


def assert_same_run(out: Path, whole: Path) -> None:
    assert without_time(read_result(out)) == without_time(read_result(whole))
    assert rows(out) == rows(whole)
    want, got = weights(whole), weights(out)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert not (out / "interrupted.ckpt").exists()


def test_the_reference_run_validates_on_its_grid(whole):
    validated = [int(r["step"]) for r in rows(whole) if "val/acc" in r]
    assert validated == [9, 19, 29, 39]  # Lightning logs step n's metrics at step n - 1
    assert read_result(whole)["step"] == 40


INTERRUPTIONS = [
    ("train", 13, "SIGINT", 130),  # between two validations
    ("train", 27, "SIGTERM", 143),
    ("val", 20, "SIGTERM", 143),  # during a validation: it finishes (saving last.ckpt), then the run stops
    ("val", 30, "SIGINT", 130),
    ("train", 17, "SIGKILL", -9),  # no checkpoint: resumes from the validation at step 10
    ("val", 30, "SIGKILL", -9),  # killed during a validation: it is redone
    ("test", 0, "SIGTERM", 143),  # during the final test: training is over, the test is redone
]


# the default run: each signal once, in training, in a validation and in the final test
@pytest.mark.parametrize("hook, step, signame, code", default_and_slow(
    INTERRUPTIONS, [("train", 13, "SIGINT", 130), ("val", 30, "SIGKILL", -9), ("test", 0, "SIGTERM", 143)]))
def test_interrupted_run_resumes_to_the_same_result(tmp_path, whole, hook, step, signame, code):
    out = tmp_path / "run"
    assert harness(out, hook, step, signame) == code
    assert read_result(out) is None
    if signame != "SIGKILL" and hook == "train":
        assert step_of(out / "interrupted.ckpt") == step + 1  # the step in flight finished, then saved
    if signame != "SIGKILL" and hook == "val":
        assert step_of(out / "last.ckpt") == step and not (out / "interrupted.ckpt").exists()
    train_here(out)
    assert_same_run(out, whole)


def test_twice_interrupted_run_still_matches(tmp_path, whole):
    out = tmp_path / "run"
    assert harness(out, "train", 8, "SIGTERM") == 143
    assert harness(out, "val", 20, "SIGKILL") == -9
    assert harness(out, "train", 33, "SIGINT") == 130
    train_here(out)
    assert_same_run(out, whole)


@pytest.mark.parametrize("signum, code", default_and_slow([(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                                                             [(signal.SIGTERM, 143)]))
def test_the_command_exits_non_zero_with_one_line_on_a_signal(tmp_path, signum, code):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "loglinear", "train", *RUN, "train.max_steps=100000", f"out_dir={out}"]
    proc = subprocess.Popen(command,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child_process.wait_until(proc, (out / "last.ckpt").is_file, cpu_s=300)
    proc.send_signal(signum)
    _, err = child_process.communicate(proc, cpu_s=300)
    assert proc.returncode == code
    last = err.strip().splitlines()[-1]
    assert last.startswith("loglinear train: interrupted by") and "rerun the same command to resume" in last
    # the step in flight saved interrupted.ckpt, or (a signal right after a validation) last.ckpt already holds it
    assert read_result(out) is None and (out / "last.ckpt").is_file()


def test_a_metrics_file_cut_mid_row_is_named_and_the_cut_row_dropped(tmp_path, capsys):
    out = tmp_path / "run"
    assert harness(out, "train", 13, "SIGINT") == 130
    whole_rows = rows(out)
    text = (out / "metrics.csv").read_text()
    (out / "metrics.csv").write_text(text[: text.rindex(",")])  # the last row loses its last cell and newline
    code, err = cli_here(out, capsys)
    assert code == 0, err
    assert f"metrics.csv ends in a row cut short (row {len(whole_rows)}); it is dropped" in err
    assert rows(out)[: len(whole_rows) - 1] == whole_rows[:-1]


def test_ctrl_c_on_a_terminal_with_dataloader_workers_is_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, DataLoader workers included: only the run handles it."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "loglinear", "train", *RUN, "data.num_workers=2", "train.max_steps=100000",
               f"out_dir={out}"]
    proc = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group, as a terminal's foreground job
    child_process.wait_until(proc, (out / "last.ckpt").is_file, cpu_s=300)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = child_process.communicate(proc, cpu_s=300)
    assert proc.returncode == 130, err
    assert err.count("SIGINT received") == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("loglinear train: interrupted by SIGINT")


def test_a_corrupt_checkpoint_is_set_aside_and_named(tmp_path, whole, capsys):
    out = tmp_path / "run"
    assert harness(out, "train", 23, "SIGTERM") == 143  # last.ckpt at step 20, interrupted.ckpt at 24
    newest = out / "interrupted.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # what a full disk used to leave
    code, err = cli_here(out, capsys)
    assert code == 0, err
    assert "interrupted.ckpt is unreadable" in err and "resuming from last.ckpt at step 20" in err
    assert (out / "interrupted.ckpt.corrupt").is_file()
    assert_same_run(out, whole)


def test_no_readable_checkpoint_restarts_from_step_0_and_says_so(tmp_path, whole, capsys):
    out = tmp_path / "run"
    assert harness(out, "train", 23, "SIGTERM") == 143
    for name in ("last.ckpt", "interrupted.ckpt"):
        (out / name).write_bytes(b"PK\x03\x04 not a checkpoint")
    code, err = cli_here(out, capsys)
    assert code == 0, err
    assert "no readable checkpoint left: starting from step 0" in err
    assert_same_run(out, whole)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real_save, saves = torch.save, []

    def save_on_a_full_disk(obj, f, *args, **kwargs):
        saves.append(f)
        if len(saves) < 3:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", save_on_a_full_disk)
    code = cli_main(["train", *RUN, f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert "disk full writing" in err[0] and "last.ckpt" in err[0] and "free on its disk" in err[0]
    assert "result.json" not in err[0] and not (out / "result.json").exists()
    assert not list(out.glob(".*.tmp")) and not list(out.glob("*.tmp"))
    assert step_of(out / "last.ckpt") == 20
    monkeypatch.setattr(torch, "save", real_save)
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    assert read_result(out)["step"] == 40


def test_a_checkpoint_that_does_not_fit_is_a_full_disk_whatever_room_is_left(small_disk):
    """At some sizes left torch's zip writer turns the write that fails into its own RuntimeError (`unexpected
    pos`), which a run took for a failure of its own; at every size the checkpoint is DiskFull naming the file, and
    no temporary file is left."""
    checkpoint = {"state_dict": {"w": torch.arange(30_000, dtype=torch.float32)}}  # 120 KB
    path = small_disk.path / "last.ckpt"
    for free in range(4096, 110_000, 2048):
        small_disk.fill(free=free)
        with pytest.raises(DiskFull, match=r"disk full writing .*last\.ckpt"):
            AtomicCheckpointIO().save_checkpoint(checkpoint, path)
        assert list(small_disk.path.iterdir()) == [small_disk.filler]
        small_disk.make_room()


def test_disk_full_error_names_the_file(tmp_path):
    from loglinear.runs.folder import write_atomic

    def fill(f):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFull, match=r"disk full writing .*x\.bin \(.* free on its disk\)"):
        write_atomic(tmp_path / "x.bin", fill)
    assert list(tmp_path.iterdir()) == []


def test_a_second_process_on_the_same_run_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    with exclusive(out / LOCK, "held by the test"):
        code = cli_main(["train", *RUN, f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"another process is training the run in {out}" in err[0] and f"(pid {os.getpid()})" in err[0]


def test_result_json_is_readable_by_others(whole):
    assert (whole / "result.json").stat().st_mode & 0o044 == 0o044
    assert json.loads((whole / "result.json").read_text())["status"] == "max_steps"
