"""Every bad input raises a ValueError/TypeError that names the argument and the expected shape."""

import pytest
import torch

from loglinear.kernels import LogLinearState, log_linear_attn, log_linear_attn_step, value_checks

from .helpers import make_inputs


@pytest.fixture
def x():
    return make_inputs(2, 10, 3, 4, 5, delta=True, dtype=torch.float32)


def call(x, **overrides):
    args = dict(q=x.q, k=x.k, v=x.v, g=x.g, lam=x.lam, beta=x.beta)
    kw = {k: overrides.pop(k) for k in list(overrides) if k not in args}
    args.update(overrides)
    return log_linear_attn(args["q"], args["k"], args["v"], args["g"], args["lam"], args["beta"], **kw)


@pytest.mark.parametrize(
    "name,bad,match",
    [
        ("q", lambda x: x.q[..., 0], r"q must have shape \(B, T, H, K\)"),
        ("k", lambda x: x.k[..., :3], r"k must have shape \(B, T, H, K\) = \(2, 10, 3, 4\), got \(2, 10, 3, 3\)"),
        ("v", lambda x: x.v[:, :9], r"v must have shape \(B, T, H, V\) = \(2, 10, 3, 5\), got \(2, 9, 3, 5\)"),
        ("v", lambda x: x.v[..., 0], r"v must have shape \(B, T, H, V\)"),
        ("g", lambda x: x.g[..., None], r"g must have shape \(B, T, H\) = \(2, 10, 3\), got \(2, 10, 3, 1\)"),
        (
            "lam",
            lambda x: x.lam[:, :, :2],
            r"lam must have shape \(B, T, H, L\) = \(2, 10, 3, 5\), got \(2, 10, 2, 5\)",
        ),
        ("beta", lambda x: x.beta[:1], r"beta must have shape \(B, T, H\) = \(2, 10, 3\), got \(1, 10, 3\)"),
        ("q", lambda x: x.q[:, :0], r"T >= 1"),
        ("v", lambda x: x.v[:, :, :2], r"v has 2 heads, which is not a multiple of q's 3"),
    ],
)
def test_shape_errors_name_the_argument(x, name, bad, match):
    with pytest.raises(ValueError, match=match):
        call(x, **{name: bad(x)})


def test_type_errors(x):
    with pytest.raises(TypeError, match="k must be a floating-point tensor"):
        call(x, k=x.k.to(torch.int64))
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        call(x, v=x.v.tolist())
    with pytest.raises(TypeError, match="state must be a LogLinearState"):
        call(x, initial_state=(x.q, 0))


def test_device_mismatch(x):
    with pytest.raises(ValueError, match="g is on meta but q is on cpu"):
        call(x, g=x.g.to("meta"))


def test_too_few_lambda_levels_is_an_error_not_a_truncation(x):
    with pytest.raises(ValueError, match=r"lam has 4 levels but 5 are needed for positions up to 10"):
        call(x, lam=x.lam[..., :4])


def test_levels_needed_count_the_initial_position(x):
    state = LogLinearState.zeros(2, 3, 5, 5, 4)
    state.position = torch.tensor([3, 20])
    with pytest.raises(ValueError, match=r"lam has 5 levels but 6 are needed for positions up to 30"):
        call(x, initial_state=state)


def test_positive_log_decay_and_non_finite_values(x):
    with pytest.raises(ValueError, match="g is the log of a decay in \\(0, 1\\] and must be <= 0"):
        call(x, g=x.g.abs() + 0.1)
    nan_v = x.v.clone()
    nan_v[0, 3, 1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"v of shape \(2, 10, 3, 5\) has non-finite values"):
        call(x, v=nan_v)
    with value_checks(False):
        call(x, g=x.g.abs() + 0.1)  # the caller took responsibility


@pytest.mark.parametrize("beta", [-0.1, 2.5])
def test_beta_outside_0_2_is_refused(x, beta):
    bad = x.beta.clone()
    bad[1, 4, 2] = beta
    with pytest.raises(ValueError, match=r"beta must be in \[0, 2\]"):
        call(x, beta=bad)
    call(x, beta=torch.full_like(x.beta, 2.0))  # the edges are allowed: beta = 2 reflects
    call(x, beta=torch.zeros_like(x.beta))


@pytest.mark.parametrize("chunk_size", [0, 3, 48, -4, 2.0])
def test_chunk_size_must_be_a_power_of_two(x, chunk_size):
    with pytest.raises(ValueError, match="chunk_size must be a power of two"):
        call(x, chunk_size=chunk_size)


def test_unknown_impl_lists_valid_names(x):
    with pytest.raises(ValueError, match="unknown impl 'fast'; valid: auto, naive, recurrent, chunk"):
        call(x, impl="fast")


def test_state_errors(x):
    bad_levels = LogLinearState.zeros(2, 3, 5, 4, 4)  # V and K swapped
    with pytest.raises(ValueError, match=r"state.levels must have shape \(B, H, L, V, K\) = \(2, 3, L, 5, 4\)"):
        call(x, initial_state=bad_levels)
    bad_position = LogLinearState.zeros(2, 3, 5, 5, 4)
    bad_position.position = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"state.position must be an int64 tensor of shape \(B,\) = \(2,\)"):
        call(x, initial_state=bad_position)
    with pytest.raises(ValueError, match="state has 5 levels but lam_t has 3"):
        log_linear_attn_step(*x.at(0)[:4], x.lam[:, 0, :, :3], x.beta[:, 0], state=LogLinearState.zeros(2, 3, 5, 5, 4))
    with pytest.raises(ValueError, match="lam=None decodes a single-level state"):
        log_linear_attn_step(*x.at(0)[:4], None, x.beta[:, 0], state=LogLinearState.zeros(2, 3, 5, 5, 4))


def test_step_shape_errors_use_step_letters(x):
    q, k, v, g, lam, beta = x.at(0)
    with pytest.raises(ValueError, match=r"k must have shape \(B, H, K\) = \(2, 3, 4\), got \(2, 3, 2\)"):
        log_linear_attn_step(q, k[..., :2], v, g, lam, beta)


def test_every_implementation_states_its_contract():
    from loglinear.kernels import IMPLS

    for name, implementation in IMPLS.items():
        assert all([implementation.dtypes, implementation.grouped_heads, implementation.chunk_sizes,
                    implementation.states]), name
    assert [name for name, i in IMPLS.items() if i.reads_grouped_heads] == ["triton"]


def test_triton_limits_are_checked_at_the_entry():
    pytest.importorskip("triton")
    wide = make_inputs(1, 4, 1, 65, 2, delta=True, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"impl='triton' supports K <= 64 for delta rule .*, got K=65"):
        call(wide, impl="triton")
    wider = make_inputs(1, 4, 1, 129, 2, delta=False, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"impl='triton' supports K <= 128 for scalar decay .*, got K=129"):
        call(wider, impl="triton")
    with pytest.raises(TypeError, match="float64 inputs need impl='chunk'"):
        call(make_inputs(1, 4, 1, 2, 2, delta=False), impl="triton")


@pytest.mark.parametrize("C", [8, 24, 512])
def test_fused_chunk_size_contract(C):
    pytest.importorskip("triton")
    from loglinear.kernels.fused.common import check_chunk_size

    with pytest.raises(ValueError, match=f"16 to LEVEL_OF_LIMIT = 256 tokens .* got {C}"):
        check_chunk_size(C)
    check_chunk_size(256)
