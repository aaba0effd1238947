"""Lambda parameterisations (`LAMBDA_PARAMS`) and the lambda head of the log-linear mixers.

A log-linear mixer weights Fenwick level l of its state by lambda_t^(l) per head (docs/operator.md).
The head turns a data-dependent projection dl_t = W_lambda x_t (heads x levels outputs, the head's
own bias-free `proj`) into lambda_t through a parameterisation f:

    softplus  lambda = softplus(L_l * dl + b_l)              L init 1, the paper's (b absent by default)
    bounded   lambda = exp(-exp(L_l) * softplus(dl + b_l))   in (0, 1), L init 0 (official code's option)
    sigmoid   lambda = sigmoid(dl + b_l)                     in (0, 1)
    softmax   lambda = n_levels * softmax_l(dl + b_l)        a distribution over levels, scaled to mean 1
    static    lambda = softplus(b_l)                         learned per head and level, not data-dependent
    constant  lambda = 1                                     exactly the base mixer
    mlp       lambda = softplus(MLP(x) + b_l)                dl from a 2-layer MLP of x instead of a linear map

`mlp` is the adaptive decay of Amin et al. 2026 ("Adaptive Memory Decay for Log-Linear Attention", arXiv
2605.06946): per token and level, a two-layer MLP of the token's hidden state through a softplus. Its abstract
fixes only that much (no code is public): the hidden width d_model, the SiLU between the layers and the biases of
both layers (`LambdaMLP`) are this suite's choices.

L and b have shape (heads, distinct levels) and take no weight decay. The per-level bias b exists
when `lambda_bias_init` is not "none" (static always has it). With `lambda_share_from_level = j`,
levels >= j read the parameters and the projection row of level j (tied, not copied).

The official code (and fla) fuses W_lambda into Mamba-2's input projection as extra columns; a separate
projection computes the same function (each output of a Linear depends on its own weight row only) and
leaves the mixer's input projection the shape its base has, so that a seeded initialisation (init.py)
starts every common parameter of the two equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.kernels import num_levels
from loglinear.models.layers import inverse_softplus
from loglinear.registry import Registry

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

LAMBDA_PARAMS: Registry[type[LambdaParam]] = Registry("lambda parameterisation")

_OPEN_UNIT = (0.05, 0.95)
"""Initial targets of the (0, 1)-valued parameterisations are clipped into this range."""


class LambdaParam(nn.Module):
    """A map from pre-activations u (..., H, L) to level weights lambda (..., H, L).

    Parameters have shape (H, n_distinct); `index` (L,) maps each level to its distinct slot.
    `data_dependent` parameterisations read u (the projected hidden state); the others ignore it.
    A parameterisation with a level scale L sets `initial_scale`, the value L starts at.
    """

    data_dependent: ClassVar[bool] = True
    initial_scale: ClassVar[float | None] = None

    @classmethod
    def projection(cls, d_model: int, outputs: int) -> nn.Module | None:
        """The head's map from x (..., d_model) to the pre-activations dl (..., outputs), outputs = heads x distinct
        levels: a bias-free Linear for a data-dependent parameterisation, None for the others."""
        return nn.Linear(d_model, outputs, bias=False) if cls.data_dependent else None

    def __init__(self, n_heads: int, n_distinct: int, bias_init: str) -> None:
        super().__init__()
        self.n_heads, self.n_distinct, self.bias_init = n_heads, n_distinct, bias_init
        self.scale = None if self.initial_scale is None else nn.Parameter(torch.empty(n_heads, n_distinct))
        self.bias = None if bias_init == "none" else nn.Parameter(torch.empty(n_heads, n_distinct))
        self.init_parameters()

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        """L = `initial_scale`, b as `bias_init` says (draws nothing)."""
        with torch.no_grad():
            if self.scale is not None:
                self.scale.fill_(self.initial_scale)
            if self.bias is not None:
                self.bias.copy_(self._initial_bias(self.bias_init))

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        raise NotImplementedError

    def inverse(self, target: Tensor) -> Tensor:
        """The bias b that gives lambda = target where dl = 0, at the initial values of the other parameters."""
        raise NotImplementedError

    def _initial_bias(self, bias_init: str) -> Tensor:
        if bias_init == "zero":
            return torch.zeros(self.n_heads, self.n_distinct)
        level = torch.arange(self.n_distinct, dtype=torch.float64)
        target = torch.ones_like(level) if bias_init == "ones" else 2.0**-level
        return self.inverse(target.expand(self.n_heads, -1)).float()

    def _biased(self, u: Tensor, index: Tensor) -> Tensor:
        return u if self.bias is None else u + self.bias[:, index]


@LAMBDA_PARAMS.register("softplus")
class SoftplusLambda(LambdaParam):
    """lambda = softplus(L_l * dl + b_l) >= 0, L initialised to 1 (the paper's and fla's; b absent there)."""

    initial_scale = 1.0

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        assert u is not None
        return F.softplus(self._biased(self.scale[:, index] * u, index))

    def inverse(self, target: Tensor) -> Tensor:
        return inverse_softplus(target)


@LAMBDA_PARAMS.register("bounded")
class BoundedLambda(LambdaParam):
    """lambda = exp(-exp(L_l) * softplus(dl + b_l)) in (0, 1), L initialised to 0 (the official code's bounded form)."""

    initial_scale = 0.0

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        assert u is not None
        return torch.exp(-self.scale[:, index].exp() * F.softplus(self._biased(u, index)))

    def inverse(self, target: Tensor) -> Tensor:
        return inverse_softplus(-torch.log(target.clamp(*_OPEN_UNIT)))


@LAMBDA_PARAMS.register("sigmoid")
class SigmoidLambda(LambdaParam):
    """lambda = sigmoid(dl + b_l) in (0, 1)."""

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        assert u is not None
        return torch.sigmoid(self._biased(u, index))

    def inverse(self, target: Tensor) -> Tensor:
        return torch.logit(target.clamp(*_OPEN_UNIT))


@LAMBDA_PARAMS.register("softmax")
class SoftmaxLambda(LambdaParam):
    """lambda = n_levels * softmax over levels of (dl + b): a distribution over all levels, mean 1.

    The distribution covers every level of the head (num_levels(max_len)), also those a shorter
    sequence never reaches; tied levels each take the shared logit.
    """

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        assert u is not None
        return index.numel() * torch.softmax(self._biased(u, index), dim=-1)

    def inverse(self, target: Tensor) -> Tensor:
        return torch.log(target)  # softmax is shift-invariant: the level count rescales the mean to 1


@LAMBDA_PARAMS.register("static")
class StaticLambda(LambdaParam):
    """lambda = softplus(b_l): one learned weight per head and level, the same at every token.

    b is always present; lambda_bias_init "none" starts it at zero like "zero" (lambda = ln 2).
    """

    data_dependent = False

    def __init__(self, n_heads: int, n_distinct: int, bias_init: str) -> None:
        super().__init__(n_heads, n_distinct, "zero" if bias_init == "none" else bias_init)

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        return F.softplus(self.bias[:, index])

    def inverse(self, target: Tensor) -> Tensor:
        return inverse_softplus(target)


@LAMBDA_PARAMS.register("constant")
class ConstantLambda(LambdaParam):
    """lambda = 1 on every level: the log-linear operator then equals its base (linear) mixer exactly."""

    data_dependent = False

    def __init__(self, n_heads: int, n_distinct: int, bias_init: str) -> None:
        super().__init__(n_heads, n_distinct, "none")

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        return torch.ones(self.n_heads, index.numel(), device=index.device)


class LambdaMLP(nn.Module):
    """dl = W_out silu(W_hidden x + b_hidden) + b_out, hidden width `hidden`: the `mlp` parameterisation's projection.

    Its layers start as every linear layer of the suite (N(0, 0.02^2), biases 0), so dl starts near 0 and lambda
    near softplus(0) = ln 2 on every level, as the softplus head starts.
    """

    def __init__(self, d_model: int, outputs: int, hidden: int) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(d_model, hidden), nn.Linear(hidden, outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(F.silu(self.hidden(x)))


@LAMBDA_PARAMS.register("mlp")
class MLPLambda(LambdaParam):
    """lambda = softplus(MLP(x) + b_l) >= 0, MLP a `LambdaMLP` of hidden width d_model (Amin et al. 2026)."""

    @classmethod
    def projection(cls, d_model: int, outputs: int) -> nn.Module:
        return LambdaMLP(d_model, outputs, hidden=d_model)

    def forward(self, u: Tensor | None, index: Tensor) -> Tensor:
        assert u is not None
        return F.softplus(self._biased(u, index))

    def inverse(self, target: Tensor) -> Tensor:
        return inverse_softplus(target)


class LambdaHead(nn.Module):
    """Level weights lambda (..., H, L) of a log-linear mixer from its input x (..., d_model).

    n_levels = num_levels(max_len); with share_from = j, levels >= j share slot j, so the head has
    n_distinct = min(n_levels, j + 1) slots. A data-dependent parameterisation reads
    dl = proj(x), H * n_distinct features from its `projection` (a bias-free Linear but for `mlp`; None for the
    parameterisations that are not data-dependent).
    """

    def __init__(
        self, lambda_param: str, d_model: int, n_heads: int, n_levels: int, *, share_from: int | None, bias_init: str
    ) -> None:
        super().__init__()
        self.n_heads, self.n_levels = n_heads, n_levels
        n_distinct = n_levels if share_from is None else min(n_levels, share_from + 1)
        self.register_buffer("index", torch.arange(n_levels).clamp(max=n_distinct - 1), persistent=False)
        self.register_buffer("slots", torch.arange(n_distinct), persistent=False)
        self.param = LAMBDA_PARAMS[lambda_param](n_heads, n_distinct, bias_init)
        self.proj = self.param.projection(d_model, n_heads * n_distinct)

    @classmethod
    def from_config(cls, cfg: ModelConfig, n_heads: int) -> LambdaHead:
        return cls(
            cfg.lambda_param, cfg.d_model, n_heads, cfg.lambda_levels,
            share_from=cfg.lambda_share_from_level, bias_init=cfg.lambda_bias_init,
        )

    @property
    def max_len(self) -> int:
        """Longest sequence whose levels the head covers: 2^(n_levels - 1)."""
        return 1 << (self.n_levels - 1)

    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        """x (..., d_model) and like (..., H) (any tensor with the lead shape, dtype and device) -> (..., H, L)."""
        u = None if self.proj is None else self.proj(x).unflatten(-1, (self.n_heads, -1))
        # each distinct slot once, then copied to its tied levels: tied levels are bitwise equal (a vectorised
        # softplus may round the same input differently in different SIMD lanes)
        lam = self.param(u, self.slots)[..., self.index]
        return lam.to(like.dtype).expand(*like.shape, self.n_levels)

    def levels_for(self, lam: Tensor, seq_len: int) -> Tensor:
        """lam cut to the num_levels(seq_len) levels a sequence of seq_len tokens reaches (the rest never count)."""
        needed = num_levels(seq_len)
        if needed > self.n_levels:
            raise ValueError(
                f"sequence length {seq_len} needs {needed} lambda levels but the model has {self.n_levels} "
                f"(sequences up to {self.max_len}); build it with a larger ModelConfig.max_len"
            )
        return lam[..., :needed]
