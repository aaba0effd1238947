"""The mean cross-entropy of a linear head, fused with it and computed in chunks of positions.

`linear_cross_entropy(h, weight, targets)` is `F.cross_entropy((h @ weight.T).float(), targets)` (the LM head, then the
loss over the vocabulary) without the (positions, vocabulary) logits: each chunk of CHUNK positions forms its logits
and their softmax p, takes its targets' probabilities and, when a gradient is wanted, its share of the gradients of
h and of the weight, then drops them. The gradients are computed in the forward pass and scaled by the loss's
gradient in the backward (as fused linear cross-entropy does in Liger-Kernel and flash-linear-attention), so the
logits are formed once. With `predict`, the argmax of each position's logits comes from the same pass (the accuracy
of a logging step).

Per chunk, over its (CHUNK, vocabulary) values: the logits' matmul, one softmax, and the two gradient matmuls, which
read p - onehot(targets) (the logits' gradient times n). The loss is the mean of -log p[target]; a target's
probability below the dtype's smallest normal number has lost digits, so those positions (if any: one check per
call) take log-sum-exp minus the target's logit from their logits formed again. The weight's gradient accumulates
transposed, (d, vocabulary), where the matmul over a chunk's positions runs faster ("the fused loss: chunk size" in
benchmarks/RESULTS.md).

The same arithmetic as the unfused form up to the order of its sums and where 1/n multiplies: equal to it to
float32's rounding (tests/models/test_linear_cross_entropy.py, in float64 to 1e-12).
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 32
"""Positions per chunk: 32 x 8,192 logits (1 MB in float32) stay in a core's caches beside the head's weight; of 8 to
256, 32 had the lowest median at the paper's MQAR preset, 16 to 128 within its spread (benchmarks/RESULTS.md, "the
fused loss: chunk size")."""


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, targets: Tensor, predict: bool, chunk: int):
        n = h.shape[0]
        grads = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        dtype = torch.promote_types(h.dtype, torch.float32)  # the loss's, as the unfused form's `.float()`
        target_p = torch.empty(n, dtype=dtype, device=h.device)
        predicted = torch.empty(n if predict else 0, dtype=torch.int64, device=h.device)
        if grads:
            dh = torch.empty(h.shape, dtype=dtype, device=h.device)  # times n, as dw_t
            dw_t = torch.zeros(weight.shape[1], weight.shape[0], dtype=dtype, device=h.device)
            w = weight.to(dtype)
            minus_one = torch.full((min(chunk, n), 1), -1.0, dtype=dtype, device=h.device)
        for start in range(0, n, chunk):
            rows = slice(start, start + chunk)
            t = targets[rows, None]
            logits = (h[rows] @ weight.T).to(dtype)  # (c, V)
            if predict:
                predicted[rows] = logits.argmax(-1)
            p = torch.softmax(logits, dim=-1)
            target_p[rows] = p.gather(1, t)[:, 0]
            if grads:
                g = p.scatter_add_(1, t, minus_one[: len(t)])  # p - onehot: n times d(mean loss)/d logits
                torch.mm(g, w, out=dh[rows])
                dw_t.addmm_(h[rows].T.to(dtype), g)
        loss = -target_p.log()
        low = target_p < torch.finfo(dtype).tiny
        if low.any():
            rows = low.nonzero()[:, 0]
            logits = (h[rows] @ weight.T).to(dtype)
            loss[rows] = logits.logsumexp(-1) - logits.gather(1, targets[rows, None])[:, 0]
        ctx.save_for_backward(dh if grads else None, dw_t.T if grads else None)
        ctx.n, ctx.dtypes = n, (h.dtype, weight.dtype)
        ctx.mark_non_differentiable(predicted)
        return loss.sum() / n, predicted

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_predicted: Tensor):
        dh, dw = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        scale = grad_loss / ctx.n
        dw = (dw * scale).to(w_dtype).contiguous()  # the weight's layout, not its transpose's (as DDP's buckets expect)
        return (dh * scale).to(h_dtype), dw, None, None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor, *, predict: bool = False,
                         chunk: int = CHUNK) -> tuple[Tensor, Tensor | None]:
    """The mean cross-entropy of the logits h @ weight.T (h (n, d), weight (vocab, d)) at `targets` (n,) int64, and
    with `predict` each position's argmax over the vocabulary (n,) (else None); 0, with a zero gradient, for n = 0."""
    if h.shape[0] == 0:
        return (h @ weight.T).float().sum(), (targets.new_empty(0) if predict else None)
    loss, predicted = _LinearCrossEntropy.apply(h, weight, targets, predict, chunk)
    return loss, predicted if predict else None
