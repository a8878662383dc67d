"""Causal masks and multi-head attention that can return its weights.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim
Masks are boolean, True = the query may read that key, built on the input's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .monotonic import (
    POOL,
    _bh,
    _chunks,
    _masked_bias,
    _query_blocks,
    _rows,
    draw_keep,
    fast_dropout,
)
from .shapes import merge_heads, split_heads


def causal_mask(L: int, device=None, strict: bool = False, S: int | None = None) -> torch.Tensor:
    """[L, S] bool mask: inclusive (key j <= i) or strict past (key j < i; row 0 empty)."""
    S = L if S is None else S
    i = torch.arange(L, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return j < i if strict else j <= i


class _DropoutAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(Dh), masked) -> dropout -> @ v, fused by hand for training on CPU.

    SDPA's fused CPU kernel has no dropout (it falls back to a bernoulli_-based path), and
    autograd on the plain chain makes ~17 passes over the [B, H, L, S] weights. This one:
    - query blocks (`_query_blocks`, as AKT's kernel): each block of query rows only computes
      the keys some of its queries may read, so a causal mask skips ~40% of the work at L = 200;
    - batch chunks inside a block keep the elementwise passes in cache;
    - keeps the weights W and the 0/1 keep mask per block (scratch from the buffer pool); the
      dropout scale 1 / (1 - p) is applied to the [L, Dh] output, not to [L, S] tensors;
    - the softmax backward's row sums are g . out (a dot over Dh, not a pass over [L, S]).
    Masked keys get a large finite negative score; a row without any visible key comes out
    finite (uniform) and the caller zeroes it. One backward per forward.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, p: float):
        # q [B, H, L, Dh] k/v [B, H, S, Dh]; mask None or bool broadcastable to [B, H, L, S]
        B, H, L, Dh = q.shape
        S = k.shape[-2]
        qs = torch.mul(q, Dh**-0.5, out=q.new_empty(q.shape))  # contiguous heads
        k, v = k.contiguous(), v.contiguous()
        if mask is None:
            blocks, bias = [(0, L, S)], None
        else:
            mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
            blocks, bias = _query_blocks(mask), _masked_bias(mask, q.dtype)
        out = q.new_zeros(B, H, L, v.shape[-1])
        saved: list[torch.Tensor] = []
        scale = 1.0
        for l0, l1, s1 in blocks:
            shape = (B, H, l1 - l0, s1)
            if s1 == 0:  # no query of the block reads a key: zero output
                saved += [qs.new_empty(0)] * 2
                continue
            W, keep = POOL.take(shape, q), POOL.take(shape, q)
            scale = draw_keep(keep, p)  # 0/1; the scale goes onto the output
            bias_b = None if bias is None else bias[..., l0:l1, :s1]
            rows, chunks = _chunks(B, H * (l1 - l0) * s1)
            work = POOL.take((rows, *shape[1:]), q)
            for b0, b1 in chunks:
                a = work[: b1 - b0]
                torch.bmm(_bh(qs[b0:b1, :, l0:l1]), _bh(k[b0:b1, :, :s1]).mT, out=_bh(a))
                if bias_b is not None:
                    a.add_(_rows(bias_b, b0, b1))
                torch.softmax(a, -1, out=W[b0:b1])
                torch.mul(W[b0:b1], keep[b0:b1], out=a)  # dropped weights (unscaled)
                out[b0:b1, :, l0:l1] = a @ v[b0:b1, :, :s1]
            POOL.give(work)
            saved += [W, keep]
        out.mul_(scale)
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(qs, k, v, out, *saved)
            ctx.blocks, ctx.scale = blocks, scale
        else:
            POOL.give(*saved)
        return out

    @staticmethod
    def backward(ctx, g):
        if getattr(ctx, "done", False):  # its buffers went back to the pool after the first
            raise RuntimeError("attention dropout supports one backward per forward")
        ctx.done = True
        qs, k, v, out, *saved = ctx.saved_tensors
        Dh = qs.shape[-1]
        g = g.contiguous()
        # softmax backward needs sum_j dW_j W_j = sum_j (gs . v_j) keep_j W_j = g . out
        dot = (g * out).sum(-1, keepdim=True)
        gs = g * ctx.scale
        g_q, g_k, g_v = torch.zeros_like(qs), torch.zeros_like(k), torch.zeros_like(v)
        for i, (l0, l1, s1) in enumerate(ctx.blocks):
            if s1 == 0:
                continue
            W, keep = saved[2 * i : 2 * i + 2]
            rows, chunks = _chunks(qs.shape[0], W[0].numel())
            work = [POOL.take((rows, *W.shape[1:]), W) for _ in range(2)]
            for b0, b1 in chunks:
                t, pw = (x[: b1 - b0] for x in work)
                go, kc, vc = gs[b0:b1, :, l0:l1], k[b0:b1, :, :s1], v[b0:b1, :, :s1]
                torch.mul(W[b0:b1], keep[b0:b1], out=pw)
                g_v[b0:b1, :, :s1] += pw.mT @ go
                torch.bmm(_bh(go), _bh(vc).mT, out=_bh(t))  # d loss / d dropped weights
                t.mul_(keep[b0:b1]).sub_(dot[b0:b1, :, l0:l1]).mul_(W[b0:b1])  # -> scores
                g_q[b0:b1, :, l0:l1] = t @ kc
                g_k[b0:b1, :, :s1] += t.mT @ qs[b0:b1, :, l0:l1]
            POOL.give(*work)
        POOL.give(*saved)
        return g_q.mul_(Dh**-0.5), g_k, g_v, None, None


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention; rows with no visible key output zeros (no NaN, no leak).

    q [B, H, L, Dh], k/v [B, H, S, Dh], mask broadcastable to [B, H, L, S].
    """
    if mask is not None:
        mask = mask.to(torch.bool)
        has_key = mask.any(-1, keepdim=True)  # [.., L, 1]
        # Let empty rows attend everywhere, then zero their output: softmax stays finite.
        safe = mask | ~has_key
    if not need_weights:
        if dropout > 0:
            out = _DropoutAttention.apply(q, k, v, mask, dropout)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else safe)
        if mask is not None:
            out = out * has_key.to(out.dtype)
        return out, None
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # [B, H, L, S]
    if mask is not None:
        scores = scores.masked_fill(~safe, float("-inf"))
    weights = scores.softmax(-1)
    if mask is not None:
        weights = weights * has_key.to(weights.dtype)
    # the fast 16-bit Bernoulli (kt_lib.nn.monotonic): SDPA's own dropout draws with bernoulli_,
    # which took 60% of a SAKT training step on CPU (B=64, 8 heads, 200 x 200 weights)
    dropped = fast_dropout(weights, dropout)
    return dropped @ v, (weights if need_weights else None)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate Q/K/V projections; optionally returns its weights."""

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"model dim {d} is not divisible by {n_heads} heads")
        self.d, self.h = d, n_heads
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)
        self.dropout = dropout

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.h)  # [B, H, L, Dh]

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        return merge_heads(x)  # [B, L, D]

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        q = self.split(self.q_proj(query))
        k = self.split(self.k_proj(key))
        v = self.split(self.v_proj(value))
        p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, p, need_weights)
        return self.out_proj(self.merge(out)), weights
