"""A mixer written outside the package (examples/causal_conv_mixer.py), named by its import path: its own options
are checked like the suite's keys, it decodes as it runs in parallel, a run trains it, and its id holds the path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loglinear.cli import main
from loglinear.models import ModelConfig, build_model
from loglinear.models.mixers import MIXERS, check_model
from loglinear.runs.config import ConfigError, load_run_config, run_id
from loglinear.runs.train import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PATH = "causal_conv_mixer:CausalConvMixer"
TINY = [
    "data.task=mqar", "data.task_args.vocab_size=16", "data.task_args.seq_len=8", "data.task_args.num_kv_pairs=1",
    "data.batch_size=16", "data.val_size=32", "data.test_size=32", "model.d_model=16",
    "train.max_steps=4", "train.val_every=2", "logger.wandb.mode=disabled", "logger.progress=false",
]


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_registry_imports_it_by_its_path():
    mixer = MIXERS[PATH]
    assert mixer.__name__ == "CausalConvMixer" and PATH in MIXERS and "causal_conv_mixer:Nothing" not in MIXERS
    assert "causal_conv" not in MIXERS  # not registered: found by its path only


def test_its_options_are_typed_and_checked_with_the_closest_name():
    cfg = ModelConfig(mixer=PATH, d_model=16, mixer_options={"width": 3, "gate": False})
    assert MIXERS[PATH].read_options(check_model(cfg)).width == 3
    for options, message in (({"widht": 3}, r"mixer_options.widht: .*Did you mean: 'width'"),
                             ({"width": "wide"}, r"mixer_options.width: .*could not be converted"),
                             ({"width": 0}, r"mixer_options.width must be >= 1")):
        with pytest.raises(ValueError, match=message):
            check_model(ModelConfig(mixer=PATH, mixer_options=options))


@pytest.mark.parametrize("gate", [True, False])
def test_decoding_token_by_token_reproduces_the_parallel_forward(gate):
    model = build_model(ModelConfig(mixer=PATH, d_model=16, vocab_size=16, max_len=16,
                                    mixer_options={"width": 3, "gate": gate}), seed=0).double()
    tokens = torch.randint(0, 16, (2, 9))
    cache = model.init_cache(2)
    steps = []
    for t in range(tokens.shape[1]):
        logits, cache = model.step(tokens[:, t], cache)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), model(tokens))


def test_a_run_trains_it_and_its_id_holds_the_path(tmp_path):
    cfg = load_run_config(None, [*TINY, f"model.mixer={PATH}", "model.mixer_options.width=2", f"out_dir={tmp_path}"])
    result = train(cfg)
    assert result["status"] == "max_steps" and result["step"] == 4
    plain = load_run_config(None, [*TINY, f"model.mixer={PATH}", f"out_dir={tmp_path}"])
    assert run_id(cfg) != run_id(plain)
    with pytest.raises(ConfigError, match="Did you mean: 'width'"):
        load_run_config(None, [*TINY, f"model.mixer={PATH}", "model.mixer_options.widht=2", f"out_dir={tmp_path}"])


@pytest.mark.parametrize("body, error", [
    ("raise RuntimeError('no GPU here\\nsecond line')", "RuntimeError: no GPU here"),
    ("def broken(:\n    pass", "SyntaxError: "),
    ("import sys\nsys.exit(3)", "SystemExit: 3"),
])
def test_a_mixer_module_that_fails_on_import_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, body, error):
    (tmp_path / "bad_mixer.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert main(["train", *TINY, "model.mixer=bad_mixer:Mixer", f"out_dir={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'bad_mixer:Mixer': cannot import it (" + error in err[0], err
    assert not out.exists()


BAD_MIXERS = '''
import torch
from loglinear.models.mixer import Mixer


class Probe(Mixer):
    display_name = "probe"

    @classmethod
    def num_heads(cls, cfg):
        return 1


class OverTime(Probe):
    def forward(self, x):
        return x.mean(dim=1, keepdim=True)


class Future(Probe):
    def forward(self, x):
        return x.flip(1).cumsum(1).flip(1)


class Wide(Probe):
    def forward(self, x):
        return torch.cat([x, x], dim=-1)


class Double(Probe):
    def forward(self, x):
        return x.double()


class Infinite(Probe):
    def forward(self, x):
        return x / 0.0


class Batch(Probe):
    def forward(self, x):
        return x + x.mean(dim=0)


class NoForward(Probe):
    pass
'''


@pytest.mark.parametrize("name, error", [
    ("OverTime", "returns torch.float32 (2, 1, 16) for a torch.float32 (2, 8, 16) input"),
    ("Future", "is not causal: changing tokens 5.. of a sequence moved its output at earlier positions"),
    ("Wide", "returns torch.float32 (2, 8, 32)"),
    ("Double", "returns torch.float64 (2, 8, 16)"),
    ("Infinite", "is not finite"),
    ("Batch", "mixes the sequences of a batch"),
    ("NoForward", "has no forward(x)"),
])
def test_a_mixer_whose_output_is_wrong_is_refused_in_one_line_naming_it(tmp_path, monkeypatch, capsys, name, error):
    (tmp_path / "bad_outputs.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert main(["train", *TINY, f"model.mixer=bad_outputs:{name}", f"out_dir={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'bad_outputs:{name}'" in err[0] and error in err[0], err
    assert not out.exists()


def test_the_output_check_leaves_the_random_stream_as_it_was():
    torch.manual_seed(3)
    state = torch.random.get_rng_state()
    check_model(ModelConfig(mixer=PATH, d_model=16, mixer_options={"width": 3}))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_the_output_check_follows_the_class_not_the_name(monkeypatch):
    """A suite class is trusted by whatever names it (its import path too); a class outside the suite is checked."""
    checked = []
    monkeypatch.setattr("loglinear.models.mixers.check_output", lambda mixer, cfg: checked.append(mixer))
    for name in ("mamba2", "loglinear.models.mamba2:Mamba2", PATH):
        check_model(ModelConfig(mixer=name, d_model=16))
    assert checked == [MIXERS[PATH]]
