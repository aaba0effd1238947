"""One run end to end on a tiny MQAR: early stopping, resume after a kill, verdicts, config errors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from loglinear.runs.config import SOLVED, ConfigError, identity, load_run_config, run_id, to_container
from loglinear.runs.folder import read_result
from loglinear.runs.machine import machine, processor_name
from loglinear.runs.metrics_rows import METRICS, read_rows, validation_history
from loglinear.runs.stopping import crossing_step
from loglinear.runs.train import train

from .. import child_process

# 1 key-value pair at length 8: attention solves it in ~100 steps, so each run takes seconds.
TINY = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.eval_sets=[{},{seq_len: 16}]", "data.batch_size=32", "data.val_size=128", "data.test_size=128",
    "model.mixer=attention", "model.d_model=32", "model.attention_heads=2",
    "train.lr=1.0e-2", "train.warmup_steps=5", "train.max_steps=300", "train.val_every=20",
    "logger.wandb.mode=disabled", "logger.progress=false",
]


def tiny(tmp_path: Path, *extra: str, name: str = "run"):
    return load_run_config(None, [*TINY, f"out_dir={tmp_path / name}", *extra])


def cli(*args: str, cpu_s: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return child_process.run([sys.executable, "-m", "loglinear", "train", *args], cpu_s=cpu_s, env=env)


def test_attention_early_stops_above_threshold(tmp_path):
    result = train(tiny(tmp_path))
    assert result["status"] == "early_stopped"
    assert result["val_accuracy"] > 0.99
    assert result["steps_to_threshold"] == result["step"] < 300
    assert result["convergence"] == "threshold"
    on_disk = read_result(tmp_path / "run")
    assert on_disk["status"] == "early_stopped" and on_disk["params"] == result["params"] > 0
    for name in ("config.yaml", "metrics.csv", "last.ckpt"):
        assert (tmp_path / "run" / name).is_file()
    # per-slice and per-set metrics, in the validation and the test results
    assert "val/acc/num_kv_pairs=1" in result["final_val"] and "val/acc_token" in result["final_val"]
    assert {"test/acc/set=iid", "test/acc/set=seq_len=16", "test/acc/seq_len=16", "test/acc_seq"} <= set(result["test"])
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert "train/loss" in header and "val/acc" in header


def test_steps_to_threshold_is_recorded_without_early_stopping(tmp_path):
    result = train(tiny(tmp_path, "train.early_stop_threshold=null", "train.max_steps=200"))
    assert result["status"] == "max_steps" and result["step"] == 200
    rows = [r for r in read_rows(tmp_path / "run" / METRICS) if "val/acc" in r]
    # Lightning logs a validation after n steps at step n - 1; attention solves this task in ~100 steps
    first = next(int(r["step"]) + 1 for r in rows if float(r["val/acc"]) > SOLVED)
    assert result["steps_to_threshold"] == first < 200
    assert result["convergence"] == "threshold"  # solved, though the budget ended it


def test_the_threshold_held_on_consecutive_validations_stops_the_run_there(tmp_path):
    result = train(tiny(tmp_path, "train.threshold_evals=2", "train.val_every=10"))
    history = validation_history(read_rows(tmp_path / "run" / METRICS))
    assert result["status"] == "early_stopped" and result["convergence"] == "threshold"
    assert result["steps_to_threshold"] == result["step"] == crossing_step(history, SOLVED, 2) == history[-1][0]
    assert [acc > SOLVED for _, acc in history[-2:]] == [True, True]
    assert result["stop_reason"].endswith(f"on 2 consecutive validations (solved at step {result['step']})")
    assert run_id(tiny(tmp_path, "train.threshold_evals=2")) != run_id(tiny(tmp_path)) == \
        run_id(tiny(tmp_path, "train.threshold_evals=1"))


def test_a_finished_run_is_not_redone(tmp_path):
    cfg = tiny(tmp_path, "train.max_steps=20", "train.val_every=10", "train.early_stop_threshold=null")
    first = train(cfg)
    assert first["status"] == "max_steps" and first["step"] == 20
    stamp = (tmp_path / "run" / "result.json").stat().st_mtime_ns
    assert train(cfg) == first
    assert (tmp_path / "run" / "result.json").stat().st_mtime_ns == stamp


def test_the_result_carries_the_state_size_at_the_training_and_test_lengths(tmp_path):
    """Attention, 2 layers of d_model 32: keys and values, 2 * 32 * T numbers per layer after T tokens."""
    result = train(tiny(tmp_path, "train.max_steps=10", "train.val_every=10"))
    assert result["state_size"] == {
        "train_seq_len": 8, "test_seq_lens": [8, 16],
        "per_layer": {"8": 2 * 32 * 8, "16": 2 * 32 * 16}, "total": {"8": 2 * 2 * 32 * 8, "16": 2 * 2 * 32 * 16},
    }
    assert read_result(tmp_path / "run")["state_size"] == result["state_size"]


def test_peak_gpu_memory_is_null_off_cuda_and_the_machine_is_this_ones(tmp_path):
    result = train(tiny(tmp_path, "train.max_steps=10", "train.val_every=10", "train.accelerator=cpu"))
    assert "peak_memory_bytes" in result and result["peak_memory_bytes"] is None
    assert read_result(tmp_path / "run")["peak_memory_bytes"] is None
    assert read_result(tmp_path / "run")["machine"] == machine(None) == {
        "processor": processor_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability(), "gpu": None,
        "torch": torch.__version__, "threads": torch.get_num_threads()}


@pytest.mark.gpu
def test_peak_gpu_memory_is_each_runs_own(tmp_path):
    extra = ("train.max_steps=10", "train.val_every=10", "train.accelerator=gpu")
    large = train(tiny(tmp_path, *extra, "model.d_model=256", "data.batch_size=256", name="large"))
    small = train(tiny(tmp_path, *extra, name="small"))  # same process: the large run's peak must not carry over
    assert 0 < small["peak_memory_bytes"] < large["peak_memory_bytes"]


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["attention", "log_linear_gated_deltanet"])
def test_a_run_on_cuda_starts_in_a_fresh_process(mixer, tmp_path):
    """In a new process nothing has touched CUDA before the run does (earlier tests in this one may have)."""
    done = cli(*TINY, f"model.mixer={mixer}", "train.max_steps=10", "train.val_every=10", "train.accelerator=gpu",
               f"out_dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_result(tmp_path / "run")["peak_memory_bytes"] > 0


def test_the_result_records_the_implementation_each_mixer_ran(tmp_path):
    result = train(tiny(tmp_path, "model.mixer=log_linear_mamba2", "train.max_steps=5", "train.val_every=5",
                        "train.accelerator=cpu"))
    on_cpu = [{"impl": "chunk", "selfcheck": None}]  # auto on the CPU: chunk, no check applies
    assert result["implementations"] == {"blocks.0.mixer": on_cpu, "blocks.1.mixer": on_cpu}
    assert read_result(tmp_path / "run")["implementations"] == result["implementations"]
    assert train(tiny(tmp_path, "train.max_steps=5", "train.val_every=5", name="att"))["implementations"] == {}


def test_same_seed_same_metrics_and_a_final_validation(tmp_path):
    extra = ("train.max_steps=25", "train.val_every=10", "train.early_stop_threshold=null")
    a, b = train(tiny(tmp_path, *extra, name="a")), train(tiny(tmp_path, *extra, name="b"))
    assert a["final_val"] == b["final_val"] and a["test"] == b["test"]
    assert a["step"] == 25  # validated once more at max_steps, off the val_every grid


def test_absurd_learning_rate_ends_diverged(tmp_path):
    proc = cli(*TINY, f"out_dir={tmp_path / 'run'}", "train.lr=1.0e+12", "train.grad_clip=0", "train.warmup_steps=0")
    assert proc.returncode == 0, proc.stderr
    assert read_result(tmp_path / "run")["status"] == "diverged"


def test_runtime_error_ends_failed_with_the_message(tmp_path):
    # Lightning refuses an unknown strategy when the Trainer is made, after the run started
    proc = cli(*TINY, f"out_dir={tmp_path / 'run'}", "train.strategy=bogus")
    assert proc.returncode == 1
    result = read_result(tmp_path / "run")
    assert result["status"] == "failed" and "invalid strategy name" in result["error"]
    assert result["machine"]["processor"] == processor_name() and result["machine"]["gpu"] is None


def test_typo_exits_2_with_one_line_naming_the_key(tmp_path):
    proc = cli("configs/mqar_cpu.yaml", f"out_dir={tmp_path}", "model.d_modle=32")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.d_modle" in lines[0] and "d_model" in lines[0].split("d_modle", 1)[1]
    proc = cli("configs/mqar_cpu.yaml", f"out_dir={tmp_path}", "model.mixer=mamba3")
    assert proc.returncode == 2 and "valid: attention" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_another_config_in_the_same_directory_is_refused(tmp_path):
    train(tiny(tmp_path, "train.max_steps=10", "train.val_every=10"))
    with pytest.raises(ConfigError, match="holds a run of another configuration"):
        train(tiny(tmp_path, "train.max_steps=11", "train.val_every=10"))


def test_the_self_check_mode_is_not_part_of_a_runs_identity(tmp_path):
    cfg = tiny(tmp_path, "train.max_steps=10", "train.val_every=10")
    forced = tiny(tmp_path, "train.max_steps=10", "train.val_every=10", "model.selfcheck=force")
    assert run_id(forced) == run_id(cfg)
    first = train(cfg)
    assert train(forced) == first  # the same run, finished: not another configuration in its folder
    older = to_container(cfg)  # a config.yaml written before the key existed
    del older["model"]["selfcheck"]
    assert identity(older) == identity(to_container(forced))


def test_compression_runs_through_the_decoder_head_its_task_names(tmp_path):
    compression = [f"out_dir={tmp_path / 'run'}", *(o for o in TINY if not o.startswith("data.")),
                   "data.task=compression", "data.task_args={vocab_size: 6, seq_len: 5}", "data.batch_size=32",
                   "data.val_size=128", "data.test_size=128", "train.max_steps=40", "train.early_stop_threshold=null"]
    cfg = load_run_config(None, compression)
    assert cfg.model.output_head == "decoder"
    assert tiny(tmp_path, "model.output_head=lm").model.output_head == "lm"
    result = train(cfg)
    assert result["status"] == "max_steps" and result["test"]["test/acc"] > 0.2  # chance 1/5; learning starts
    assert "output_head: decoder" in (tmp_path / "run" / "config.yaml").read_text()


def test_wandb_offline_logs_locally_without_a_server(tmp_path):
    cfg = tiny(tmp_path, "train.max_steps=10", "train.val_every=10", "logger.wandb.mode=offline")
    start = time.time()
    assert train(cfg)["status"] == "max_steps"
    assert time.time() - start < 120
    assert any((tmp_path / "run" / "wandb").glob("offline-run-*"))


def test_a_group_file_replaces_the_presets_group(tmp_path):
    cfg = load_run_config("configs/state_tracking.yaml", ["data=data/mod_arith_brackets.yaml", f"out_dir={tmp_path}"])
    assert cfg.data.task == "mod_arith_brackets" and "mult" in cfg.data.task_args


def test_a_run_moves_between_loggers_without_being_refused(tmp_path):
    train(tiny(tmp_path, "train.max_steps=10", "train.val_every=10"))
    assert train(tiny(tmp_path, "train.max_steps=10", "train.val_every=10", "logger.progress=true"))["step"] == 10


def test_two_data_parallel_ranks_train_one_run_and_evaluate_whole_sets(tmp_path):
    """`train.devices=2 train.strategy=ddp` on the CPU (gloo): Lightning starts a second rank; rank 0 holds the
    folder, writes its files and reports once; every rank evaluates every test batch, so the test metrics the run
    recorded are the final weights' on the whole test sets, as one process measures them."""
    import lightning as L

    from loglinear.reports.lambda_inspect import read_run_config
    from loglinear.runs.lit import LitLanguageModel
    from loglinear.synthetics import SyntheticDataModule

    out = tmp_path / "ddp"
    proc = cli(*TINY, f"out_dir={out}", "train.max_steps=20", "train.val_every=10", "train.early_stop_threshold=null",
               "train.accelerator=cpu", "train.devices=2", "train.strategy=ddp")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("max_steps at step 20") == 1
    result = read_result(out)
    assert result["status"] == "max_steps" and result["step"] == 20

    cfg = read_run_config(out)
    data = SyntheticDataModule(cfg.data)
    module = LitLanguageModel(cfg.model, cfg.train, {"val": data.val_set_names, "test": data.test_set_names})
    module.load_state_dict(torch.load(out / "last.ckpt", weights_only=True)["state_dict"])
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    (single,) = trainer.test(module, datamodule=data, verbose=False)
    assert single.keys() == result["test"].keys()
    for name, value in single.items():
        assert result["test"][name] == pytest.approx(value, abs=1e-6), name


def test_negative_transitions_are_logged_per_head_at_validation(tmp_path):
    parity = [a for a in TINY if not a.startswith(("data.task", "data.eval_sets", "model."))] + [
        "data.task=parity", "data.task_args.seq_len=8", "data.eval_sets=[{}]", "model.mixer=mamba2",
        "model.d_model=32", "train.max_steps=10", "train.val_every=5", "train.early_stop_threshold=null"]

    def run(name: str, *extra: str):
        return train(load_run_config(None, [*parity, f"out_dir={tmp_path / name}", *extra]))

    signed = run("signed", "model.negative_eigenvalues=true", "model.dt_init_max=2.0")
    names = [f"val/negative_transitions/layer=0/head={h}" for h in range(4)]  # d_model 32: 4 heads of 16
    fractions = [signed["final_val"][n] for n in names]
    assert all(0 <= f <= 1 for f in fractions) and max(fractions) > 0
    assert set(names) <= set((tmp_path / "signed" / "metrics.csv").read_text().splitlines()[0].split(","))
    unsigned = run("unsigned")
    assert not any(k.startswith("val/negative_transitions") for k in unsigned["final_val"])


NOISY_COMPRESSION = [*(o for o in TINY if not o.startswith("data.")), "data.task=compression",
                     "data.task_args={vocab_size: 8, seq_len: 4, noise_vocab_size: 2, frac_noise: 0.8}",
                     "data.batch_size=4", "data.val_size=64", "data.test_size=64", "train.max_steps=60",
                     "train.early_stop_threshold=null"]
"""Each example's 3 tokens all noise with probability 0.8^3 = 51%: about 7% of the batches of 4 score no position."""


def test_a_batch_without_a_scored_position_has_a_zero_loss_and_no_gradient(tmp_path):
    from loglinear.runs.lit import LitLanguageModel

    cfg = load_run_config(None, [f"out_dir={tmp_path / 'run'}", *NOISY_COMPRESSION])
    module = LitLanguageModel(cfg.model, cfg.train)
    inputs = torch.randint(0, 6, (4, 4))
    loss, counts = module.shared_step({"inputs": inputs, "targets": torch.full((4, 4), -100)})
    assert loss.item() == 0.0 and counts["scored"].sum() == 0
    loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in module.parameters())


def test_batches_without_a_scored_position_do_not_end_a_run_diverged(tmp_path):
    result = train(load_run_config(None, [f"out_dir={tmp_path / 'run'}", *NOISY_COMPRESSION]))
    assert result["status"] == "max_steps" and result["step"] == 60
    assert math.isfinite(result["test"]["test/loss"])
