"""Bad input to `loglinear train` and `loglinear sweep` is one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json

import pytest

from loglinear.cli import main as cli_main
from loglinear.runs.folder import read_result

RUN = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.batch_size=16", "data.val_size=32", "data.test_size=32", "model.mixer=attention", "model.d_model=16",
    "model.attention_heads=2", "train.max_steps=4", "train.val_every=2", "logger.wandb.mode=disabled",
    "logger.progress=false",
]


def one_line_error(capsys, code: int, expected: int = 2) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == expected and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("- data\n- model\n", "a run preset must be a YAML mapping"),
        ("data: [\n", "not valid YAML (line 2, column 1)"),
        ("model: {d_model: 16\n", "not valid YAML"),
    ],
)
def test_a_bad_preset_file(tmp_path, capsys, text, message):
    preset = tmp_path / "preset.yaml"
    preset.write_text(text)
    line = one_line_error(capsys, cli_main(["train", str(preset), f"out_dir={tmp_path / 'run'}"]))
    assert str(preset) in line and message in line


def test_a_bad_group_file(tmp_path, capsys):
    (tmp_path / "data.yaml").write_text("[1, 2]\n")
    line = one_line_error(capsys, cli_main(["train", f"data={tmp_path / 'data.yaml'}", f"out_dir={tmp_path / 'run'}"]))
    assert "a data group file must be a YAML mapping" in line


def test_a_bad_value_leaves_no_folder_that_refuses_the_corrected_rerun(tmp_path, capsys):
    out = tmp_path / "run"
    line = one_line_error(capsys, cli_main(["train", *RUN, "data.batch_size=0", f"out_dir={out}"]))
    assert "data.batch_size must be >= 1, got 0" in line
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    assert read_result(out)["status"] == "max_steps"


def test_a_failed_start_does_not_refuse_a_corrected_config(tmp_path, capsys):
    out = tmp_path / "run"
    # lambda levels for length 4 only: the operator refuses length 8 at run time, before any checkpoint
    assert cli_main(["train", *RUN, "model.mixer=log_linear_mamba2", "model.max_len=4", f"out_dir={out}"]) == 1
    assert read_result(out)["status"] == "failed"
    assert cli_main(["train", *RUN, "model.mixer=log_linear_mamba2", f"out_dir={out}"]) == 0
    assert read_result(out)["status"] == "max_steps"


def test_a_run_with_progress_still_refuses_another_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    line = one_line_error(capsys, cli_main(["train", *RUN, "train.lr=0.5", f"out_dir={out}"]))
    assert "holds a run of another configuration" in line


def test_a_corrupt_result_is_named_and_the_run_redone(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    (out / "result.json").write_text("{trunc")
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    assert "result.json is not valid JSON" in capsys.readouterr().err
    assert read_result(out)["status"] == "max_steps"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\ngrid: [\n", "not valid YAML (line 3, column 1)"),
        ("- 1\n- 2\n", "a sweep spec must be a YAML mapping"),
        ("name: x\ngrid:\n  train.lr: 3\n", "grid.train.lr must be a non-empty list of values"),
    ],
)
def test_a_bad_sweep_spec(tmp_path, capsys, text, message):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    line = one_line_error(capsys, cli_main(["sweep", "run", str(spec), "--dry-run"]))
    assert message in line


@pytest.mark.parametrize("manifest", ["{trunc", "[1, 2]", json.dumps({"runs": [{"no_id": 1}]})])
def test_a_corrupt_manifest(tmp_path, capsys, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    line = one_line_error(capsys, cli_main(["sweep", "report", str(tmp_path)]))
    assert "manifest.json" in line and "write it anew" in line
