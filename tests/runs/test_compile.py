"""`train.compile`: a compiled run trains as the eager run does (to float32's rounding), and what the machine lacks
fails with one line before anything is written (tests/runs/test_run_ids.py: the keys at their defaults keep the
run ids)."""

from __future__ import annotations

import copy
import os

import lightning as L
import pytest
import torch

from loglinear.models import MIXERS, build_model
from loglinear.runs.config import ConfigError, TrainConfig, compile_refusal, load_run_config
from loglinear.runs.lit import compile_blocks
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


def test_a_mixer_known_to_compile_wrong_is_refused_compiled_whatever_names_it(tmp_path, monkeypatch):
    """A mixer that declares a compile defect is refused compiled, by its import path as by a subclass's; a subclass
    that declares its compiled step sound is not."""
    (tmp_path / "my_compiled.py").write_text(
        "from loglinear.models.gated_deltanet import GatedDeltaNet\n\n\n"
        "class Wrong(GatedDeltaNet):\n    display_name = 'Wrong'\n    compile_defect = 'its compiled gradients are "
        "wrong'\n\n\n"
        "class Mine(Wrong):\n    display_name = 'Mine'\n\n\n"
        "class Checked(Wrong):\n    display_name = 'Checked'\n    compile_defect = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mixer in ("my_compiled:Wrong", "my_compiled:Mine"):
        with pytest.raises(ConfigError, match=rf"^train.compile=true with model.mixer={mixer}: its compiled "
                                              r"gradients are wrong"):
            load_run_config(None, [*TINY, f"model.mixer={mixer}", "train.compile=true", f"out_dir={tmp_path / 'r'}"])
    assert "(as my_compiled:Wrong, which it extends)" in compile_refusal("my_compiled:Mine")
    cfg = load_run_config(None, [*TINY, "model.mixer=my_compiled:Checked", "train.compile=true",
                                 f"out_dir={tmp_path / 'r'}"])
    assert cfg.train.compile and cfg.model.mixer == "my_compiled:Checked"


def test_no_mixer_of_the_suite_is_refused_compiled():
    assert {name: compile_refusal(name) for name in MIXERS.names()} == dict.fromkeys(MIXERS.names())


def gradients(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every parameter's gradient of the cross-entropy of `model` at every position, in float64."""
    model.zero_grad(set_to_none=True)
    logits = model(inputs)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), targets.flatten()).backward()
    return {name: p.grad.double() for name, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("mixer", compiled_mixers())
def test_compiled_blocks_compute_the_eager_gradients(mixer, monkeypatch):
    """Each block compiled as `train.compile=true` compiles it, one thread (inductor's single-threaded code is where
    the concatenating chunk scan's backward went wrong, docs/operator.md): the gradient of every parameter within a
    few float32 roundings of float64's at 64, 256 and 1,024 tokens, as close as the eager float32 gradient is."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", torch._dynamo.config.recompile_limit)
    torch.set_num_threads(1)
    torch._dynamo.reset()
    try:
        cfg = dict(mixer=mixer, d_model=16, n_layers=2, vocab_size=64, max_len=1024, attention_heads=2,
                   deltanet_heads=1)
        eager = build_model(cfg, seed=0)
        reference = copy.deepcopy(eager).double()
        compiled = copy.deepcopy(eager)
        compile_blocks(compiled, TrainConfig(compile=True))
        generator = torch.Generator().manual_seed(0)
        for T in (64, 256, 1024):
            inputs, targets = torch.randint(0, 64, (2, 2, T), generator=generator)
            exact, rounded = gradients(reference, inputs, targets), gradients(eager, inputs, targets)
            for name, got in gradients(compiled, inputs, targets).items():
                scale = exact[name].norm()
                eager_error = float((rounded[name] - exact[name]).norm() / scale)
                compiled_error = float((got - exact[name]).norm() / scale)
                assert compiled_error <= max(20 * eager_error, 1e-5), (T, name, compiled_error, eager_error)
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("mixer", compiled_mixers())
def test_a_compiled_run_has_the_eager_runs_losses(mixer, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", torch._dynamo.config.recompile_limit)
    torch._dynamo.reset()
    eager, compiled = losses(tmp_path, mixer, False), losses(tmp_path, mixer, True)
    assert len(eager) == len(compiled) == STEPS
    # a fused or reordered sum rounds differently, and training carries the difference on: a few float32 units
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
    assert compiled != eager or mixer == "attention"  # the compiled code ran (it rounds differently)


@pytest.mark.slow
def test_a_compiled_run_of_several_lengths_runs_no_block_eagerly(tmp_path, monkeypatch):
    """The paper's MQAR mixture (64, 128 and 256 tokens) and its five evaluation sets, each ending on a smaller batch:
    more variants of each block than torch's default recompile limit (8) allows, none of them left eager."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", torch._dynamo.config.recompile_limit)
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", True)
    torch._dynamo.reset()
    cfg = load_run_config("configs/mqar_paper.yaml", [
        "model.d_model=16", "model.attention_heads=1", "data.batch_size=8", "data.val_size=12", "data.test_size=12",
        "train.max_steps=12", "train.val_every=6", "train.compile=true", "logger.wandb.mode=disabled",
        "logger.progress=false", f"out_dir={tmp_path / 'run'}"])
    assert train(cfg)["status"] in ("max_steps", "early_stopped")
    torch._dynamo.reset()


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
