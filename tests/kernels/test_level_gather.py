"""Gradients that do not depend on the order of additions: gather_levels against torch.gather, and no
many-to-one gather left in the chunk and fused paths' autograd graphs (on CUDA a gather's backward adds with
atomics, so a many-to-one gather gives a different gradient on each call)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.kernels import LogLinearState, log_linear_attn, num_levels
from loglinear.kernels.level_gather import gather_levels, sum_per_level


@settings(deadline=None, max_examples=25)
@given(lead=st.lists(st.integers(1, 4), min_size=1, max_size=3), levels=st.integers(1, 6), m=st.integers(1, 9),
       seed=st.integers(0, 2**16))
def test_gather_levels_matches_torch_gather_forward_and_gradient(lead, levels, m, seed):
    gen = torch.Generator().manual_seed(seed)
    lam = torch.randn(*lead, levels, generator=gen, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, levels, (*lead, m), generator=gen)
    grad = torch.randn(*lead, m, generator=gen, dtype=torch.float64)
    ours = gather_levels(lam, index)
    (d_ours,) = torch.autograd.grad(ours, lam, grad)
    theirs = lam.gather(-1, index)
    (d_theirs,) = torch.autograd.grad(theirs, lam, grad)
    assert torch.equal(ours, theirs)
    torch.testing.assert_close(d_ours, d_theirs, rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=25)
@given(lead=st.lists(st.integers(1, 4), min_size=1, max_size=3), levels=st.integers(1, 6), m=st.integers(1, 9),
       seed=st.integers(0, 2**16))
def test_the_cuda_backward_sums_per_level_what_scatter_add_sums(lead, levels, m, seed):
    gen = torch.Generator().manual_seed(seed)
    index = torch.randint(0, levels, (*lead, m), generator=gen)
    grad = torch.randn(*lead, m, generator=gen, dtype=torch.float64)
    expected = torch.zeros(*lead, levels, dtype=torch.float64).scatter_add_(-1, index, grad)
    torch.testing.assert_close(sum_per_level(grad, index, levels), expected, rtol=1e-12, atol=1e-12)


def test_gather_levels_refuses_an_index_of_other_leading_shape():
    with pytest.raises(ValueError, match="leading dimensions"):
        gather_levels(torch.zeros(2, 3, 4), torch.zeros(2, 1, 5, dtype=torch.int64))


def many_to_one_gathers(root) -> list[str]:
    """The gathers in the autograd graph below `root` whose index reads one element more than once."""
    found, seen, todo = [], set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "GatherBackward0":
            index = node._saved_index
            try:
                dim = node._saved_dim
            except ValueError:  # a negative dim does not unpack; the paths gather along -1 only
                dim = -1
            if index.sort(dim).values.diff(dim=dim).eq(0).any():
                found.append(f"gather along dim {dim} of an index {tuple(index.shape)}")
        todo.extend(fn for fn, _ in node.next_functions)
    return found


@pytest.mark.parametrize("impl", ["chunk", "triton"])
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("offset", [0, [3, 21]], ids=["no-state", "state"])
def test_no_many_to_one_gather_in_the_backward(impl, delta, offset):
    if impl == "triton":
        pytest.importorskip("triton")
    B, T, H, HK, K, V = 2, 40, 2, 1, 16, 8
    gen = torch.Generator().manual_seed(0)
    offsets = [offset] * B if isinstance(offset, int) else offset
    L = num_levels(max(offsets) + T)
    q, k = torch.randn(B, T, HK, K, generator=gen), torch.randn(B, T, HK, K, generator=gen)
    k = k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(B, T, H, V, generator=gen)
    g = -torch.rand(B, T, H, generator=gen)
    lam = torch.rand(B, T, H, L, generator=gen) + 0.1
    beta = torch.rand(B, T, H, generator=gen) if delta else None
    state = None
    if any(offsets):
        state = LogLinearState(0.3 * torch.randn(B, H, L, V, K, generator=gen), torch.tensor(offsets))
    inputs = [t.requires_grad_() for t in (q, k, v, g, lam) + ((beta,) if delta else ())]
    o, final = log_linear_attn(*inputs[:5], beta=beta, initial_state=state, output_final_state=True, impl=impl,
                               chunk_size=16)
    assert many_to_one_gathers((o.sum() + final.levels.sum()).grad_fn) == []
