"""The packed step never reads a value of the device on the host: no `.item()`, no branch on a tensor, no shape
that depends on the data, so that it can run ahead of the device and be captured whole."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from loglinear.models import build_model
from loglinear.packing.batches import PackedBatch
from loglinear.packing.step import PackedStep
from loglinear.synthetics import SyntheticDataModule
from loglinear.synthetics.streams import TrainStream

from .pairs import configs
from .test_train import MIXERS

aten = torch.ops.aten
HOST_READS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
              aten.unique_consecutive.default, aten._unique2.default}
"""What reads the device on the host: a scalar (`.item()`, `bool(tensor)`) or an output whose shape is the data's."""


class HostReads(TorchDispatchMode):
    """The operators of HOST_READS called inside, and indexing by a boolean mask (a `nonzero` inside its kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        masks = func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1])
        if func in HOST_READS or masks:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("model", MIXERS)
def test_a_packed_step_reads_nothing_of_the_device_on_the_host(tmp_path, model):
    cfgs = configs(tmp_path, "packed", model)
    step = PackedStep([build_model(c.model, seed=c.train.seed) for c in cfgs], [c.train for c in cfgs],
                      torch.device("cpu"))
    data = SyntheticDataModule(cfgs[0].data)
    data.setup("fit")
    batch = PackedBatch.of([TrainStream(data.train_set, c.data.batch_size, c.data.seed).batch(0) for c in cfgs])
    reads = HostReads()
    with reads:
        for t, logging in enumerate((False, True)):  # a step without and a step with its train metrics
            step(t, batch, contextlib.nullcontext, logging)
    assert reads.seen == []
    assert len(step.read()["rows"]) == 1  # and the step did train: one logged row kept on the device
