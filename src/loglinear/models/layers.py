"""Small building blocks: RMSNorm, gated RMSNorm, causal short convolution (with a decoding step), RoPE, MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.models.init import INIT_STD

LINEAR_INITS = ("normal", "fan_in_uniform")
"""Rules of `InitLinear`: "normal" N(0, std^2); "fan_in_uniform" U(+-1/sqrt(fan_in)), PyTorch's nn.Linear default."""
CONV_BIAS_INITS = ("uniform", "zero")
"""Rules of `ShortConv`'s bias: "uniform" U(+-1/sqrt(k)), PyTorch's nn.Conv1d default (mamba_ssm); "zero"."""
CONV_WEIGHT_INITS = ("uniform", "normal")
"""Rules of `ShortConv`'s weight: "uniform" U(+-1/sqrt(k)), PyTorch's nn.Conv1d default; "normal" N(0, INIT_STD^2)
(flash-linear-attention's models, which draw every nn.Conv1d as their linear layers)."""


def _rms_normalise(x: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last axis, computed in at least float32."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w over the last axis (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.init_parameters()

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        """w = 1 (draws nothing)."""
        with torch.no_grad():
            self.weight.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        return _rms_normalise(x, self.eps) * self.weight


class GatedRMSNorm(RMSNorm):
    """RMSNorm with a SiLU gate z, over the last axis.

    norm_before_gate False (Mamba-2):       y = rmsnorm(x * silu(z)) * w
    norm_before_gate True (Gated DeltaNet): y = rmsnorm(x) * w * silu(z)
    """

    def __init__(self, dim: int, eps: float = 1e-5, *, norm_before_gate: bool) -> None:
        super().__init__(dim, eps)
        self.norm_before_gate = norm_before_gate

    def forward(self, x: Tensor, z: Tensor) -> Tensor:  # type: ignore[override]
        if self.norm_before_gate:
            return super().forward(x) * F.silu(z)
        return super().forward(x * F.silu(z))


def _taps(w: Tensor) -> list[Tensor]:
    """w (C, k) as k contiguous (C,) taps, each laid out like the channels: a strided w[:, j] takes the slow loop,
    and compiled, one transposed copy of w was read back strided in an unvectorised loop (1.6x the time of the
    convolution's forward and backward at 64 x 256 x 64)."""
    return [t.contiguous() for t in w.unbind(1)]


class _CausalDepthwiseConv(torch.autograd.Function):
    """y_t = sum_j w_j x_{t-k+1+j} over x (B, T, C), w (C, k), zero before the first token.

    Forward and backward add shifted slices in place: no padded copy of x, and none of the padded
    zero gradients that slicing a padded input costs autograd in the backward. Under `torch.func.vmap` (packed
    runs, each with its own w) the mapped axis folds into the channels, which the convolution keeps apart.
    """

    @staticmethod
    def forward(x: Tensor, w: Tensor) -> Tensor:
        T, k = x.shape[1], w.shape[1]
        taps = _taps(w)
        y = x * taps[k - 1]
        for j, s in ((j, k - 1 - j) for j in range(k - 1) if k - 1 - j < T):  # tap j reads s tokens back
            y[:, s:].addcmul_(x[:, : T - s], taps[j])
        return y

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, dy: Tensor) -> tuple[Tensor, Tensor]:
        x, w = ctx.saved_tensors
        T, k = x.shape[1], w.shape[1]
        taps = _taps(w)
        dx = dy * taps[k - 1]
        dtaps = [torch.zeros_like(t) for t in taps]
        dtaps[k - 1] = (dy * x).sum((0, 1))
        for j, s in ((j, k - 1 - j) for j in range(k - 1) if k - 1 - j < T):
            dx[:, : T - s].addcmul_(dy[:, s:], taps[j])
            dtaps[j] = (dy[:, s:] * x[:, : T - s]).sum((0, 1))
        return dx, torch.stack(dtaps, dim=1)

    @staticmethod
    def vmap(info, in_dims: tuple[int | None, int | None], x: Tensor, w: Tensor) -> tuple[Tensor, int]:
        runs = info.batch_size
        x = x.movedim(in_dims[0], -2) if in_dims[0] is not None else x[..., None, :].expand(*x.shape[:-1], runs, -1)
        w = w.movedim(in_dims[1], 0) if in_dims[1] is not None else w.expand(runs, *w.shape)
        y = _CausalDepthwiseConv.apply(x.flatten(-2), w.flatten(0, 1))  # (B, T, runs * C)
        return y.unflatten(-1, (runs, -1)), 2

class ShortConv(nn.Module):
    """Depthwise causal convolution over time followed by SiLU: y_t = silu(b + sum_j w_j * x_{t-k+1+j}).

    `forward` takes (B, T, C); `step` takes one token (B, C) and the last k-1 inputs (B, C, k-1).
    Not conv1d: on CPU it compiles a kernel per new shape (about a second in float64); the shifted
    products (with their own backward, `_CausalDepthwiseConv`) are as fast.
    Weights start uniform in +-1/sqrt(k) (PyTorch's Conv1d default for this fan-in) or N(0, INIT_STD^2)
    (`weight_init`, CONV_WEIGHT_INITS), the bias uniform in +-1/sqrt(k) or at zero (`bias_init`, CONV_BIAS_INITS).
    """

    def __init__(
        self, channels: int, kernel_size: int, *, bias: bool, bias_init: str = "uniform", weight_init: str = "uniform"
    ) -> None:
        super().__init__()
        for kind, rule, valid in (("bias", bias_init, CONV_BIAS_INITS), ("weight", weight_init, CONV_WEIGHT_INITS)):
            if rule not in valid:
                raise ValueError(f"unknown conv {kind} init {rule!r}; valid: {', '.join(valid)}")
        self.kernel_size, self.bias_init, self.weight_init = kernel_size, bias_init, weight_init
        self.weight = nn.Parameter(torch.empty(channels, kernel_size))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None
        self.init_parameters()

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        bound = self.kernel_size**-0.5
        with torch.no_grad():
            if self.weight_init == "normal":
                self.weight.normal_(0.0, INIT_STD, generator=generator)
            else:
                self.weight.uniform_(-bound, bound, generator=generator)
            if self.bias is not None:
                if self.bias_init == "zero":
                    self.bias.zero_()
                else:
                    self.bias.uniform_(-bound, bound, generator=generator)

    def _activate(self, y: Tensor) -> Tensor:
        return F.silu(y if self.bias is None else y + self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self._activate(_CausalDepthwiseConv.apply(x, self.weight))

    def init_state(self, batch_size: int, *, device: torch.device, dtype: torch.dtype) -> Tensor:
        return torch.zeros(batch_size, self.weight.shape[0], self.kernel_size - 1, device=device, dtype=dtype)

    def step(self, x_t: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        window = torch.cat([state, x_t[..., None]], dim=-1)  # (B, C, k)
        return self._activate((window * self.weight).sum(-1)), window[..., 1:]


class InitLinear(nn.Linear):
    """A bias-free nn.Linear whose seeded initialisation (models/init.py) follows `rule` (LINEAR_INITS), its draw
    multiplied by `gain`, rather than the N(0, INIT_STD^2) of a plain nn.Linear (with which the defaults agree
    draw for draw). Its constructor keeps nn.Linear's own draw, so building one consumes the global RNG exactly
    as a plain nn.Linear does."""

    def __init__(
        self, in_features: int, out_features: int, *, rule: str = "normal", std: float = INIT_STD, gain: float = 1.0
    ) -> None:
        if rule not in LINEAR_INITS:
            raise ValueError(f"unknown linear init {rule!r}; valid: {', '.join(LINEAR_INITS)}")
        super().__init__(in_features, out_features, bias=False)
        self.rule, self.std, self.gain = rule, std, gain

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        with torch.no_grad():
            if self.rule == "normal":
                self.weight.normal_(0.0, self.std, generator=generator)
            else:
                bound = self.in_features**-0.5
                self.weight.uniform_(-bound, bound, generator=generator)
            if self.gain != 1.0:
                self.weight.mul_(self.gain)


def apply_rope(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """Rotary position embedding (Su et al. 2021), rotating the two halves of the head dim.

    x (B, T, H, D) with D even, positions (T,) absolute. Pair i = (x_i, x_{i+D/2}) is rotated by
    angle p * base^(-2i/D). Angles are formed in float64 so that the parallel and decoding paths agree.
    """
    D = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (T, D/2)
    cos, sin = (f(angles)[:, None, :].to(x.dtype) for f in (torch.cos, torch.sin))  # (T, 1, D/2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class SwiGLU(nn.Module):
    """y = W_out (silu(W_a x) * W_b x) (Shazeer 2020), hidden width `hidden`."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w_in = nn.Linear(d_model, 2 * hidden, bias=False)
        self.w_out = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.w_in(x).chunk(2, dim=-1)
        return self.w_out(F.silu(a) * b)


def inverse_softplus(y: Tensor) -> Tensor:
    """x with softplus(x) = y for y > 0: x = y + log(1 - exp(-y)) (stable for small and large y)."""
    return y + torch.log(-torch.expm1(-y))
