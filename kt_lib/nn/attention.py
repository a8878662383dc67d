"""Causal masks and multi-head attention that can return its weights.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim
Masks are boolean, True = the query may read that key, built on the input's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .monotonic import fast_dropout


def causal_mask(L: int, device=None, strict: bool = False, S: int | None = None) -> torch.Tensor:
    """[L, S] bool mask: inclusive (key j <= i) or strict past (key j < i; row 0 empty)."""
    S = L if S is None else S
    i = torch.arange(L, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return j < i if strict else j <= i


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
    if not need_weights and dropout == 0:
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
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d // self.h).transpose(1, 2)  # [B, H, L, Dh]

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        B, H, L, Dh = x.shape
        return x.transpose(1, 2).reshape(B, L, H * Dh)  # [B, L, D]

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
