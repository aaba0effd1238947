"""`train.compile`: a compiled run trains as the eager run does (to float32's rounding), and what the machine lacks
fails with one line before anything is written (tests/runs/test_run_ids.py: the keys at their defaults keep the
run ids)."""

from __future__ import annotations

import os

import lightning as L
import pytest
import torch

from loglinear.models import MIXERS
from loglinear.runs.config import ConfigError, compile_refusal, load_run_config
from loglinear.runs.train import train

STEPS = 50
TINY = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=16", "data.task_args.num_kv_pairs=2",
    "data.batch_size=8", "data.val_size=8", "data.test_size=8",
    "model.d_model=16", "model.n_layers=1", "model.attention_heads=1", "model.deltanet_heads=1",
    "train.lr=3.0e-3", "train.warmup_steps=5", f"train.max_steps={STEPS}", f"train.val_every={STEPS}",
    "train.early_stop_threshold=null", "logger.wandb.mode=disabled", "logger.progress=false",
]


class Losses(L.Callback):
    """The training loss of every step."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, *args: object) -> None:
        self.values.append(float(outputs["loss"]))


def losses(tmp_path, mixer: str, compile: bool) -> list[float]:
    recorder = Losses()
    cfg = load_run_config(None, [*TINY, f"model.mixer={mixer}", f"train.compile={str(compile).lower()}",
                                 f"out_dir={tmp_path / f'{mixer}-{compile}'}"])
    assert train(cfg, callbacks=[recorder])["status"] == "max_steps"
    return recorder.values


ASK = "LOGLINEAR_COMPILE_TESTS"
"""Compiling the recurrent mixers takes minutes each on 2 cores: they are tested when asked ($ASK=1), attention
always."""


def compiled_mixers() -> list:
    asked = os.environ.get(ASK) == "1"
    return [pytest.param(name, marks=() if asked or name == "attention" else
                         pytest.mark.skip(reason=f"compiling {name} takes minutes: set {ASK}=1"))
            for name in MIXERS.names() if compile_refusal(name) is None]


MIS_COMPILED = [name for name in MIXERS.names() if compile_refusal(name) is not None]


@pytest.mark.parametrize("mixer", MIS_COMPILED)
def test_a_mixer_known_to_compile_wrong_is_refused_compiled(mixer, tmp_path):
    with pytest.raises(ConfigError, match=rf"^train.compile=true with model.mixer={mixer}: "):
        load_run_config(None, [*TINY, f"model.mixer={mixer}", "train.compile=true", f"out_dir={tmp_path / 'run'}"])


def test_the_refusal_follows_the_class_whatever_names_it(tmp_path, monkeypatch):
    """The class's import path and a subclass are refused as its registry name is; a subclass that declares its
    compiled step sound is not."""
    (tmp_path / "my_compiled.py").write_text(
        "from loglinear.models.log_linear import LogLinearGatedDeltaNet\n\n\n"
        "class Mine(LogLinearGatedDeltaNet):\n    display_name = 'Mine'\n\n\n"
        "class Checked(LogLinearGatedDeltaNet):\n    display_name = 'Checked'\n    compile_defect = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mixer in ("loglinear.models.log_linear:LogLinearGatedDeltaNet", "my_compiled:Mine"):
        with pytest.raises(ConfigError, match=rf"^train.compile=true with model.mixer={mixer}: its compiled "
                                              r"gradients are wrong"):
            load_run_config(None, [*TINY, f"model.mixer={mixer}", "train.compile=true", f"out_dir={tmp_path / 'r'}"])
    cfg = load_run_config(None, [*TINY, "model.mixer=my_compiled:Checked", "train.compile=true",
                                 f"out_dir={tmp_path / 'r'}"])
    assert cfg.train.compile and cfg.model.mixer == "my_compiled:Checked"


@pytest.mark.slow
@pytest.mark.parametrize("mixer", compiled_mixers())
def test_a_compiled_run_has_the_eager_runs_losses(mixer, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch._dynamo.reset()
    eager, compiled = losses(tmp_path, mixer, False), losses(tmp_path, mixer, True)
    assert len(eager) == len(compiled) == STEPS
    # a fused or reordered sum rounds differently, and training carries the difference on: a few float32 units
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
    assert compiled != eager or mixer == "attention"  # the compiled code ran (it rounds differently)


def test_cuda_graphs_without_compile_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^train.cuda_graphs=true needs train.compile=true"):
        load_run_config(None, [*TINY, "train.cuda_graphs=true", f"out_dir={tmp_path / 'run'}"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's refusal")
def test_cuda_graphs_on_the_cpu_are_refused_before_writing(tmp_path):
    cfg = load_run_config(None, [*TINY, "train.compile=true", "train.cuda_graphs=true", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"^train.cuda_graphs=true needs a CUDA device; on the CPU leave it false$"):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's refusal")
def test_no_cpp_compiler_is_refused_with_one_line_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr("loglinear.runs.train.cpp_compiler", lambda: None)
    cfg = load_run_config(None, [*TINY, "train.compile=true", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"^train.compile=true needs a C\+\+ compiler on the CPU") as error:
        train(cfg)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()
