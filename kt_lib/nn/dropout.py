"""Dropout, the one class every kt_lib model uses, with a fast Bernoulli on CPU.

On CPU, `nn.Dropout`'s `bernoulli_` was a large share of a training step; `draw_keep` draws 16
random bits per element instead (the rate is rounded to a multiple of 1/65536). On CUDA the
native fused `F.dropout` kernel is faster than any of that, so the modules below use it there,
and so does a model under `torch.compile` on any device (the compiler fuses it; the int64 draw
and the autograd Functions below would break its graph).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .backend import compiling

DROP_LEVELS = 1 << 16  # dropout draws 16 random bits per element: p is rounded to 1 / 65536


def draw_keep(out: torch.Tensor, p: float) -> float:
    """Fill `out` with dropout keep decisions (1 keep, 0 drop); returns the scale 1 / (1 - p').

    A fast Bernoulli: 16 random bits per element (one int64 draw gives four), compared with
    round(p * 65536); p' = that / 65536 is the rate actually used (0.05 -> 0.0500030...).
    Several times cheaper on CPU than `bernoulli_`, and seeded by the same generator. `out` is
    bool, or float in the activations' dtype (no mixed-dtype products downstream). Under
    torch.compile: a plain uniform draw at rate p, scale 1 / (1 - p) (the compiler fuses it).
    """
    if compiling():
        out.copy_(torch.rand(out.shape, device=out.device) >= p)
        return 1.0 / (1.0 - p)
    t = round(p * DROP_LEVELS)
    n = out.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=out.device)
    # from int64's minimum with no upper bound: the generator's 64 bits as they come. A bound
    # (to = 2^63 - 1) makes torch reduce every draw modulo the range: 2.5x the time on CPU
    bits.random_(-(2**63), None)
    r = bits.view(torch.int16)[:n].view(out.shape)
    if out.dtype == torch.bool:
        torch.ge(r, t - DROP_LEVELS // 2, out=out)
    else:  # in place on floats: a comparison into a float `out` would go through a bool copy
        out.copy_(r).ge_(t - DROP_LEVELS // 2)
    return DROP_LEVELS / (DROP_LEVELS - t)


def keep_scale(p: float) -> float:
    """The scale 1 / (1 - p') that `draw_keep` returns for rate p."""
    return DROP_LEVELS / (DROP_LEVELS - round(p * DROP_LEVELS))


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p: float):
        keep = torch.empty_like(x, memory_format=torch.contiguous_format)
        ctx.scale = draw_keep(keep, p)
        ctx.save_for_backward(keep)
        return (x * keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        return (g * keep).mul_(ctx.scale), None


def fast_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout (identity for p = 0): `draw_keep` on CPU, `F.dropout` elsewhere
    and under torch.compile."""
    if p <= 0:
        return x
    if x.device.type == "cpu" and not compiling():
        return _Dropout.apply(x, p)
    return F.dropout(x, p, training=True)


class _ReLUDropout(torch.autograd.Function):
    """relu then dropout, in place on its input (a fresh Linear output)."""

    @staticmethod
    def forward(ctx, x, p: float):
        x.clamp_min_(0.0)
        ctx.scale = 1.0
        if p > 0:
            keep = torch.empty_like(x)
            ctx.scale = draw_keep(keep, p)
            x.mul_(keep).mul_(ctx.scale)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        # out >= 0, and > 0 exactly where relu passed and dropout kept: relu's own backward
        # (g where out > 0, else 0) in one pass, then the dropout scale
        return torch.ops.aten.threshold_backward(g, out, 0.0).mul_(ctx.scale), None


class Dropout(nn.Module):
    """`nn.Dropout` with the fast 16-bit Bernoulli of `draw_keep` on CPU (`F.dropout` on GPU)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLUDropout(Dropout):
    """ReLU followed by `Dropout`, fused and in place on CPU (use right after a Linear)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.p if self.training else 0.0
        if x.device.type == "cpu" and not compiling():  # (dynamo cannot read grad_fn)
            # overwrite a fresh op output; never a view (autograd would copy its whole base back)
            fresh = torch.is_grad_enabled() and x.grad_fn is not None and x._base is None
            if fresh:
                return _ReLUDropout.apply(x, p)
        return fast_dropout(torch.relu(x), p)


class FlatSequential(nn.Sequential):
    """`nn.Sequential` run on [N, D] rows: a Linear on a 3-D input returns a view, which the
    in-place `ReLUDropout` must not overwrite; flattening the leading dims avoids the view."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out = super().forward(x.reshape(-1, x.shape[-1]))
        return out.view(*lead, out.shape[-1])
