"""`train.init_from`: a finished run's final weights by name, the others at initialisation, one clear error
for weights that do not fit, and a warm-started run that continues where its source stopped."""

from __future__ import annotations

import pytest
import torch

from loglinear.models import build_model
from loglinear.runs.config import ConfigError
from loglinear.runs.init_from import load_initial_weights
from loglinear.runs.train import train

from .test_train import tiny


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """A tiny attention run that early-stopped above 99%, and its final weights."""
    folder = tmp_path_factory.mktemp("source")
    result = train(tiny(folder, name="run"))
    assert result["status"] == "early_stopped"
    state = torch.load(folder / "run" / "last.ckpt", weights_only=True)["state_dict"]
    return folder / "run", {k.removeprefix("model."): v for k, v in state.items()}


def model_of(tmp_path, *extra):
    return build_model(tiny(tmp_path, *extra).model)


def test_weights_are_copied_by_name_and_the_others_keep_their_initialisation(tmp_path, solved):
    run_dir, weights = solved
    torch.manual_seed(7)
    fresh = model_of(tmp_path, "model.mlp_ratio=2.0").state_dict()
    torch.manual_seed(7)
    model = model_of(tmp_path, "model.mlp_ratio=2.0")  # an MLP the source does not have
    missing = load_initial_weights(model, run_dir)
    assert sorted(missing) == sorted(k for k in model.state_dict() if k.split(".")[2:3] in (["mlp"], ["mlp_norm"]))
    assert missing
    for name, value in model.state_dict().items():
        expected = fresh[name] if name in missing else weights[name]
        assert torch.equal(value, expected), name


def test_a_shape_mismatch_is_one_error_naming_each_weight(tmp_path, solved):
    run_dir, _ = solved
    model = model_of(tmp_path, "model.attention_heads=1", "model.d_model=16")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError, match=r"does not fit this model: .*embedding\.weight \(16, 16\) here but "
                                          r"\(16, 32\) there.*blocks\.0\.mixer\.qkv\.weight"):
        load_initial_weights(model, run_dir)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing half-loaded


def test_weights_this_model_has_no_place_for_are_an_error(tmp_path, solved):
    run_dir, _ = solved
    with pytest.raises(ConfigError, match=r"blocks\.1\.mixer\.qkv\.weight \(no such weight here\)"):
        load_initial_weights(model_of(tmp_path, "model.n_layers=1"), run_dir)


def test_an_unfinished_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is not a finished run"):
        load_initial_weights(model_of(tmp_path), tmp_path / "nothing")


def test_a_warm_started_run_continues_from_its_source(tmp_path, solved):
    """The source solved the task, so the new run (another seed) is above 99% at its first validation."""
    run_dir, _ = solved
    result = train(tiny(tmp_path, f"train.init_from={run_dir}", "train.seed=5"))
    assert result["status"] == "early_stopped" and result["steps_to_threshold"] == 20
    with pytest.raises(ConfigError, match="does not fit"):
        train(tiny(tmp_path, f"train.init_from={run_dir}", "model.d_model=16", "model.attention_heads=1",
                   name="mismatch"))
