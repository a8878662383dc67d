"""Transformer building blocks shared by the attention models.

# B batch, L steps, D model dim
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .dropout import Dropout, FlatSequential, ReLUDropout

ACTIVATIONS = ("relu", "relu_unfused", "gelu")


class LSTM(nn.LSTM):
    """`nn.LSTM` that runs in float32 under CPU autocast: oneDNN builds no bf16 LSTM on CPUs
    without native bf16 ("could not create a primitive descriptor"), and the recurrence is a
    small share of a KT model's step. Same parameters and state dict as `nn.LSTM`."""

    def forward(self, x: torch.Tensor, hx=None):
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                return super().forward(x.float(), hx)
        return super().forward(x, hx)


def mlp_head(
    d_in: int, dims: tuple[int, ...], dropout: float, activation: str = "relu", d_out: int = 1
) -> nn.Sequential:
    """The prediction MLP of the models: (Linear - activation - Dropout) per hidden width in
    `dims`, then Linear(., d_out).

    "relu" fuses ReLU and dropout (`ReLUDropout`, in place on CPU; layers at 0, 2, 4, ...);
    "relu_unfused" and "gelu" keep three modules per hidden layer (layers at 0, 3, 6, ...), the
    layout of checkpoints written by iKT3 (relu) and DTransformer (gelu)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    layers: list[nn.Module] = []
    for d_hidden in dims:
        layers.append(nn.Linear(d_in, d_hidden))
        if activation == "relu":
            layers.append(ReLUDropout(dropout))
        else:
            act = nn.GELU() if activation == "gelu" else nn.ReLU()
            layers += [act, Dropout(dropout)]
        d_in = d_hidden
    layers.append(nn.Linear(d_in, d_out))
    return FlatSequential(*layers) if activation == "relu" else nn.Sequential(*layers)


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


class PostNormLayer(nn.Module):
    """The post-norm residual layer of SAKT, AKT and their kin, around any attention module:
    x = LN(q + Drop(Attn(q, k, v))); with an FFN, x = LN(x + Drop(FFN(x))). `attn(q, k, v,
    mask, need_weights)` returns (output, weights or None)."""

    def __init__(self, attn: nn.Module, d: int, dropout: float, ffn: nn.Module | None):
        super().__init__()
        self.attn = attn
        self.drop1 = Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = ffn
        self.drop2 = Dropout(dropout) if ffn is not None else None
        self.ln2 = nn.LayerNorm(d) if ffn is not None else None

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool = False,
    ):
        h, w = self.attn(q, k, v, mask, need_weights)
        x = self.ln1(q + self.drop1(h))
        if self.ffn is not None:
            x = self.ln2(x + self.drop2(self.ffn(x)))
        return x, w


class TransformerLayer(PostNormLayer):
    """Post-norm layer over scaled dot-product attention, FFN = Linear - ReLU - Drop - Linear."""

    def __init__(self, d: int, n_heads: int, d_ff: int, dropout: float = 0.0, ffn: bool = True):
        attn = MultiHeadAttention(d, n_heads, dropout)  # built before the FFN: same init order
        super().__init__(attn, d, dropout, FeedForward(d, d_ff, dropout) if ffn else None)
