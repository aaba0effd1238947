"""DataConfig presets, the resumable training stream, fixed evaluation sets and the DataModule."""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf.errors import ConfigKeyError, ValidationError
from torch.utils.data import DataLoader

from loglinear.synthetics import DataConfig, SyntheticDataModule, get_task, load_data_config
from loglinear.synthetics.config import as_data_config, training_set
from loglinear.synthetics.seeding import EPOCH, FIXED, derive_seed, make_generator
from loglinear.synthetics.streams import FixedBatches, TrainStream, component_sizes, fixed_chunks

PRESETS = sorted((Path(__file__).parents[2] / "configs" / "data").glob("*.yaml"))
SMALL = {
    "task": "mqar", "task_args": {"vocab_size": 32, "seq_len": 16, "num_kv_pairs": [1, 2, 4]},
    "eval_sets": [{}, {"seq_len": 32}, {"name": "many", "seq_len": 32, "num_kv_pairs": 6}],
    "batch_size": 4, "val_size": 10, "test_size": 6, "seed": 3,
}


def same(a: dict, b: dict) -> bool:
    return (
        torch.equal(a["inputs"], b["inputs"]) and torch.equal(a["targets"], b["targets"])
        and a["slices"].keys() == b["slices"].keys()
        and all(torch.equal(a["slices"][k], b["slices"][k]) for k in a["slices"])
    )


def test_presets_cover_every_task():
    names = {p.stem for p in PRESETS}
    assert {"mqar_paper", "mqar_paper_256", "mqar_based", "mqar_cpu", "parity", "cycle_nav", "mod_arith",
            "mod_arith_brackets", "s3", "s5", "a5", "s5_transpositions", "flip_flop"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_loads_and_every_set_samples(path):
    module = SyntheticDataModule(load_data_config(path))
    for task_set in [module.train_set, *module.val_sets, *module.test_sets]:
        for task in task_set.tasks:
            assert task.sample(2, 0).inputs.shape == (2, task.seq_len)
    if path.stem not in ("mqar_based", "mqar_paper"):  # their test sets are named by their settings
        assert module.test_set_names[0] == "iid"
    assert len(set(module.test_set_names)) == len(module.test_set_names)


def test_length_generalisation_is_one_override_away():
    config = load_data_config(PRESETS[0].with_name("parity.yaml"), ["eval_sets=[{seq_len: 1024}]"])
    assert [s.tasks[0].seq_len for s in SyntheticDataModule(config).test_sets] == [1024]


def test_unknown_config_key_is_rejected_with_a_hint():
    with pytest.raises(ConfigKeyError, match="Did you mean"):
        SyntheticDataModule({**SMALL, "batch_sise": 4})
    with pytest.raises(ValidationError):
        SyntheticDataModule({**SMALL, "batch_size": "many"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"val_size": 0}, "val_size must be >= 1, got 0"),
        ({"num_workers": -1}, "num_workers must be >= 0, got -1"),
        ({"validate_on": "test"}, r"validate_on must be one of \['train', 'eval_sets'\]"),
        ({"mixture": [{"seq_len": 16, "weight": 0}]}, r"mixture\[0\].weight must be a positive number, got 0"),
        ({"eval_sets": [{"seq_len": 32}, {"seq_len": 32}]}, r"names must be unique, \['seq_len=32'\] repeat"),
        ({"eval_sets": [{"vocab_size": 64}]}, "set 'vocab_size=64' has vocab_size 64 but the training task has 32"),
        ({"eval_sets": [{"num_kv_pairs": 5}]}, r"4 \* num_kv_pairs <= seq_len"),
        ({"task_args": {"seq_len": 16, "vocab_sise": 32}}, r"unknown argument\(s\) \['vocab_sise'\]"),
    ],
)
def test_bad_config_values_raise(change, message):
    with pytest.raises(ValueError, match=message):
        SyntheticDataModule({**SMALL, **change})


def test_stream_resumed_at_step_k_is_the_tail_of_the_full_stream():
    train = training_set(DataConfig(**SMALL))
    full = list(itertools.islice(TrainStream(train, 4, seed=3), 10))
    resumed = list(itertools.islice(TrainStream(train, 4, seed=3, start_step=6), 4))
    assert all(same(a, b) for a, b in zip(full[6:], resumed, strict=True))
    assert not same(full[0], full[1])


@pytest.mark.parametrize("start", [0, 5])
def test_workers_split_steps_without_duplicates_in_step_order(start):
    stream = TrainStream(training_set(DataConfig(**SMALL)), 4, seed=3, start_step=start)
    loaded = list(itertools.islice(DataLoader(stream, batch_size=None, num_workers=2), 6))
    assert all(same(batch, stream.batch(start + n)) for n, batch in enumerate(loaded))


def test_data_parallel_ranks_draw_different_batches():
    train = training_set(DataConfig(**SMALL))
    single = TrainStream(train, 4, seed=3).batch(2)
    rank0, rank1 = (TrainStream(train, 4, seed=3, rank=r, world_size=2).batch(2) for r in (0, 1))
    assert not same(rank0, rank1) and same(TrainStream(train, 4, seed=3, world_size=1).batch(2), single)


def test_mixture_picks_one_component_per_batch_by_weight():
    config = DataConfig(
        task="parity", task_args={"seq_len": 8},
        mixture=[{"seq_len": 8, "weight": 3}, {"seq_len": 16, "weight": 1}], batch_size=2,
    )
    stream = TrainStream(training_set(config), 2, seed=0)
    lengths = [stream.batch(step)["inputs"].shape[1] for step in range(4000)]
    assert abs(lengths.count(8) / 4000 - 0.75) < 0.03
    assert [TrainStream(training_set(config), 2, seed=0).batch(s)["inputs"].shape[1] for s in range(50)] == lengths[:50]


def test_fixed_sets_have_their_sizes_names_and_eval_set_slice():
    module = SyntheticDataModule(SMALL)
    assert module.val_set_names == ["train"]
    assert module.test_set_names == ["iid", "seq_len=32", "many"]
    test = list(module.test_dataloader())
    assert [len(b["inputs"]) for b in test] == [4, 2, 4, 2, 4, 2]
    assert [b["slices"]["eval_set"].tolist() for b in test[:2]] == [[0] * 4, [0] * 2]
    assert [b["inputs"].shape[1] for b in test] == [16, 16, 32, 32, 32, 32]
    assert (test[4]["slices"]["num_kv_pairs"] == 6).all()
    assert sum(len(b["inputs"]) for b in module.val_dataloader()) == 10


def test_validation_on_eval_sets_uses_validation_seeds():
    module = SyntheticDataModule({**SMALL, "validate_on": "eval_sets", "test_size": 10})
    assert module.val_set_names == module.test_set_names
    val, test = list(module.val_dataloader()), list(module.test_dataloader())
    assert [b["inputs"].shape for b in val[:4]] == [b["inputs"].shape for b in test[:4]]
    assert not any(same(v, t) for v, t in zip(val, test, strict=True))


def test_evaluation_sets_are_fixed_and_disjoint_from_training():
    module = SyntheticDataModule(SMALL)
    val = list(module.val_dataloader())
    assert all(same(a, b) for a, b in zip(val, module.val_dataloader(), strict=True))
    train = list(itertools.islice(module.train_dataloader(), 50))
    assert not any(same(v, t) for v in val for t in train if v["inputs"].shape == t["inputs"].shape)
    assert len(FixedBatches(module.val_sets, 10, 4, 3, "validation")) == 3


class RecordingModule(L.LightningModule):
    """Records a fingerprint of every training batch it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["inputs"][0].tolist())
        return (self.weight - 1).pow(2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(module: RecordingModule, data: SyntheticDataModule, max_steps: int, ckpt_path: str | None = None) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=max_steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return trainer


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated")
def test_trainer_resumed_from_a_checkpoint_sees_the_same_batches(tmp_path):
    straight = RecordingModule()
    fit(straight, SyntheticDataModule(SMALL), max_steps=8)
    first = RecordingModule()
    trainer = fit(first, SyntheticDataModule(SMALL), max_steps=5)
    trainer.save_checkpoint(tmp_path / "step5.ckpt")
    resumed = RecordingModule()
    fit(resumed, SyntheticDataModule(SMALL), max_steps=8, ckpt_path=str(tmp_path / "step5.ckpt"))
    assert len(straight.seen) == 8 and first.seen == straight.seen[:5] and resumed.seen == straight.seen[5:]


def test_explicit_start_step_overrides_the_trainer():
    data = SyntheticDataModule(SMALL)
    data.set_start_step(7)
    assert same(next(iter(data.train_dataloader())), TrainStream(data.train_set, 4, seed=3).batch(7))
    with pytest.raises(ValueError, match="start step must be >= 0, got -1"):
        data.set_start_step(-1)
    with pytest.raises(ValueError, match="start step must be an integer, got 2.0"):
        data.set_start_step(2.0)


def test_a_fixed_training_set_is_drawn_once_and_cycled_by_epochs():
    config = as_data_config({"task": "parity", "task_args": {"seq_len": 8}, "batch_size": 4, "train_size": 10,
                             "seed": 3})
    fixed = TrainStream(training_set(config), 4, seed=3, train_size=10)
    (task,) = training_set(config).tasks
    drawn = torch.cat([chunk["inputs"] for chunk in fixed_chunks(task, 3, 10)])
    assert drawn.shape == (10, 8)
    epochs = [torch.cat([fixed.batch(3 * e + b)["inputs"] for b in range(3)]) for e in range(3)]
    assert [len(fixed.batch(b)["inputs"]) for b in range(3)] == [4, 4, 2]
    for epoch in epochs:  # every example once per epoch
        assert sorted(map(tuple, epoch.tolist())) == sorted(map(tuple, drawn.tolist()))
    assert not torch.equal(epochs[0], epochs[1])  # each epoch in its own order
    again = TrainStream(training_set(config), 4, seed=3, train_size=10, start_step=4)
    assert torch.equal(next(iter(again))["inputs"], fixed.batch(4)["inputs"])  # a resumed run sees the same
    module = SyntheticDataModule(config)
    assert torch.equal(next(iter(module.train_dataloader()))["inputs"], fixed.batch(0)["inputs"])


@pytest.mark.parametrize("size", [10, 300, 600])
def test_a_fixed_training_set_is_the_same_whatever_the_batch_size(size):
    """A sweep that varies data.batch_size at one data.train_size compares runs on one training set."""
    config = as_data_config({"task": "mqar", "task_args": {"vocab_size": 64, "seq_len": 16, "num_kv_pairs": 4},
                             "train_size": size})
    epochs = []
    for batch_size in (4, 10, 128, size):
        stream = TrainStream(training_set(config), batch_size, seed=0, train_size=size)
        batches = -(-size // batch_size)
        epoch = torch.cat([stream.batch(b)["inputs"] for b in range(batches)])
        epochs.append(sorted(map(tuple, epoch.tolist())))
    assert all(epoch == epochs[0] for epoch in epochs) and len(epochs[0]) == size
    smaller = TrainStream(training_set(config), size, seed=0, train_size=size // 2).batch(0)["inputs"]
    assert set(map(tuple, smaller.tolist())) <= set(epochs[0])  # a smaller set is the larger one's start


def test_a_fixed_training_set_needs_a_positive_size():
    with pytest.raises(ValueError, match="train_size must be >= 1, got 0"):
        as_data_config({"task": "parity", "train_size": 0})


def test_component_sizes_share_the_set_by_weight():
    assert component_sizes([100000, 20000, 20000, 20000, 20000], 180000) == [100000, 20000, 20000, 20000, 20000]
    assert component_sizes([1, 1, 1], 10) == [4, 3, 3]
    assert component_sizes([5, 1], 3) == [3, 0]
    assert sum(component_sizes([0.3, 0.7, 2.5], 1001)) == 1001


def _mixture(size):
    return as_data_config({"task": "mqar", "task_args": {"vocab_size": 64},
                           "mixture": [{"seq_len": 16, "num_kv_pairs": 2, "weight": 60},
                                       {"seq_len": 32, "num_kv_pairs": 4, "weight": 30},
                                       {"seq_len": 32, "num_kv_pairs": 8, "weight": 10}],
                           "train_size": size})


def _epoch(stream, batches):
    return [stream.batch(b) for b in range(batches)]


def test_a_mixture_s_fixed_set_holds_each_component_s_share_once_an_epoch():
    config = _mixture(100)
    train = training_set(config)
    stream = TrainStream(train, 8, seed=2, train_size=100)
    sets = [torch.cat([c["inputs"] for c in fixed_chunks(task, 2, n, i)])
            for i, (task, n) in enumerate(zip(train.tasks, [60, 30, 10], strict=True))]
    batches = 8 + 4 + 2  # ceil(60 / 8) + ceil(30 / 8) + ceil(10 / 8)
    for epoch in range(2):
        seen = [[] for _ in sets]
        for batch in _epoch(stream, batches * (epoch + 1))[batches * epoch:]:
            pairs = set(batch["slices"]["num_kv_pairs"].tolist())
            assert len(pairs) == 1  # a batch holds one component, as the fresh stream's do
            seen[[2, 4, 8].index(pairs.pop())] += map(tuple, batch["inputs"].tolist())
        for drawn, got in zip(sets, seen, strict=True):
            assert sorted(got) == sorted(map(tuple, drawn.tolist()))
    first, second = (torch.cat([b["inputs"][:, :16] for b in _epoch(stream, 2 * batches)[e * batches:][:batches]])
                     for e in range(2))
    assert not torch.equal(first, second)  # each epoch in its own order
    again = TrainStream(train, 8, seed=2, start_step=17, train_size=100)
    assert torch.equal(next(iter(again))["inputs"], stream.batch(17)["inputs"])  # a resumed run sees the same


def test_a_mixture_s_fixed_set_is_the_same_whatever_the_batch_size():
    config = _mixture(700)
    sets = []
    for batch_size in (8, 64, 300):
        stream = TrainStream(training_set(config), batch_size, seed=0, train_size=700)
        batches = sum(-(-n // batch_size) for n in (420, 210, 70))
        sets.append(sorted(map(tuple, (x for b in _epoch(stream, batches) for x in b["inputs"].tolist()))))
    assert sets[0] == sets[1] == sets[2] and len(sets[0]) == 700


def test_a_single_task_s_fixed_set_is_what_it_was():
    """The draws and the order of a single task's fixed set are keyed as before a mixture could have one."""
    config = as_data_config({"task": "parity", "task_args": {"seq_len": 8}, "train_size": 10})
    (task,) = training_set(config).tasks
    drawn = torch.cat([c["inputs"] for c in fixed_chunks(task, 3, 10)])
    assert torch.equal(drawn, task.sample(256, derive_seed(3, FIXED, 0)).to_dict()["inputs"][:10])
    order = torch.randperm(10, generator=make_generator(derive_seed(3, EPOCH, 1)))
    batch = TrainStream(training_set(config), 4, seed=3, train_size=10).batch(4)  # epoch 1, batch 1
    assert torch.equal(batch["inputs"], drawn[order[4:8]])


def test_a_data_module_trains_on_a_mixture_s_fixed_set():
    module = SyntheticDataModule(_mixture(100))
    expected = TrainStream(module.train_set, 64, seed=0, train_size=100).batch(0)
    assert same(next(iter(module.train_dataloader())), expected)


def test_the_training_set_is_refused_when_most_of_its_batches_would_score_nothing():
    noisy = {"task": "compression", "task_args": {"vocab_size": 8, "seq_len": 3, "noise_vocab_size": 2,
                                                  "frac_noise": 0.9}}  # an example without a score: 0.81
    assert get_task("compression", **noisy["task_args"]).unscored == pytest.approx(0.81)
    training_set(as_data_config({**noisy, "batch_size": 4}))  # 0.81^4 = 43% of batches without one: accepted
    with pytest.raises(ValueError, match="66% of the training batches of batch_size 2 without a scored position"):
        training_set(as_data_config({**noisy, "batch_size": 2}))
    with pytest.raises(ValueError, match="without a scored position"):
        SyntheticDataModule({**noisy, "batch_size": 2})
