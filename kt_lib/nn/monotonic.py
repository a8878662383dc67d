"""AKT's monotonic attention (Ghosh et al. 2020): context-aware distance, per-head decay.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim
Masks are boolean, True = the query may read that key (as in `kt_lib.nn.attention`):
- inclusive `causal_mask(L)`: key j <= i (AKT's encoder and question self-attention, "mask=1");
- strict `causal_mask(L, strict=True)`: key j < i (AKT's knowledge retriever, "mask=0"); row 0 has
  no visible key and outputs exactly zero (AKT's zero-padded first row), never NaN.

For query i and key j, with raw scores s_ij = q_i.k_j / sqrt(Dh) and a_ij their masked softmax:
    dist_ij  = sqrt(|i - j| * sum_{j' > j} a_ij')        (no gradient, as in AKT)
    decay_ij = clamp(exp(-softplus(gamma_h) * dist_ij), 1e-5, 1e5)
    w_ij     = masked softmax_j(s_ij * decay_ij)
`sum_{j' > j} a_ij'` is the attention mass between key j and the query: a key followed by many
related (highly attended) steps counts as far away, one followed by unrelated steps stays close.
AKT takes the square root of the product; we keep it so learned decay rates compare with AKT's.

Public API (also used by SimAKT): `monotonic_attention` (the function on projected heads),
`MonotonicMultiHeadAttention`, `MonotonicLayer` (AKT's transformer layer) and `decay_factor`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import FeedForward

DECAY_MIN, DECAY_MAX = 1e-5, 1e5  # AKT's clamp of exp(-gamma * dist)


@dataclass
class MonotonicWeights:
    """Attention weights of one layer, [B, H, L, S]; rows without visible keys are all zero."""

    decayed: torch.Tensor  # the weights actually applied to the values
    undecayed: torch.Tensor  # masked softmax of the raw scores (what plain attention would use)


def decay_rate(gamma: torch.Tensor) -> torch.Tensor:
    """Positive per-head decay rate theta_h = softplus(gamma_h)."""
    return F.softplus(gamma)


def decay_factor(dist: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """exp(-softplus(gamma) * dist) clamped to [1e-5, 1e5]; gamma [H] broadcasts to [B, H, L, S]."""
    theta = decay_rate(gamma).view(1, -1, 1, 1)
    return torch.exp(dist * -theta).clamp(DECAY_MIN, DECAY_MAX)


def context_distance(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dist, undecayed weights) from raw scores [..., L, S] and a bool mask, without gradient.

    The building block for custom attention variants (e.g. DTransformer's): combine with
    `decay_factor(dist, gamma)`. `monotonic_attention` computes the same thing fused.
    """
    with torch.no_grad():
        L, S = scores.shape[-2:]
        w0 = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        w0 = w0 * mask  # a row without keys has no mass
        dist = torch.cumsum(w0, dim=-1)
        total = dist[..., -1:].clone()  # row mass (1, or 0 for empty rows)
        i = torch.arange(L, device=scores.device, dtype=scores.dtype).unsqueeze(1)
        j = torch.arange(S, device=scores.device, dtype=scores.dtype).unsqueeze(0)
        dist.neg_().add_(total).mul_((i - j).abs_()).clamp_(min=0.0).sqrt_()
    return dist, w0


CHUNK_ELEMS = 1 << 19  # ~2 MB of float32 per chunk: the elementwise chain stays in cache


def _masked_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask: 0 where visible, a large finite negative where masked (no inf, no NaN)."""
    neg = torch.finfo(dtype).min / 2  # finite after adding any score below finfo.max / 2
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, neg)


def _rows(t: torch.Tensor, b0: int, b1: int) -> torch.Tensor:
    """Batch rows b0:b1 of a tensor that may broadcast over the batch (size-1 batch dim)."""
    return t if t.shape[0] == 1 else t[b0:b1]


class _MonotonicCore(torch.autograd.Function):
    """Scores -> context distance -> decay -> masked softmax -> dropout -> weighted values.

    A hand-fused version of AKT's attention: every [B, H, L, S] intermediate is computed chunk by
    chunk (a few batch rows at a time, so the elementwise chain runs in cache) with in-place
    `out=` ops, and only four [B, H, L, S] tensors are kept for backward (decayed scores, distance,
    weights, dropped weights). Forward and gradients match the plain autograd formula (tested).
    """

    @staticmethod
    def forward(ctx, q, k, v, theta, bias, pos, has_key, p: float, need_weights: bool):
        # q [B, H, L, Dh] k/v [B, H, S, Dh] theta [H] bias [B|1, H|1, L, S] pos [L, S]
        B, H, L, _ = q.shape
        S = k.shape[2]
        qs = q * q.shape[-1] ** -0.5
        A = qs @ k.transpose(-2, -1)  # [B, H, L, S] raw scores, turned into decayed scores
        dist = torch.empty_like(A)
        W = torch.empty_like(A)
        P = torch.empty_like(A) if p > 0 else W
        U = torch.empty_like(A) if need_weights else None  # undecayed weights
        neg_theta = (-theta.detach()).view(1, H, 1, 1).to(A.dtype)
        rows = max(1, min(B, CHUNK_ELEMS // max(1, H * L * S)))
        w1 = A.new_empty((rows, H, L, S))
        for b0 in range(0, B, rows):
            b1 = min(B, b0 + rows)
            a, w, d = A[b0:b1], w1[: b1 - b0], dist[b0:b1]
            bias_c = _rows(bias, b0, b1)
            torch.add(a, bias_c, out=w)
            torch.softmax(w, -1, out=w)  # undecayed masked softmax a_ij
            if U is not None:
                U[b0:b1].copy_(w)
            torch.cumsum(w, -1, out=w)
            total = w[..., -1:].clone()  # row mass
            torch.sub(total, w, out=w)  # mass after key j
            w.mul_(pos).clamp_(min=0.0)
            torch.sqrt(w, out=d)  # distance, no gradient
            torch.mul(d, neg_theta, out=w)
            w.exp_().clamp_(DECAY_MIN, DECAY_MAX)  # decay
            a.mul_(w)  # decayed scores
            torch.add(a, bias_c, out=w)
            torch.softmax(w, -1, out=W[b0:b1])
            if p > 0:
                w.bernoulli_(1.0 - p)
                torch.mul(W[b0:b1], w, out=P[b0:b1]).mul_(1.0 / (1.0 - p))
        out = (P @ v).mul_(has_key)
        ctx.save_for_backward(qs, k, v, theta, A, dist, W, P, has_key)
        ctx.p = p
        if U is None:
            return out, None, None
        return out, W * has_key, U.mul_(has_key)

    @staticmethod
    def backward(ctx, g_out, _gw, _gu):
        qs, k, v, theta, A, dist, W, P, has_key = ctx.saved_tensors
        p = ctx.p
        B, H, L, S = A.shape
        g_out = g_out * has_key
        G = g_out @ v.transpose(-2, -1)  # [B, H, L, S] d loss / d dropped weights
        gv = P.transpose(-2, -1) @ g_out
        neg_theta = (-theta).view(1, H, 1, 1).to(A.dtype)
        g_theta = torch.zeros(H, dtype=torch.float64, device=A.device)
        rows = max(1, min(B, CHUNK_ELEMS // max(1, H * L * S)))
        w1, w2 = A.new_empty((rows, H, L, S)), A.new_empty((rows, H, L, S))
        clamped = torch.empty((rows, H, L, S), dtype=torch.bool, device=A.device)
        for b0 in range(0, B, rows):
            b1 = min(B, b0 + rows)
            n = b1 - b0
            g, w, w_, c, d = G[b0:b1], w1[:n], w2[:n], clamped[:n], dist[b0:b1]
            if p > 0:  # kept entries are the non-zero ones (a zero weight has zero gradient)
                torch.ne(P[b0:b1], 0, out=c)
                g.mul_(c).mul_(1.0 / (1.0 - p))
            torch.mul(g, W[b0:b1], out=w)
            g.sub_(w.sum(-1, keepdim=True)).mul_(W[b0:b1])  # softmax backward
            torch.mul(d, neg_theta, out=w)
            w.exp_()
            torch.lt(w, DECAY_MIN, out=c)  # the clamp passes no gradient there
            w.clamp_(DECAY_MIN, DECAY_MAX)
            torch.mul(g, A[b0:b1], out=w_)
            w_.mul_(d).masked_fill_(c, 0.0)
            # d(s * decay) / d theta = -s * decay * dist
            g_theta -= w_.sum((0, 2, 3), dtype=torch.float64)
            g.mul_(w)  # d loss / d raw scores
        gq = (G @ k).mul_(qs.shape[-1] ** -0.5)
        gk = G.transpose(-2, -1) @ qs
        return gq, gk, gv, g_theta.to(theta.dtype), None, None, None, None, None


def monotonic_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    mask: torch.Tensor,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, MonotonicWeights | None]:
    """AKT attention on projected heads: q [B, H, L, Dh], k/v [B, H, S, Dh], gamma [H] (raw).

    `mask` is boolean, broadcastable to [B, H, L, S]; rows with no visible key output zeros.
    Returns the output [B, H, L, Dh] and, if asked, the decayed and undecayed weights.
    """
    L, S = q.shape[2], k.shape[2]
    mask = mask.to(torch.bool)
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    has_key = mask.any(-1, keepdim=True).to(q.dtype)  # [.., L, 1]
    bias = _masked_bias(mask, q.dtype)
    i = torch.arange(L, device=q.device, dtype=q.dtype).unsqueeze(1)
    j = torch.arange(S, device=q.device, dtype=q.dtype).unsqueeze(0)
    pos = (i - j).abs_()  # [L, S] |t - tau|
    out, w, u = _MonotonicCore.apply(
        q, k, v, decay_rate(gamma), bias, pos, has_key, float(dropout), need_weights
    )
    if not need_weights:
        return out, None
    return out, MonotonicWeights(decayed=w.detach(), undecayed=u.detach())


class MonotonicMultiHeadAttention(nn.Module):
    """Multi-head monotonic attention; `kq_same` shares the query and key projection (AKT)."""

    def __init__(
        self, d: int, n_heads: int, dropout: float = 0.0, kq_same: bool = True, bias: bool = True
    ):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"model dim {d} is not divisible by {n_heads} heads")
        self.d, self.h, self.kq_same, self.dropout = d, n_heads, kq_same, dropout
        self.k_proj = nn.Linear(d, d, bias=bias)
        self.q_proj = None if kq_same else nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)
        self.gamma = nn.Parameter(torch.empty(n_heads))  # raw decay; rate = softplus(gamma)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """AKT's init: Xavier-uniform projections, zero biases, gamma ~ Xavier on [H, 1, 1]."""
        for lin in (self.k_proj, self.q_proj, self.v_proj, self.out_proj):
            if lin is None:
                continue
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        bound = (6.0 / (1 + self.h)) ** 0.5  # xavier_uniform_ of AKT's [H, 1, 1] gammas
        nn.init.uniform_(self.gamma, -bound, bound)

    def decay_rates(self) -> torch.Tensor:
        """Per-head decay rates softplus(gamma) [H] (large: short memory)."""
        return decay_rate(self.gamma.detach())

    def split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d // self.h).transpose(1, 2)  # [B, H, L, Dh]

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        """query [B, L, D], key/value [B, S, D], mask [L, S] bool -> [B, L, D] (+ weights)."""
        k = self.split(self.k_proj(key))
        if self.q_proj is not None:
            q = self.split(self.q_proj(query))
        else:
            q = k if query is key else self.split(self.k_proj(query))  # AKT: Q = K projection
        v = self.split(self.v_proj(value))
        p = self.dropout if self.training else 0.0
        out, weights = monotonic_attention(q, k, v, self.gamma, mask, p, need_weights)
        B, H, L, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, H * Dh)), weights


class MonotonicLayer(nn.Module):
    """AKT's layer: x = LN(q + Drop(MHA(q, k, v))); with `ffn`, x = LN(x + Drop(FFN(x)))."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        kq_same: bool = True,
        ffn: bool = True,
    ):
        super().__init__()
        self.attn = MonotonicMultiHeadAttention(d, n_heads, dropout, kq_same)
        self.drop1 = nn.Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, d_ff, dropout) if ffn else None
        self.drop2 = nn.Dropout(dropout) if ffn else None
        self.ln2 = nn.LayerNorm(d) if ffn else None

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        h, weights = self.attn(query, key, value, mask, need_weights)
        x = self.ln1(query + self.drop1(h))
        if self.ffn is not None:
            x = self.ln2(x + self.drop2(self.ffn(x)))
        return x, weights
