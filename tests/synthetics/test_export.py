"""`loglinear data export`: the .npy files hold exactly the examples a run draws, the export checks its preset as a
run does, makes OUT itself and writes it whole or not at all; `read_exported` reads back only what it wrote."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from loglinear.cli import main
from loglinear.synthetics import SyntheticDataModule, load_data_config
from loglinear.synthetics import export as export_module
from loglinear.synthetics.export import ExportError, export_data, read_exported
from loglinear.synthetics.streams import fixed_chunks

from .. import child_process

PRESET = "configs/data/flip_flop.yaml"
SMALL = ["batch_size=16", "val_size=20", "test_size=24", "eval_sets=[{},{p_ignore: 0.1}]", "seed=7"]
RECALL = "configs/data/in_context_recall.yaml"
FAST = ["task_args.seq_len=32", "val_size=8", "test_size=8", "eval_sets=[{}]"]


def one_line(capsys, code: int, expected: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == expected and len(err) == 1, err
    return err[0]


def test_the_files_hold_the_runs_examples_and_read_back(tmp_path):
    config = load_data_config(PRESET, SMALL)
    export_data(config, tmp_path / "out", train_size=40)
    sets = read_exported(tmp_path / "out")
    (task,) = SyntheticDataModule(config).train_set.tasks
    fixed = torch.cat([chunk["inputs"] for chunk in fixed_chunks(task, 7, 40)])
    assert [s.name for s in sets["train"]] == ["train"] and torch.equal(sets["train"][0][1], fixed)
    trained = SyntheticDataModule(load_data_config(PRESET, [*SMALL, "train_size=40"]))
    stream = iter(trained.train_dataloader())
    epoch = torch.cat([next(stream)["inputs"] for _ in range(3)])  # 40 examples in batches of 16
    assert sorted(map(tuple, epoch.tolist())) == sorted(map(tuple, fixed.tolist()))
    module = SyntheticDataModule(config)
    test = list(module.test_dataloader())
    assert [s.name for s in sets["test"]] == module.test_set_names == ["iid", "p_ignore=0.1"]
    for index, (_, inputs, targets, _) in enumerate(sets["test"]):
        mine = [b for b in test if b["slices"]["eval_set"][0] == index]
        assert torch.equal(inputs, torch.cat([b["inputs"] for b in mine]))
        assert torch.equal(targets, torch.cat([b["targets"] for b in mine]))
        assert inputs.shape == (24, 64) and inputs.dtype == torch.int64
    assert sets["validation"][0][1].shape == (20, 64)
    manifest = json.loads((tmp_path / "out" / "data.json").read_text())
    assert manifest["data"]["seed"] == 7 and manifest["vocab_size"] == 5 and manifest["ignore_index"] == -100
    assert manifest["data"]["train_size"] == 40 == manifest["files"]["train"][0]["examples"]
    assert np.load(tmp_path / "out" / manifest["files"]["test"][1]["targets"]).shape == (24, 64)
    assert oct((tmp_path / "out").stat().st_mode & 0o777) == oct(0o777 & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_command_writes_once_and_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["data", "export", PRESET, str(out), "--train-size", "5", *SMALL]) == 0
    assert (out / "data.json").is_file() and np.load(out / "train.inputs.npy").shape == (5, 64)
    capsys.readouterr()
    line = one_line(capsys, main(["data", "export", PRESET, str(out), "--train-size", "5"]), 2)
    assert f"OUT {out} exists: export into a new folder" in line
    for bad, message in ((["task_args.p_ignore=2"], "p_ignore must be <= 1.0, got 2"),
                         (["oops"], "unrecognized arguments: oops"),
                         (["--train-size", "0"], "--train-size: must be >= 1, got 0")):
        args = ["--train-size", "5", *bad] if bad[0] != "--train-size" else bad
        assert main(["data", "export", PRESET, str(tmp_path / "other"), *args]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "other").exists()


def test_a_folder_the_export_did_not_make_is_never_written_into(tmp_path, capsys):
    stray = tmp_path / "mine"
    stray.mkdir()
    (stray / "train.inputs.npy").write_text("my own file")
    line = one_line(capsys, main(["data", "export", PRESET, str(stray), "--train-size", "5"]), 2)
    assert "exists: export into a new folder (the export makes OUT itself)" in line
    assert [p.name for p in stray.iterdir()] == ["train.inputs.npy"]
    assert (stray / "train.inputs.npy").read_text() == "my own file"


def test_a_folder_made_at_out_while_the_sets_are_drawn_is_not_replaced(tmp_path, capsys, monkeypatch):
    """Another process makes OUT, empty, after the export checked it: the whole folder would replace it silently
    (a rename onto an empty folder), so the export is refused and leaves that folder and nothing else."""
    out = tmp_path / "out"
    write_pair = export_module._write_pair

    def someone_makes_out(folder, array):
        out.mkdir(exist_ok=True)
        write_pair(folder, array)

    monkeypatch.setattr(export_module, "_write_pair", someone_makes_out)
    line = one_line(capsys, main(["data", "export", PRESET, str(out), "--train-size", "5", *SMALL]), 2)
    assert f"OUT {out} exists" in line and "made while the sets were drawn" in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list(out.iterdir()) == []


def test_an_empty_out_or_a_new_folder_at_the_root_is_refused(tmp_path, capsys, monkeypatch):
    """`$UNSET` gives an empty OUT (which was the working directory) and `$UNSET/dir` a folder under /."""
    preset = os.path.abspath(PRESET)
    monkeypatch.chdir(tmp_path)
    line = one_line(capsys, main(["data", "export", preset, "", "--train-size", "5"]), 2)
    assert "OUT is empty (an unset shell variable?)" in line and list(tmp_path.iterdir()) == []
    line = one_line(capsys, main(["data", "export", preset, "/loglinear-export-test", "--train-size", "5"]), 2)
    assert "would be a new folder at the filesystem root" in line
    assert not os.path.exists("/loglinear-export-test")


def test_a_folder_that_cannot_be_made_is_named(tmp_path, capsys):
    line = one_line(capsys, main(["data", "export", PRESET, "/proc/loglinear/out", "--train-size", "5"]), 1)
    assert "cannot write /proc/loglinear" in line


def test_the_manifest_records_the_count_written(tmp_path, capsys):
    preset = tmp_path / "fixed.yaml"
    preset.write_text("task: flip_flop\ntrain_size: 20\n")
    line = one_line(capsys, main(["data", "export", str(preset), str(tmp_path / "a"), "--train-size", "10"]), 2)
    assert "the preset's train_size 20 and --train-size 10 differ" in line and not (tmp_path / "a").exists()
    assert main(["data", "export", str(preset), str(tmp_path / "b"), "--train-size", "20"]) == 0
    manifest = json.loads((tmp_path / "b" / "data.json").read_text())
    assert manifest["data"]["train_size"] == 20 == manifest["files"]["train"][0]["examples"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["eval_sets=[{vocab_size: 32}]"], "set 'vocab_size=32' has vocab_size 32 but the training task has 16"),
    (["mixture=[{seq_len: 64},{seq_len: 64}]"], "a single training task's fixed set, not a mixture's"),
    (["mixture=[{seq_len: 64},{seq_len: 256}]"], "a single training task's fixed set, not a mixture's"),
    (["task_args.vocab_size=2"], "leaves 1 possible answer"),
])
def test_a_preset_a_run_would_refuse_is_refused(tmp_path, capsys, overrides, message):
    out = tmp_path / "out"
    line = one_line(capsys, main(["data", "export", RECALL, str(out), "--train-size", "4", "batch_size=8",
                                  "val_size=8", "test_size=8", *overrides]), 2)
    assert message in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_preset_that_is_not_a_yaml_mapping_is_named(tmp_path, capsys):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\xff\xfe\x01")
    line = one_line(capsys, main(["data", "export", str(binary), str(tmp_path / "out"), "--train-size", "4"]), 2)
    assert f"{binary} is not a YAML data preset" in line
    listed = tmp_path / "list.yaml"
    listed.write_text("- task\n")
    line = one_line(capsys, main(["data", "export", str(listed), str(tmp_path / "out"), "--train-size", "4"]), 2)
    assert f"{listed} is not a data preset" in line and not (tmp_path / "out").exists()


def test_a_disk_too_small_is_refused_before_anything_is_written(small_disk, capsys):
    out = small_disk.path / "out"
    line = one_line(capsys, main(["data", "export", RECALL, str(out), "--train-size", "40000", *FAST]), 1)
    assert f"the disk of {small_disk.path} has" in line and "needs 19.5 MB" in line
    assert list(small_disk.path.iterdir()) == []
    small_disk.fill()  # a second export on the full disk: the same, and still no empty file
    line = one_line(capsys, main(["data", "export", RECALL, str(out), "--train-size", "5", *FAST]), 1)
    assert "has 0.0 B free" in line
    assert [p.name for p in small_disk.path.iterdir()] == [small_disk.filler.name]


def test_a_disk_that_fills_while_writing_leaves_no_file_and_names_the_one_written(small_disk, capsys, monkeypatch):
    monkeypatch.setattr(export_module, "_check_room", lambda parent, arrays: None)  # another writer filled it after
    small_disk.fill(free=300_000)
    out = small_disk.path / "out"
    line = one_line(capsys, main(["data", "export", RECALL, str(out), "--train-size", "40000", *FAST]), 1)
    assert "disk full writing train.inputs.npy of OUT" in line or "disk full writing train.targets.npy" in line
    assert [p.name for p in small_disk.path.iterdir()] == [small_disk.filler.name]


def test_running_out_of_memory_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(export_module, "fixed_chunks", no_memory)
    line = one_line(capsys, main(["data", "export", RECALL, str(tmp_path / "out"), "--train-size", "5", *FAST]), 1)
    assert "out of memory drawing the sets (--train-size 5); nothing written" in line
    assert list(tmp_path.iterdir()) == []


def export_process(out, train_size, address_space=None):
    """`loglinear data export` of in-context recall at 32 tokens in a process of its own."""
    def limit():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.Popen([sys.executable, "-m", "loglinear", "data", "export", RECALL, str(out), "--train-size",
                             str(train_size), *FAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_the_sets_are_written_a_draw_at_a_time_in_little_memory(tmp_path):
    """A million examples of 32 tokens (0.5 GB of files) under a 1.5 GB address space, where holding the arrays
    whole ran out of memory."""
    cap = 1536 * 2**20
    small = export_process(tmp_path / "small", 1000, address_space=cap)
    _, small_err = child_process.communicate(small, cpu_s=600)
    if small.returncode:
        pytest.skip(f"this interpreter needs more than 1.5 GB of address space to export: {small_err}")
    out = tmp_path / "out"
    process = export_process(out, 1_000_000, address_space=cap)
    _, err = child_process.communicate(process, cpu_s=600)
    assert process.returncode == 0, err
    assert np.load(out / "train.inputs.npy", mmap_mode="r").shape == (1_000_000, 32)
    shutil.rmtree(out)


@pytest.mark.parametrize("signum, code, told", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "interrupted (SIGTERM)")])
def test_an_interrupted_export_is_one_line_and_leaves_nothing(tmp_path, signum, code, told):
    out = tmp_path / "out"
    process = export_process(out, 5_000_000)
    started = child_process.wait_until(
        process, lambda: any(p.name.startswith(".out.partial-") for p in tmp_path.iterdir()), cpu_s=600)
    assert started, process.communicate()
    time.sleep(0.5)
    process.send_signal(signum)
    _, err = child_process.communicate(process, cpu_s=300)
    assert process.returncode == code, err
    assert err.strip().splitlines() == [f"loglinear data export: {told}; nothing written (OUT was not made)"]
    assert list(tmp_path.iterdir()) == []


def written(tmp_path):
    out = tmp_path / "out"
    export_data(load_data_config(PRESET, SMALL), out, train_size=10)
    return out, json.loads((out / "data.json").read_text())


@pytest.mark.parametrize(("damage", "message"), [
    (lambda out, m: np.save(out / "train.targets.npy", np.zeros((5, 64), dtype=np.int64)),
     "train.inputs.npy is 10 x 64 but train.targets.npy is 5 x 64"),
    (lambda out, m: np.save(out / "train.inputs.npy", np.zeros((10, 64), dtype=np.float32)),
     "train.inputs.npy is a 2-dimensional float32 array, not (examples, T) int64"),
    (lambda out, m: m["files"]["train"][0].update(examples=999), "holds 10 examples, the manifest says 999"),
    (lambda out, m: m["files"]["test"][0].update(inputs="../../../../etc/hostname"),
     "names '../../../../etc/hostname', not a file of"),
    (lambda out, m: m["files"]["test"][0].update(inputs="/etc/hostname"), "names '/etc/hostname', not a file of"),
    (lambda out, m: np.save(out / "train.inputs.npy", np.full((10, 64), 7, dtype=np.int64)),
     "holds tokens outside the vocabulary 0..4"),
    (lambda out, m: np.save(out / "train.targets.npy", np.full((10, 64), -1, dtype=np.int64)),
     "holds targets that are neither -100 nor a token of the vocabulary 0..4"),
    (lambda out, m: m.pop("files"), "is not an export's manifest (files by split, vocab_size)"),
])
def test_reading_back_checks_every_file_against_the_manifest(tmp_path, damage, message):
    out, manifest = written(tmp_path)
    damage(out, manifest)
    (out / "data.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportError) as error:
        read_exported(out)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_link_out_of_the_folder_is_refused(tmp_path):
    out, _ = written(tmp_path)
    (out / "test.0.inputs.npy").unlink()
    (out / "test.0.inputs.npy").symlink_to(out / ".." / "elsewhere.npy")
    np.save(tmp_path / "elsewhere.npy", np.zeros((24, 64), dtype=np.int64))
    with pytest.raises(ExportError, match="names 'test.0.inputs.npy', not a file of"):
        read_exported(out)


LANGUAGES = "configs/data/regbench.yaml"
SHORT = ["task_args.seq_len=24", "task_args.max_string_len=5", "val_size=6", "test_size=10", "batch_size=4",
         "train_size=null"]


def test_a_task_with_several_right_answers_writes_them_beside_the_targets(tmp_path):
    config = load_data_config(LANGUAGES, SHORT)
    export_data(config, tmp_path / "out", train_size=9)
    sets = read_exported(tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "data.json").read_text())
    assert manifest["files"]["test"][1] == {"name": "held_out", "inputs": "test.1.inputs.npy",
                                            "targets": "test.1.targets.npy", "allowed": "test.1.allowed.npy",
                                            "examples": 10}
    (task,) = SyntheticDataModule(config).train_set.tasks
    fixed = list(fixed_chunks(task, 0, 9))
    assert torch.equal(sets["train"][0].allowed, torch.cat([c["allowed"] for c in fixed]))
    test = list(SyntheticDataModule(config).test_dataloader())
    for index, exported in enumerate(sets["test"]):
        mine = [b for b in test if b["slices"]["eval_set"][0] == index]
        assert torch.equal(exported.allowed, torch.cat([b["allowed"] for b in mine]))
        assert torch.equal(exported.targets, torch.cat([b["targets"] for b in mine]))
    np.save(tmp_path / "out" / "test.0.allowed.npy", np.full((10, 24), 1 << 20, dtype=np.int64))
    with pytest.raises(ExportError, match="test.0.allowed.npy holds bitmasks with bits outside the vocabulary 0..19"):
        read_exported(tmp_path / "out")


@pytest.mark.parametrize(("preset", "lengths"), [
    ("configs/data/niah.yaml", {128, 256, 512, 1024}),
    ("configs/data/stacked_mqar.yaml", {8, 16, 32}),
    ("configs/data/regbench.yaml", {1024}),
])
def test_each_probe_preset_exports_its_test_sets_at_every_length(tmp_path, preset, lengths):
    config = load_data_config(preset, ["val_size=2", "test_size=3", "batch_size=2", "train_size=null"])
    export_data(config, tmp_path / "out", train_size=2)
    sets = read_exported(tmp_path / "out")
    assert [s.name for s in sets["test"]] == SyntheticDataModule(config).test_set_names
    assert {s.inputs.shape[1] for s in sets["test"]} == lengths and all(len(s.inputs) == 3 for s in sets["test"])
