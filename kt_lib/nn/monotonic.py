"""AKT's and DTransformer's attention modules over `monotonic_attention` (kt_lib.nn.attention).

# B batch, H heads, L query steps, S key steps, D model dim, Dh head dim, K knowledge slots
The math (context-aware distance, per-head decay) is in kt_lib.nn.reference; here are the
projections and layers around it:
- `MonotonicAttention`: multi-head monotonic attention. `kq_same` shares one projection for
  queries and keys (AKT and DTransformer; it is `q_proj`, and `k_proj` is then None). AKT
  re-initialises with Xavier (`xavier_init=True`; `out_proj` too, where pyKT leaves its weight
  at torch's default: kept for the recorded rows, docs/baselines.md); DTransformer keeps
  torch's Linear init.
  `extra` replaces the last heads' outputs by ones computed outside (SimAKT's inter-student
  heads, from this layer's own `queries`); `read_slots` is DTransformer's Block 4
  (knowledge-slot queries).
- `MonotonicLayer`: AKT's transformer layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import MonotonicWeights, monotonic_attention, slot_attention_projected
from .blocks import PostNormLayer
from .dropout import FlatSequential, ReLUDropout
from .reference import decay_rate
from .shapes import merge_heads, split_heads


@dataclass
class ExtraHeads:
    """Outputs that replace the last h heads of an attention layer (SimAKT's inter heads)."""

    out: torch.Tensor  # [B, h, L, Dh], computed from the layer's `queries`

    @property
    def n_heads(self) -> int:
        return self.out.shape[1]


class MonotonicAttention(nn.Module):
    """Multi-head monotonic attention; `kq_same` shares the query and key projection."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        dropout: float = 0.0,
        kq_same: bool = True,
        bias: bool = True,
        xavier_init: bool = True,
    ):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"model dim {d} is not divisible by {n_heads} heads")
        self.d, self.h, self.kq_same, self.dropout = d, n_heads, kq_same, dropout
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = None if kq_same else nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)
        self.gamma = nn.Parameter(torch.empty(n_heads))  # raw decay; rate = softplus(gamma)
        if xavier_init:
            for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
                if lin is not None:
                    nn.init.xavier_uniform_(lin.weight)
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)
        bound = (6.0 / (1 + n_heads)) ** 0.5  # xavier_uniform_ of AKT's [H, 1, 1] gammas
        nn.init.uniform_(self.gamma, -bound, bound)
        self._register_load_state_dict_pre_hook(self._rename_shared)

    def _rename_shared(self, state, prefix, *args) -> None:
        """Older AKT checkpoints name the shared query/key projection k_proj: load it as q_proj."""
        if self.k_proj is None and prefix + "q_proj.weight" not in state:
            for name in ("weight", "bias"):
                if prefix + f"k_proj.{name}" in state:
                    state[prefix + f"q_proj.{name}"] = state.pop(prefix + f"k_proj.{name}")

    def decay_rates(self) -> torch.Tensor:
        """Per-head decay rates softplus(gamma) [H] (large: short memory)."""
        return decay_rate(self.gamma.detach())

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.h)  # [..., H, L, Dh]

    def keys(self, key: torch.Tensor) -> torch.Tensor:
        return self.split((self.k_proj or self.q_proj)(key))

    def queries(self, query: torch.Tensor) -> torch.Tensor:
        """The per-head queries W_Q query [B, H, L, Dh] this layer attends with."""
        return self.split(self.q_proj(query))

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
        extra: ExtraHeads | None = None,
    ) -> tuple[torch.Tensor, MonotonicWeights | None]:
        """query [B, L, D], key/value [B, S, D], mask [B|1, 1|H, L, S] or [L, S] bool ->
        [B, L, D] (+ weights)."""
        k = self.keys(key)
        q = k if query is key and self.k_proj is None else self.split(self.q_proj(query))
        v = self.split(self.v_proj(value))
        p = self.dropout if self.training else 0.0
        if extra is None:
            out, w = monotonic_attention(q, k, v, self.gamma, mask, p, need_weights)
        else:  # the first H - h heads attend within the student, the last h are `extra`
            n = self.h - extra.n_heads
            out, w = monotonic_attention(
                q[:, :n], k[:, :n], v[:, :n], self.gamma[:n], mask, p, need_weights
            )
            out = torch.cat([out.to(v.dtype), extra.out.to(v.dtype)], dim=1)
        return self.out_proj(merge_heads(out)), w

    def read_slots(
        self,
        slots: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        keep: torch.Tensor,
        need_weights: bool = False,
        strict: bool = True,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Slot queries [K, D] (the same at every step) -> slots + Dropout(MHA) [B, L, K, D]
        (the residual input of DTransformer's LayerNorm), weights [B, K, H, L, S] if asked.

        One query per slot instead of DTransformer's copy per (slot, step): the scores are
        computed once per key and shared by every query step (strict past, `keep`: unhidden keys).
        """
        q = self.split(self.q_proj(slots))  # [H, K, Dh]
        k = self.keys(key)  # [B, H, S, Dh]
        v = self.split(self.v_proj(value)).unsqueeze(1)  # [B, 1, H, S, Dh]
        # one product per head over every (row, key): broadcasting q against k would copy k
        # once per slot, in the backward too
        scores = torch.einsum("hkd,bhsd->bkhs", q * q.shape[-1] ** -0.5, k).unsqueeze(3)
        y, w = slot_attention_projected(
            scores, v, self.gamma, self.out_proj, slots, keep, dropout, need_weights, strict
        )
        return y.to(v.dtype), w


class MonotonicLayer(PostNormLayer):
    """AKT's layer: the post-norm layer (`nn.blocks.PostNormLayer`) over monotonic attention,
    FFN = Linear(D, F) - ReLU - Dropout - Linear(F, D)."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        kq_same: bool = True,
        ffn: bool = True,
    ):
        attn = MonotonicAttention(d, n_heads, dropout, kq_same)  # before the FFN: init order
        body = (
            FlatSequential(nn.Linear(d, d_ff), ReLUDropout(dropout), nn.Linear(d_ff, d))
            if ffn
            else None
        )
        super().__init__(attn, d, dropout, body)
