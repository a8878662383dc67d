"""Transformer building blocks shared by the attention models.

# B batch, L steps, D model dim
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .dropout import Dropout


class FeedForward(nn.Module):
    """Position-wise FFN: Linear(D, F) - ReLU - Dropout - Linear(F, D).

    Dropout here and in `TransformerLayer` is `kt_lib.nn.dropout.Dropout` (a fast Bernoulli:
    `nn.Dropout`'s bernoulli_ was a large share of a CPU training step)."""

    def __init__(self, d: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d, d_ff), nn.ReLU(), Dropout(dropout), nn.Linear(d_ff, d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerLayer(nn.Module):
    """Post-norm attention layer: x = LN(q + MHA(q, k, v)); x = LN(x + FFN(x))."""

    def __init__(self, d: int, n_heads: int, d_ff: int, dropout: float = 0.0, ffn: bool = True):
        super().__init__()
        self.attn = MultiHeadAttention(d, n_heads, dropout)
        self.drop1 = Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, d_ff, dropout) if ffn else None
        self.drop2 = Dropout(dropout)
        self.ln2 = nn.LayerNorm(d) if ffn else None

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, w = self.attn(q, k, v, mask, need_weights)
        x = self.ln1(q + self.drop1(h))
        if self.ffn is not None:
            x = self.ln2(x + self.drop2(self.ffn(x)))
        return x, w
