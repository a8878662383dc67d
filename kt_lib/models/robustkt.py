"""RobustKT (Guo et al., WWW 2025): "Enhancing Knowledge Tracing through Decoupling Cognitive
Pattern from Error-Prone Data".

# B batch, L steps, D model dim, H heads, N encoder blocks, W smoothing window (kernel size)
AKT (kt_lib.models.akt: Rasch embeddings, monotonic attention, encoder on y, retriever on x, MLP
on [h, x]) whose encoder and retriever read both streams through a cognitive decoupling analyzer
(one module, the same weights for x and y):
    trend_t  = b + sum_{k < W} A_k z_{t-k}           causal convolution over time, z_{<0} = 0
    noise_t  = z_t - trend_t                          the random part (slips, guesses)
    z'_t     = LN(z_t + Drop(trend_t + beta^2 * noise_t))      beta [D] learned
    y' = encoder(y'; keys j <= t),  h = retriever(Q = K = x', V = y'; keys j < t)
    logit_t  = MLP([h_t, x_t])                        x unsmoothed, as in the authors' code
Step t reads q/pid at steps <= t and r at steps < t: the smoothed y'_j reads y at steps
j - W + 1..j, and the retriever reads y' at steps j < t only (the encoder's y'_t, which holds
r_t, never reaches the prediction at t); x'_t reads questions at steps <= t.
Deviations from pyKT's robustkt.py (emb_type "qid"), besides AKT's:
- the question self-attention layers have no FFN (pyKT builds one in each and never runs it);
- the Rasch penalty is AKT's (weight x mean of mu^2 over valid steps; pyKT: a sum, padding in).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..nn.dropout import Dropout
from .akt import AKT, AKTConfig
from .base import register

# pyKT's configs/kt_config.json has no robustkt entry: these are its
# examples/wandb_robustkt_train.py defaults (d_model 256, d_ff 512, 8 heads, 4 blocks, dropout
# 0.2, ks 5, learning rate 1e-4); the model passes final_fc_dim 512 and a second hidden layer of
# 256 (AKTConfig's defaults)
PAPER_SIZES = {"d": 256, "n_heads": 8, "n_blocks": 4, "d_ff": 512, "dropout": 0.2, "window": 5}
LN_EPS = 1e-12  # the analyzer's LayerNorm epsilon (the authors' code)


@dataclass
class RobustKTConfig(AKTConfig):
    """RobustKT sizes: AKT's fields and the smoothing window."""

    window: int = 5  # W: steps the causal smoothing convolution reads (pyKT's ks)

    PRESETS = {"tiny": {**AKTConfig.PRESETS["tiny"], "window": 3}, "paper": PAPER_SIZES}

    def validate(self) -> None:
        super().validate()
        require(self.window >= 1, f"window must be >= 1, got {self.window}")


class DecouplingAnalyzer(nn.Module):
    """z [B, L, D] -> LN(z + Drop(trend + beta^2 (z - trend))), trend a causal convolution."""

    def __init__(self, d: int, window: int, dropout: float):
        super().__init__()
        self.window = window
        self.conv = nn.Conv1d(d, d, window)  # A [D, D, W], b [D]; padded on the left only
        self.beta = nn.Parameter(torch.randn(d))  # the noise weight is beta^2 >= 0
        self.drop = Dropout(dropout)
        self.norm = nn.LayerNorm(d, eps=LN_EPS)

    def trend(self, z: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> [B, L, D]: trend_t reads z at steps t - W + 1..t (zeros before step 0)."""
        past = F.pad(z.transpose(1, 2), (self.window - 1, 0))  # [B, D, W - 1 + L]
        return self.conv(past).transpose(1, 2)  # [B, L, D]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        trend = self.trend(z)
        mixed = trend + self.beta.square() * (z - trend)
        return self.norm(z + self.drop(mixed))


@register("robustkt")
class RobustKT(AKT):
    """AKT whose encoder and retriever read their inputs through a causal smoothing analyzer."""

    config_cls = RobustKTConfig

    def __init__(self, config: RobustKTConfig):
        super().__init__(config)
        c = config
        self.prefilter = DecouplingAnalyzer(c.d, c.window, c.dropout)
