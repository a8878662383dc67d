"""Causal masks and multi-head attention that can return its weights.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim
Masks are boolean, True = the query may read that key, built on the input's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .monotonic import _chunks, draw_keep, fast_dropout
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
    autograd on the plain chain makes ~17 passes over the [B, H, L, S] weights (and converts a
    bool keep-mask to float at each use); this makes ~9 and keeps the weights, the scaled keep
    mask and the dropped weights for the backward pass. Every row of `visible` must have a key
    (callers let empty rows attend everywhere and zero their output).
    """

    @staticmethod
    def forward(ctx, q, k, v, visible, p: float):
        scale = q.shape[-1] ** -0.5
        B, H, L, S = *q.shape[:3], k.shape[-2]
        w = q.new_empty(B, H, L, S)
        keep = torch.empty_like(w)
        dropped = torch.empty_like(w)
        out = q.new_empty(B, H, L, v.shape[-1])
        drawn = torch.empty(w.shape, dtype=torch.bool, device=w.device)
        kscale = draw_keep(drawn, p)
        _, chunks = _chunks(B, H * L * S)
        for b0, b1 in chunks:  # row chunks keep the [rows, H, L, S] passes in cache
            s = (q[b0:b1] * scale) @ k[b0:b1].transpose(-2, -1)
            if visible is not None:
                vis = visible[b0:b1] if visible.dim() == 4 and visible.shape[0] > 1 else visible
                s.masked_fill_(~vis, float("-inf"))
            torch.softmax(s, dim=-1, out=w[b0:b1])
            torch.mul(drawn[b0:b1], kscale, out=keep[b0:b1])  # 0 or 1 / (1 - p)
            torch.mul(w[b0:b1], keep[b0:b1], out=dropped[b0:b1])
            torch.matmul(dropped[b0:b1], v[b0:b1], out=out[b0:b1])
        ctx.scale = scale
        ctx.save_for_backward(q, k, v, w, keep, dropped, out)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, w, keep, dropped, out = ctx.saved_tensors
        g_q, g_k, g_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        # softmax backward needs sum_j g_w[j] w[j] = sum_j (g . v_j) keep_j w_j = g . out: a dot
        # product over Dh instead of a pass over the [L, S] weights
        dot = (g * out).sum(-1, keepdim=True)
        _, chunks = _chunks(q.shape[0], w[0].numel())
        for b0, b1 in chunks:
            gb = g[b0:b1]
            torch.matmul(dropped[b0:b1].transpose(-2, -1), gb, out=g_v[b0:b1])
            g_w = (gb @ v[b0:b1].transpose(-2, -1)).mul_(keep[b0:b1])  # through the dropout
            g_s = g_w.sub_(dot[b0:b1]).mul_(w[b0:b1])  # through the softmax
            torch.matmul(g_s, k[b0:b1], out=g_q[b0:b1])
            torch.matmul(g_s.transpose(-2, -1), q[b0:b1], out=g_k[b0:b1])
        return g_q.mul_(ctx.scale), g_k.mul_(ctx.scale), g_v, None, None


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
            out = _DropoutAttention.apply(q, k, v, None if mask is None else safe, dropout)
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
