"""Batches are pure functions of (arguments, batch_size, seed); global RNG state is never touched."""

from __future__ import annotations

import random

import pytest
import torch

from loglinear.synthetics import TASKS, get_task
from loglinear.synthetics.seeding import TEST, TRAIN, VALIDATION, derive_seed, splitmix64

SMALL = {
    "mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": [2, 4, 8]},
    "parity": {"seq_len": 16},
    "cycle_nav": {"seq_len": 16},
    "mod_arith": {"seq_len": 16},
    "mod_arith_brackets": {"seq_len": 16, "mult": True},
    "s3": {"seq_len": 16},
    "s5": {"seq_len": 16},
    "a5": {"seq_len": 16},
    "s5_transpositions": {"seq_len": 16},
    "flip_flop": {"seq_len": 16},
    "in_context_recall": {"seq_len": 16},
    "fuzzy_in_context_recall": {"seq_len": 24},
    "noisy_in_context_recall": {"seq_len": 16},
    "selective_copying": {"seq_len": 16, "num_tokens_to_copy": 4},
    "compression": {"seq_len": 16, "noise_vocab_size": 4, "frac_noise": 0.3},
    "memorization": {"seq_len": 16},
    "forgetting_mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4, "num_updates": 2},
    "compositional_mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4},
    "niah": {"seq_len": 32, "num_needle_keys": 2},
    "stacked_mqar": {"num_keys": 8, "num_kv_pairs": 8, "num_passes": 3},
    "regbench": {"seq_len": 32, "max_string_len": 8},
}


def test_every_registered_task_is_covered():
    assert set(SMALL) == set(TASKS)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_batch_other_seed_other_batch(name):
    task = get_task(name, **SMALL[name])
    first, again, other = task.sample(32, 5), get_task(name, **SMALL[name]).sample(32, 5), task.sample(32, 6)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert first.slices.keys() == again.slices.keys()
    assert all(torch.equal(first.slices[k], again.slices[k]) for k in first.slices)
    assert not torch.equal(first.inputs, other.inputs)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_batch_contract(name):
    task = get_task(name, **SMALL[name])
    batch = task.sample(5, 0)
    seq_len = task.seq_len
    assert batch.inputs.shape == batch.targets.shape == (5, seq_len)
    assert batch.inputs.dtype == batch.targets.dtype == torch.int64
    assert batch["inputs"] is batch.inputs and batch["slices"] is batch.slices
    assert batch.inputs.min() >= 0 and batch.inputs.max() < task.vocab_size
    scored = batch.targets[batch.targets != -100]
    assert scored.numel() > 0 and scored.min() >= 0 and scored.max() < task.vocab_size
    assert torch.equal(batch.slices["seq_len"], torch.full((5,), seq_len))
    assert all(v.shape == (5,) and v.dtype == torch.int64 for v in batch.slices.values())
    if batch.allowed is not None:  # several right answers: the target is one of them, nothing where nothing is scored
        assert batch.allowed.shape == batch.targets.shape and batch.allowed.dtype == torch.int64
        scored = batch.targets != -100
        assert ((batch.allowed[scored] >> batch.targets[scored]) & 1 == 1).all()
        assert (batch.allowed[~scored] == 0).all() and (batch.allowed >> task.vocab_size == 0).all()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_global_rng_state_is_untouched(name):
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    get_task(name, **SMALL[name]).sample(16, 123)
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state


def test_global_seed_does_not_change_batches():
    task = get_task("mqar", **SMALL["mqar"])
    torch.manual_seed(0)
    first = task.sample(8, 9)
    torch.manual_seed(1)
    assert torch.equal(first.inputs, task.sample(8, 9).inputs)


def test_seed_derivation_is_stable_and_streams_are_disjoint():
    # SplitMix64 reference value (Steele, Lea, Flood 2014): first output from state 0.
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert derive_seed(0, TRAIN, 7) == derive_seed(0, TRAIN, 7) != derive_seed(1, TRAIN, 7)
    train = {derive_seed(s, TRAIN, step) for s in range(3) for step in range(20000)}
    validation = {derive_seed(s, VALIDATION, i, b) for s in range(3) for i in range(8) for b in range(200)}
    test = {derive_seed(s, TEST, i, b) for s in range(3) for i in range(8) for b in range(200)}
    assert len(train) == 60000 and len(validation) == len(test) == 4800
    assert not train & validation and not train & test and not validation & test


@pytest.mark.parametrize("name", sorted(SMALL))
def test_arguments_rebuild_the_same_task(name):
    task = get_task(name, **SMALL[name])
    rebuilt = get_task(name, **task.arguments)
    assert repr(rebuilt) == repr(task) and torch.equal(rebuilt.sample(4, 1).inputs, task.sample(4, 1).inputs)


def test_batch_mapping_access_names_its_keys():
    batch = get_task("parity", seq_len=4).sample(2, 0)
    assert batch.to_dict().keys() == {"inputs", "targets", "slices"}
    with pytest.raises(KeyError, match="'inputs', 'targets', 'slices'"):
        batch["input"]
