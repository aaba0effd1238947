"""`model.lambda_share_from_level: trained`: resolved from the training length, and every lambda level a test
length reads either gets gradient from a training batch or is tied to one that does."""

import pytest
import torch
import torch.nn.functional as F

from loglinear.kernels import num_levels
from loglinear.models import MIXERS, build_model
from loglinear.models.config import share_from_for_training_length
from loglinear.models.lambda_levels import lambda_heads
from loglinear.runs.config import ConfigError, load_run_config
from loglinear.synthetics import IGNORE_INDEX
from loglinear.synthetics.config import evaluation_sets, training_set

LOG_LINEAR = [name for name, mixer in MIXERS.items() if mixer.log_linear]
PARITY = "configs/parity_cpu.yaml"  # trained at length 40, tested at 40, 80, 160 and 320


def parity(*overrides):
    return load_run_config(PARITY, ["out_dir=unused", *overrides])


def test_trained_resolves_to_the_deepest_level_of_the_longest_training_sequence():
    cfg = parity()
    assert cfg.model.lambda_share_from_level == 6 == num_levels(40) - 1  # length 40 reaches levels 0-6
    assert cfg.model.lambda_levels == num_levels(320) == 10
    mixture = parity("data.mixture=[{seq_len: 16}, {seq_len: 70}]")
    assert mixture.model.lambda_share_from_level == num_levels(70) - 1 == 7
    assert parity("model.lambda_share_from_level=3").model.lambda_share_from_level == 3
    assert parity("model.lambda_share_from_level=null").model.lambda_share_from_level is None


def test_other_words_and_one_token_training_are_refused():
    with pytest.raises(ConfigError, match="lambda_share_from_level='auto': a model needs null or a level >= 1"):
        parity("model.lambda_share_from_level=auto")
    with pytest.raises(ValueError, match="reach level 0 only"):
        share_from_for_training_length(1)
    assert share_from_for_training_length(2) == 1


def slots_with_gradient(head) -> set[int]:
    """Slots every one of whose lambda parameters (level scale, projection rows) got a nonzero gradient."""
    n_distinct = len(head.slots)
    per_slot = [p.grad.abs().sum(0) for p in head.param.parameters()]  # (n_distinct,) each
    per_slot.append(head.proj.weight.grad.view(head.n_heads, n_distinct, -1).abs().sum((0, 2)))
    return {s for s in range(n_distinct) if all(g[s] > 0 for g in per_slot)}


def untrained_test_levels(cfg) -> dict[int, list[int]]:
    """Per test length: the levels it reads whose lambda gets no gradient from one training batch."""
    model = build_model(cfg.model, seed=cfg.train.seed)
    batch = training_set(cfg.data).tasks[0].sample(cfg.data.batch_size, 0)
    mask = batch.targets != IGNORE_INDEX
    F.cross_entropy(model(batch.inputs, mask), batch.targets[mask]).backward()
    test_lengths = sorted({task.seq_len for s in evaluation_sets(cfg.data) for task in s.tasks})
    assert test_lengths == [40, 80, 160, 320]
    untrained = {}
    for head in lambda_heads(model):
        trained = slots_with_gradient(head)
        for length in test_lengths:
            levels = [lvl for lvl in range(num_levels(length)) if int(head.index[lvl]) not in trained]
            if levels:
                untrained[length] = levels
    return untrained


@pytest.mark.parametrize("mixer", LOG_LINEAR)
def test_every_level_a_test_length_reads_is_trained_or_tied_to_a_trained_one(mixer):
    torch.manual_seed(0)
    assert untrained_test_levels(parity(f"model.mixer={mixer}")) == {}
    # without the tying, the levels only the longer test lengths reach get no gradient (what the option fixes)
    untied = untrained_test_levels(parity(f"model.mixer={mixer}", "model.lambda_share_from_level=null"))
    assert untied == {80: [7], 160: [7, 8], 320: [7, 8, 9]}


def test_the_state_tracking_presets_tie_the_untrained_levels():
    from loglinear.sweeps.spec import expand, load_spec

    for spec in ("configs/sweeps/state_tracking_cpu.yaml", "configs/sweeps/state_tracking_s3_cpu.yaml"):
        for run in expand(load_spec(spec)):
            train_len = max(task.seq_len for task in training_set(run.config.data).tasks)
            assert run.config.model.lambda_share_from_level == num_levels(train_len) - 1, spec
