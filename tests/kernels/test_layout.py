"""The chunk map: a call without an initial state builds it on the host (`ChunkLayout.at_start`), equal to the
general `ChunkLayout.build` at position 0, so that torch.compile traces the chunkwise operator in one graph."""

from __future__ import annotations

import pytest
import torch

from loglinear.kernels.chunk import chunk_log_linear_attn
from loglinear.kernels.layout import ChunkLayout
from loglinear.kernels.variant import Variant
from tests.kernels.helpers import make_inputs


@pytest.mark.parametrize(("B", "T", "C"), [(1, 1, 1), (3, 16, 16), (2, 17, 16), (4, 100, 32), (2, 5, 64)])
def test_the_layout_at_start_is_the_general_one_at_position_zero(B, T, C):
    host = ChunkLayout.at_start(B, T, C, torch.device("cpu"))
    general = ChunkLayout.build(torch.zeros(B, dtype=torch.int64), T, C)
    assert (host.C, host.T, host.N, host.aligned) == (general.C, general.T, general.N, general.aligned)
    for name in ("shift", "first", "n_chunks"):
        mine, theirs = getattr(host, name), getattr(general, name)
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name


@pytest.mark.parametrize("delta", [False, True])
def test_the_operator_without_a_state_compiles_to_one_graph(delta):
    x = make_inputs(2, 40, 2, 4, 4, delta=delta, dtype=torch.float32)
    variant = Variant.DELTA_RULE if delta else Variant.SCALAR_DECAY
    L = x.lam.shape[-1]
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(chunk_log_linear_attn)(
            *x.args(), variant, None, L, 16, need_state=False)
    finally:
        torch._dynamo.reset()
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1
