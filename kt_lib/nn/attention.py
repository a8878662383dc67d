"""The attention interface of kt_lib: masks, the three attentions, and multi-head attention.

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim, K knowledge slots
Masks are boolean, True = the query may read that key, built on the input's device.
Each attention states its math once in kt_lib.nn.reference and lets a backend compute it
(kt_lib.nn.backend: `reference`, `cpu` or `cuda`; by default the tensors' device decides):
- `attend`: scaled dot-product attention, with an optional fixed additive score bias (SAKT, the
  shared transformer layers, iKT3, the ordinal mechanisms; extraKT's linear bias);
- `monotonic_attention`: AKT's attention with context-aware distance decay (AKT, iDKT,
  DTransformer, SimAKT's intra-student heads);
- `slot_attention`: DTransformer's Block 4 (knowledge-slot queries over the strict past).
Rows with no readable key output zeros, never NaN. The modules: `MultiHeadAttention` (separate
Q/K/V projections) and `SharedQKAttention` (one projection for queries and keys, pyKT's
kq_same: simpleKT, sparseKT, stableKT and extraKT, which override its `weigh`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import cpu, cuda, reference, slots
from .backend import choose
from .dropout import draw_keep
from .shapes import merge_heads, split_heads


def causal_mask(L: int, device=None, strict: bool = False, S: int | None = None) -> torch.Tensor:
    """[L, S] bool mask: inclusive (key j <= i) or strict past (key j < i; row 0 empty)."""
    S = L if S is None else S
    i = torch.arange(L, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return j < i if strict else j <= i


def _float32(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Under autocast the distance, decay and softmax chains stay in float32."""
    return tuple(t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in ts)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    need_weights: bool = False,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention -> (out [B, H, L, Dh], weights [B, H, L, S] if asked).

    q [B, H, L, Dh], k/v [B, H, S, Dh], mask broadcastable to [B, H, L, S]; `dropout` applies to
    the weights (training); `bias`, broadcastable to [B, H, L, S], is added to the scores: a
    fixed bias such as ALiBi's. A bias that requires grad is refused, since the cpu training
    kernel returns it no gradient. Returned weights are before dropout.
    """
    if bias is not None and bias.requires_grad:
        raise ValueError(
            "attend: a score bias that requires grad is not supported (the cpu training kernel "
            "gives it no gradient); pass a fixed bias (a buffer, or .detach())"
        )
    if mask is not None:
        mask = mask.to(torch.bool)
    backend = choose(q)
    if need_weights or backend == "reference":
        out, w = reference.attention(q, k, v, mask, dropout, bias=bias)
        return out, (w if need_weights else None)
    return (cpu if backend == "cpu" else cuda).attention(q, k, v, mask, dropout, bias), None


@dataclass
class MonotonicWeights:
    """Attention weights of one layer, [B, H, L, S]; rows without visible keys are all zero."""

    decayed: torch.Tensor  # the weights actually applied to the values
    undecayed: torch.Tensor  # masked softmax of the raw scores (what plain attention would use)


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
    q, k, v = _float32(q, k, v)
    mask = mask.to(torch.bool)
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    backend = choose(q)
    if backend == "reference":
        out, w, u = reference.monotonic(q, k, v, gamma, mask, dropout)
    else:
        theta = reference.decay_rate(gamma)
        out, w, u = (cpu if backend == "cpu" else cuda).monotonic(
            q, k, v, theta, mask, dropout, need_weights
        )
    if not need_weights:
        return out, None
    return out, MonotonicWeights(decayed=w.detach(), undecayed=u.detach())


def slot_attention(
    r: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    keep: torch.Tensor,
    need_weights: bool = False,
    strict: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """DTransformer's Block 4: slot scores r [B, K, H, 1, S], values v [B, 1, H, S, Dh] ->
    outputs [B, K, H, L, Dh] (+ weights [B, K, H, L, S] if asked).

    Query step t reads keys j < t that are kept (keep [B|1, S] bool). AKT's distance decay, then
    max-out (kt_lib.nn.reference.slot). Rows without a readable key (t = 0) output zeros.
    `strict=False` (j <= t) exists only so tests can show that the causality audit catches it.
    """
    r, v = _float32(r, v)
    S = r.shape[-1]
    if choose(r) == "reference":
        past = causal_mask(S, r.device, strict=strict)  # [L, S]
        out, w = reference.slot(r, v, gamma, past & keep.view(keep.shape[0], 1, 1, 1, S))
        return out, (w.detach() if need_weights else None)
    return slots.slot(r, v, gamma, keep, strict, need_weights)  # chunked, cpu and cuda alike


def slot_attention_projected(
    r: torch.Tensor,
    v: torch.Tensor,
    gamma: torch.Tensor,
    proj: nn.Linear,
    base: torch.Tensor,
    keep: torch.Tensor,
    dropout: float = 0.0,
    need_weights: bool = False,
    strict: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Block 4 with its output projection, dropout and residual: y [B, L, K, D] =
    base + Dropout(merge_heads(slot_attention(r, v, ...)) @ proj), base [K, D] the slot queries.

    The `cpu` and `cuda` backends compute it chunk by chunk (kt_lib.nn.slots.slot_project), so
    that no [B, K, H, L, S] tensor, nor the merged heads, nor the projection's output before the
    residual, is ever whole in memory; `reference` composes the plain pieces. Both draw the
    dropout the same way (`draw_keep` into a bool [B, K, L, D], read as [B, L, K, D]).
    """
    r, v = _float32(r, v)
    B, K, H, _, S = r.shape
    D = proj.weight.shape[0]
    drop_keep, scale = None, 1.0
    if dropout > 0:
        drop_keep = torch.empty(B, K, S, D, dtype=torch.bool, device=r.device)
        scale = draw_keep(drop_keep, dropout)  # slot-major draws, as Dropout on [B, K, L, D]
        drop_keep = drop_keep.transpose(1, 2)
    if choose(r) != "reference":
        w_b = (proj.weight.to(r.dtype), proj.bias.to(r.dtype), base.to(r.dtype))
        args = (keep, drop_keep, scale, strict, need_weights)
        return slots.slot_project(r, v, gamma, *w_b, *args)
    out, w = slot_attention(r, v, gamma, keep, need_weights, strict)
    y = proj(out.permute(0, 3, 1, 2, 4).reshape(B, S, K, -1))
    if drop_keep is not None:
        y = y * drop_keep * scale
    return base + y, w


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


class SharedQKAttention(nn.Module):
    """Multi-head attention whose queries and keys share one projection (pyKT's kq_same=1)."""

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.h, self.dropout = n_heads, dropout
        self.k_proj = nn.Linear(d, d)  # queries and keys
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        for lin in (self.k_proj, self.v_proj):  # pyKT's init; out_proj keeps torch's weights
            nn.init.xavier_uniform_(lin.weight)
        for lin in (self.k_proj, self.v_proj, self.out_proj):
            nn.init.zeros_(lin.bias)

    def weigh(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        dropout: float,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention on projected heads [B, H, L, Dh]: plain scaled dot-product."""
        return attend(q, k, v, mask, dropout, need_weights)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query [B, L, D], key/value [B, S, D], bool mask [L, S] -> [B, L, D] (+ [B, H, L, S])."""
        k = split_heads(self.k_proj(key), self.h)  # [B, H, S, Dh]
        q = k if query is key else split_heads(self.k_proj(query), self.h)  # [B, H, L, Dh]
        v = split_heads(self.v_proj(value), self.h)  # [B, H, S, Dh]
        p = self.dropout if self.training else 0.0
        out, w = self.weigh(q, k, v, mask, p, need_weights)
        return self.out_proj(merge_heads(out)), w
