"""Bad input to `loglinear train` and `loglinear sweep` is one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json
import typing

import pytest
import torch

from loglinear.cli import main as cli_main
from loglinear.runs.config import ACCELERATORS, PRECISIONS
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


def test_a_failed_start_does_not_refuse_a_corrected_config(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"

    def no_optimiser(*args, **kwargs):
        raise RuntimeError("no optimiser today")

    monkeypatch.setattr(torch.optim, "AdamW", no_optimiser)  # fails in the first step, before any checkpoint
    assert cli_main(["train", *RUN, "train.lr=0.5", f"out_dir={out}"]) == 1
    assert read_result(out)["status"] == "failed"
    monkeypatch.undo()
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    assert read_result(out)["status"] == "max_steps"


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.weight_decay=nan", "train.weight_decay must be a finite number, got nan"),
        ("train.lr=inf", "train.lr must be a finite number, got inf"),
        ("train.beta1=1.5", "train.beta1 must be < 1, got 1.5"),
        ("train.beta2=-0.1", "train.beta2 must be >= 0, got -0.1"),
        ("train.min_lr_ratio=nan", "train.min_lr_ratio must be a finite number"),
        ("train.grad_clip=-1", "train.grad_clip must be >= 0, got -1.0 (0 disables clipping)"),
        ("train.early_stop_threshold=-1", "train.early_stop_threshold must be >= 0"),
        ("train.early_stop_threshold=1", "train.early_stop_threshold must be < 1"),
        ("train.seed=-1", "train.seed must be >= 0, got -1"),
        ("train.warmup_steps=-5", "train.warmup_steps must be >= 0"),
        ("train.precision=fp17", "train.precision must be one of auto, 32-true"),
        ("train.accelerator=tpux", "train.accelerator must be one of auto, cpu"),
        ("train.devices=0", "train.devices must be auto, a count >= 1"),
        ("train.devices=[0,0]", "train.devices must be auto, a count >= 1"),
        ("model.mlp_ratio=nan", "mlp_ratio must be a finite number"),
        ("data.eval_sets=[]", "data.eval_sets must list at least one test set"),
        ("model=5", "model=5: a group is a mapping of its keys or the path of a YAML file"),
        ("model=null", "model=null: a group is a mapping"),
        ("model.vocab_size=10", "model.vocab_size=10 is smaller than the task's vocabulary (mqar: 16 tokens)"),
        ("model.max_len=4", "model.max_len=4 is smaller than the longest sequence of the data (8 tokens)"),
        ("model.output_head=decoder", "model.output_head=decoder: task mqar is scored through the 'lm' head"),
        ("train.threshold_evals=3", "train.threshold_evals=3 is more than the 2 validation(s) of the budget "
                                    "(train.max_steps=4, train.val_every=2): no run could ever be solved"),
    ],
)
def test_a_bad_value_is_one_line_before_any_folder_is_made(tmp_path, capsys, override, message):
    out = tmp_path / "run"
    line = one_line_error(capsys, cli_main(["train", *RUN, override, f"out_dir={out}"]))
    assert message in line, line
    assert not out.exists()


def test_float16_mixed_precision_on_the_cpu_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    line = one_line_error(capsys, cli_main(["train", *RUN, "train.precision=16-mixed", "train.accelerator=cpu",
                                            f"out_dir={out}"]))
    assert "train.precision=16-mixed needs a GPU" in line and not out.exists()


def test_the_precisions_and_accelerators_are_lightnings():
    from lightning.fabric.connector import _PRECISION_INPUT_STR
    from lightning.pytorch.accelerators import AcceleratorRegistry

    assert set(PRECISIONS) == {"auto", *typing.get_args(_PRECISION_INPUT_STR)}
    assert set(ACCELERATORS) == {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}


def test_validating_on_no_eval_set_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    line = one_line_error(capsys, cli_main(["train", *RUN, "data.eval_sets=[]", "data.validate_on=eval_sets",
                                            f"out_dir={out}"]))
    assert "data.eval_sets must list at least one test set" in line and not out.exists()


def test_a_group_given_as_a_scalar_in_a_preset_is_refused(tmp_path, capsys):
    preset = tmp_path / "preset.yaml"
    preset.write_text("model: 5\n")
    line = one_line_error(capsys, cli_main(["train", str(preset), *RUN, f"out_dir={tmp_path / 'run'}"]))
    assert "model=5: a group is a mapping" in line


def test_a_sweep_with_a_bad_value_runs_nothing(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\nbase: {data.task: mqar}\ngrid:\n  train.weight_decay: [0.1, .nan]\n")
    line = one_line_error(capsys, cli_main(["sweep", "run", str(spec), "--out", str(tmp_path / "out")]))
    assert "run train.weight_decay=nan: train.weight_decay must be a finite number" in line
    assert not (tmp_path / "out").exists()


def test_a_run_with_progress_still_refuses_another_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    line = one_line_error(capsys, cli_main(["train", *RUN, "train.lr=0.5", f"out_dir={out}"]))
    assert "holds a run of another configuration" in line


def test_an_edited_config_of_a_finished_run_is_refused_not_ignored(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.001", "lr: 0.003"))
    line = one_line_error(capsys, cli_main(["train", str(config)]))
    assert "holds a run finished with another configuration (train.lr: 0.001 -> 0.003" in line
    assert read_result(out)["config"]["train"]["lr"] == 0.001


def killed_after_its_last_checkpoint(out) -> None:
    """A run killed after it saved its last checkpoint, before its result (what a resume starts from)."""
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    (out / "result.json").unlink()


@pytest.mark.parametrize("legacy", [False, True], ids=["checkpoint", "checkpoint without its configuration"])
@pytest.mark.parametrize("edit, change", [(("lr: 0.001", "lr: 0.5"), "train.lr: 0.001 -> 0.5"),
                                          (("max_steps: 4", "max_steps: 8"), "train.max_steps: 4 -> 8")])
def test_an_edited_config_is_not_resumed_over_the_progress_of_another(tmp_path, capsys, legacy, edit, change):
    """The checkpoint records the configuration that made it: a config.yaml edited since is refused in one line
    saying how to start anew, and nothing changes; restored, the run resumes. A checkpoint from before it recorded
    that tells its learning rate."""
    out = tmp_path / "run"
    killed_after_its_last_checkpoint(out)
    if legacy:
        checkpoint = torch.load(out / "last.ckpt", weights_only=False)
        del checkpoint["run_identity"]
        torch.save(checkpoint, out / "last.ckpt")
    config = out / "config.yaml"
    original = config.read_text()
    config.write_text(original.replace(*edit))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    code = cli_main(["train", str(config)])
    if legacy and change.startswith("train.max_steps"):  # not recorded there: the old behaviour
        assert code == 0
        return
    line = one_line_error(capsys, code)
    assert f"{out} holds progress made with another configuration (last.ckpt at step 4: {change})" in line
    assert "start the run anew in a new out_dir (or with its folder moved aside)" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    config.write_text(original)
    assert cli_main(["train", str(config)]) == 0
    assert read_result(out)["status"] == "max_steps"


def test_a_read_only_out_dir_is_one_line_naming_it(small_disk, capsys):
    out = small_disk.path / "run"
    small_disk.read_only()
    line = one_line_error(capsys, cli_main(["train", *RUN, f"out_dir={out}"]), expected=1)
    assert line == f"loglinear train: cannot write {out}: Read-only file system"


def test_a_disk_that_fills_while_a_checkpoint_is_written_leaves_the_run_resumable(small_disk, capsys):
    """Room for the run's small files but not for its first checkpoint (whose write torch's own error may report,
    tests/runs/test_interruption.py): the run is not marked failed, the command says the disk is full and names
    the file, and once there is room the same command trains it."""
    out = small_disk.path / "run"
    small_disk.fill(free=24_000)
    line = one_line_error(capsys, cli_main(["train", *RUN, f"out_dir={out}"]), expected=1)
    assert line.startswith("loglinear train: [Errno 28] disk full writing ") and "last.ckpt" in line, line
    assert read_result(out) is None and not list(out.glob(".*.tmp"))
    small_disk.make_room()
    assert cli_main(["train", *RUN, f"out_dir={out}"]) == 0
    assert read_result(out)["status"] == "max_steps"


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


def test_an_unknown_self_check_mode_in_the_environment_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOGLINEAR_SELFCHECK", "bogus")
    out = tmp_path / "run"
    line = one_line_error(capsys, cli_main(["train", *RUN, f"out_dir={out}"]))
    assert "LOGLINEAR_SELFCHECK: unknown self-check mode 'bogus'; valid: auto, force, skip" in line
    assert not out.exists()


@pytest.mark.parametrize("task, arguments", [
    ("in_context_recall", "{vocab_size: 2, seq_len: 8}"),
    ("noisy_in_context_recall", "{vocab_size: 18, seq_len: 8}"),
    ("fuzzy_in_context_recall", "{vocab_size: 3, seq_len: 8, k_motif_size: 1, v_motif_size: 1}"),
    ("selective_copying", "{vocab_size: 3, seq_len: 8, num_tokens_to_copy: 2}"),
    ("memorization", "{vocab_size: 3, seq_len: 8}"),
])
def test_a_task_whose_arguments_leave_one_answer_is_refused_before_any_folder(tmp_path, capsys, task, arguments):
    """Chance would be 100%: the run would stop "solved" at its first validation, having learned nothing."""
    out = tmp_path / "run"
    run = [a for a in RUN if not a.startswith("data.task")]
    line = one_line_error(capsys, cli_main(["train", *run, f"data.task={task}", f"data.task_args={arguments}",
                                            f"out_dir={out}"]))
    assert "vocab_size" in line and "leaves 1 possible answer" in line, line
    assert not out.exists()


def test_a_task_whose_batches_would_mostly_score_nothing_is_refused_before_any_folder(tmp_path, capsys):
    """Compression at 2 tokens with noise 0.99: 96% of the batches of 4 hold only noise, so nothing to learn."""
    out = tmp_path / "run"
    run = [a for a in RUN if not a.startswith("data.")]
    line = one_line_error(capsys, cli_main([
        "train", *run, "data.task=compression", "data.batch_size=4", "data.val_size=32", "data.test_size=32",
        "data.task_args={vocab_size: 8, seq_len: 2, noise_vocab_size: 2, frac_noise: 0.99}", f"out_dir={out}"]))
    assert "frac_noise=0.99" in line and "96% of the training batches of batch_size 4" in line, line
    assert not out.exists()
