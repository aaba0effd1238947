"""The skeleton shared by the mixers that call the log-linear operator (Mamba-2, Gated DeltaNet, linear attention,
RetNet, DeltaNet, and so their log-linear variants).

    [conv_in | rest...] = W_in x                 one fused input projection
    conv_out = silu(shortconv(conv_in))          conv_out = conv_in for a mixer without a short convolution
    q, k, v, g, beta, sign = operator_inputs(conv_out, rest)        the mixer's own gating
    q, k = positioned(q, k, positions)           RetNet's rotary positions; q, k as they are for the others
    lam = lambda_head(x)                         its own projection of x; None for a base mixer (a single state)
    o = log_linear_attn(q * S, k * S, v, g, lam, beta)               S: sign prefix of a signed decay
    y = output(o, conv_out, rest)                the mixer's skip, norm and output projection

`forward` runs it over a sequence with the parallel operator, `step` over one token with the
decoding step; both share every line except the convolution and the operator call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from loglinear.checks import check_int
from loglinear.kernels import (
    Choice,
    LogLinearState,
    log_linear_attn_step,
    occupied_levels,
    resolve_impl,
    value_checks,
)
from loglinear.kernels.folded import run_impl_mappable
from loglinear.models.decay_init import A_RANGE
from loglinear.models.init import INIT_STD
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import InitLinear, ShortConv
from loglinear.models.mixer import Mixer
from loglinear.models.signed_decay import apply_sign_prefix
from loglinear.models.transition_counts import TransitionCounts, negative_eigenvalue

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


@dataclass
class OperatorInputs:
    """Inputs of the log-linear operator with or without the time axis: q, k (..., H, K), v (..., H, V),
    g, beta, sign (..., H)."""

    q: Tensor
    k: Tensor
    v: Tensor
    g: Tensor
    beta: Tensor | None = None
    sign: Tensor | None = None


@dataclass(frozen=True)
class MixerInit:
    """How a linear mixer's own parameters start (docs/runs.md, "Initialisation"); the defaults are the suite's.

    A = exp(A_log) per head by `A_rule` (decay_init.A_INITS) in `A_range`; dt = softplus(dt_bias) log-uniform
    in [DT_MIN, dt_max]; the input projection N(0, in_proj_std^2); the short convolution's weight and bias by
    `conv_weight` (layers.CONV_WEIGHT_INITS) and `conv_bias` (layers.CONV_BIAS_INITS); the output projection by
    `out_proj` (layers.LINEAR_INITS), its draw times `out_proj_gain`. Each mixer says which rules it applies
    under each `ModelConfig.init` (`init_rules`).
    """

    A_rule: str = "uniform"
    A_range: tuple[float, float] = A_RANGE
    dt_max: float = 0.1
    in_proj_std: float = INIT_STD
    conv_weight: str = "uniform"
    conv_bias: str = "uniform"
    out_proj: str = "normal"
    out_proj_gain: float = 1.0


@dataclass
class RecurrentCache:
    """Decoding state of a linear mixer: O(1) per layer, O(log T) with a lambda head.

    conv:  (B, conv channels, conv_size - 1) the last inputs of the short convolution; None without one.
    state: the operator's level state (one level for a base mixer, num_levels(max_len) with a lambda head).
    sign:  (B, H) running sign product of a signed decay, None without one.
    """

    conv: Tensor | None
    state: LogLinearState
    sign: Tensor | None


class LinearAttentionMixer(Mixer):
    """Base of the mixers that run through the log-linear operator; subclasses define the gating.

    Subclasses pass their widths to `__init__` and implement `operator_inputs` and `output`; a
    `lambda_head` (None for the base mixers) reads x through its own projection, so the input
    projection has the same shape with and without it. A mixer built with `short_conv=False` has no
    convolution: its first `conv_width` projected channels reach `operator_inputs` as they are.
    While `transition_counts` is set (`count_transitions`), `forward` adds each token's negative-eigenvalue
    transitions to it (mixers whose transitions cannot be negative count nothing).
    """

    transitions = True
    size_fields = frozenset({"expand", "conv_size"})

    def __init__(
        self, cfg: ModelConfig, *, n_heads: int, key_dim: int, value_dim: int, conv_width: int,
        rest_widths: list[int], conv_bias: bool, signed_decay: bool, lambda_head: LambdaHead | None,
        short_conv: bool = True,
    ) -> None:
        super().__init__(cfg)
        self.n_heads, self.key_dim, self.value_dim = n_heads, key_dim, value_dim
        self.signed_decay = signed_decay
        self.impl, self.chunk_size, self.selfcheck = cfg.impl, cfg.chunk_size, cfg.selfcheck
        self.choices: list[Choice] = []  # the implementations this mixer ran in this process, with their verdicts
        self.lambda_head = lambda_head
        self.widths = [conv_width, *rest_widths]
        self.init_rule = init = self.init_rules(cfg)
        self.in_proj = InitLinear(cfg.d_model, sum(self.widths), std=init.in_proj_std)
        self.conv = ShortConv(
            conv_width, cfg.conv_size, bias=conv_bias, bias_init=init.conv_bias, weight_init=init.conv_weight
        ) if short_conv else None
        self.transition_counts: TransitionCounts | None = None

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """The rules this mixer's parameters start by under `cfg` (its `init` and init options)."""
        raise NotImplementedError

    def count_transitions(self, on: bool) -> None:
        """Start counting negative-eigenvalue transitions per head in `forward` (afresh), or stop."""
        self.transition_counts = TransitionCounts(self.n_heads) if on else None

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        raise NotImplementedError

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        raise NotImplementedError

    def positioned(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q, k (..., H, K) of the tokens at `positions` (the axis before the heads: (T,) over a sequence, (B,) for
        one decoding step) after the mixer's position encoding; as they are unless the mixer has one."""
        return q, k

    def sequence_inputs(self, x: Tensor) -> tuple[OperatorInputs, Tensor, list[Tensor]]:
        """The operator's inputs for a sequence x (B, T, d_model), q and k positioned and sign-prefixed (what the
        operator reads), with conv_out and rest (what `output` reads)."""
        conv_in, rest = self._project(x)
        conv_out = conv_in if self.conv is None else self.conv(conv_in)
        inp = self.operator_inputs(conv_out, rest)
        q, k = self.positioned(inp.q, inp.k, torch.arange(x.shape[1], device=x.device))
        if inp.sign is not None:
            q, k, _ = apply_sign_prefix(q, k, inp.sign)
        return dataclasses.replace(inp, q=q, k=k), conv_out, rest

    def _project(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        conv_in, *rest = self.in_proj(x).split(self.widths, dim=-1)
        return conv_in, rest

    def forward(self, x: Tensor) -> Tensor:
        inp, conv_out, rest = self.sequence_inputs(x)
        q, k = inp.q, inp.k
        if self.transition_counts is not None:
            negative = negative_eigenvalue(inp.sign, inp.beta)
            if negative is not None:
                self.transition_counts.add(negative)
        lam = None
        if self.lambda_head is not None:
            lam = self.lambda_head.levels_for(self.lambda_head(x, inp.g), x.shape[1])
        # the implementation this call runs (on a CUDA device, after the fused kernels' self-check), recorded
        choice = resolve_impl(self.impl, q, inp.beta, selfcheck=self.selfcheck)
        if choice not in self.choices:
            self.choices.append(choice)
        # the inputs are the mixer's own (g <= 0 by construction); a non-finite value shows in the loss, so the
        # operator's value checks (a pass over every input and a host sync per call) stay off here
        chunk_size = self._chunk_size(x, delta=inp.beta is not None)
        with value_checks(False):
            o = run_impl_mappable(choice.name, q, k, inp.v, inp.g, lam, inp.beta, chunk_size=chunk_size)
        return self.output(o, conv_out, rest)

    def implementations(self) -> list[dict[str, Any]]:
        # a verdict of None: no check applies (an implementation other than triton, or not on a CUDA device)
        return [{"impl": c.name, "selfcheck": None if c.verdict is None else c.verdict.record()} for c in self.choices]

    def _chunk_size(self, x: Tensor, *, delta: bool) -> int:
        """cfg.chunk_size, on the CPU chunk path at most max(16, K, V) (the delta rule: max(16, K)) rounded up to a
        power of two.

        A chunk of C tokens costs O(C) per token in C x C matrices and saves state updates per chunk; with
        small heads long chunks only add C x C work. The delta rule's chunk also forms K x K transitions and
        C x K carried keys: there K, not V, sets where a longer chunk stops paying (benchmarks/RESULTS.md).
        Any chunk size gives the same outputs up to rounding.
        """
        if x.is_cuda or self.impl not in ("auto", "chunk"):
            return self.chunk_size
        dims = (16, self.key_dim) if delta else (16, self.key_dim, self.value_dim)
        return min(self.chunk_size, 1 << (max(dims) - 1).bit_length())

    def init_cache(self, batch_size: int, max_len: int, *, device: torch.device, dtype: torch.dtype) -> RecurrentCache:
        levels = 1
        if self.lambda_head is not None:
            if max_len > self.lambda_head.max_len:
                raise ValueError(
                    f"max_len={max_len} needs more lambda levels than the model has ({self.lambda_head.n_levels}, "
                    f"sequences up to {self.lambda_head.max_len}); build it with a larger ModelConfig.max_len"
                )
            levels = self.lambda_head.n_levels
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32  # the operator accumulates in float32
        state = LogLinearState.zeros(
            batch_size, self.n_heads, levels, self.value_dim, self.key_dim, device=device, dtype=state_dtype
        )
        sign = torch.ones(batch_size, self.n_heads, device=device, dtype=dtype) if self.signed_decay else None
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        return RecurrentCache(conv, state, sign)

    def state_size(self, seq_len: int) -> int:
        """What `RecurrentCache` holds for one sequence: the short convolution's last conv_size - 1 inputs (if any), the
        sign product of a signed decay, and H x V x K per level state: one level for a base mixer, the Fenwick
        levels occupied after seq_len tokens (kernels.fenwick.occupied_levels) with a lambda head."""
        check_int("seq_len", seq_len, minimum=1)
        levels = 1
        if self.lambda_head is not None:
            if seq_len > self.lambda_head.max_len:
                raise ValueError(
                    f"seq_len={seq_len} is longer than the model serves (max_len {self.lambda_head.max_len})"
                )
            levels = occupied_levels(seq_len)
        conv = 0 if self.conv is None else self.conv.weight.shape[0] * (self.conv.kernel_size - 1)
        sign = self.n_heads if self.signed_decay else 0
        return conv + sign + levels * self.n_heads * self.value_dim * self.key_dim

    def step(self, x_t: Tensor, cache: RecurrentCache) -> tuple[Tensor, RecurrentCache]:
        conv_in, rest = self._project(x_t)
        conv_out, conv_state = (conv_in, None) if self.conv is None else self.conv.step(conv_in, cache.conv)
        inp = self.operator_inputs(conv_out, rest)
        q, k = self.positioned(inp.q, inp.k, cache.state.position)
        sign = cache.sign
        if inp.sign is not None:
            q, k, sign = apply_sign_prefix(q[:, None], k[:, None], inp.sign[:, None], cache.sign)
            q, k = q[:, 0], k[:, 0]
        lam = None if self.lambda_head is None else self.lambda_head(x_t, inp.g)
        o, state = log_linear_attn_step(q, k, inp.v, inp.g, lam, inp.beta, cache.state)
        return self.output(o, conv_out, rest), RecurrentCache(conv_state, state, sign)
