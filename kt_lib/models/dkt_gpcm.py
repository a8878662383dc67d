"""Ordinal DKT: DKT's LSTM over (skill, category) interactions with a GPCM output layer, the
ordinal baseline beside AttentionGPCM (seed 002's setting: K response categories).

# B batch, L steps, D hidden dim, C skills, K categories
    h_t      = LSTM(0, e(q_0, r_0), ..., e(q_{t-1}, r_{t-1}))     interactions before t
    theta_t  = w . Drop([h_t, c(q_t)])                              ability for the skill asked
    P(Y_t = k) = softmax_k(sum_{j<=k} alpha_{q_t} (theta_t - b_{q_t, j}))     (GPCM, b_0 = 0)
Step t reads the interactions before t and the skill at t. A binary DKT is GPCM at K = 2 with
alpha = 1 (a 2PL per skill), so this model at K = 2 is DKT with an IRT readout.
Deviation from DKT (Piech et al. 2015): the per-skill sigmoid output becomes a per-skill GPCM
item (discrimination and K - 1 ordered thresholds), so categories keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..data.dataset import Batch, interaction_token
from ..heads.gpcm import GPCMHead
from .base import ModelOutput, register
from .dkt import DKT, DKTConfig


@dataclass
class DKTGPCMConfig(DKTConfig):
    """DKT's sizes; K categories (2: binary data)."""

    K: int = 4  # response categories
    ordered_thresholds: bool = True  # False: free GPCM step thresholds (see kt_lib.heads.gpcm)

    BINARY = False


@register("dkt_gpcm")
class DKTGPCM(DKT):
    """DKT with a GPCM output layer over the skills."""

    config_cls = DKTGPCMConfig
    ordinal = True

    def __init__(self, config: DKTGPCMConfig):
        super().__init__(config)
        c = config
        self.out = nn.Linear(2 * c.d, 1)  # theta from [h_t, c(q_t)]
        self.skill = nn.Embedding(c.num_c, c.d)
        self.gpcm = GPCMHead(c.num_c, c.K, ordered=c.ordered_thresholds)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        x = self.emb(interaction_token(batch.q, batch.r, self.config.num_c))  # [B, L, D]
        x = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)  # shift: step t sees < t
        h, _ = self.lstm(x)  # [B, L, D]
        theta = self.out(self.drop(torch.cat([h, self.skill(batch.q)], -1))).squeeze(-1)
        g = self.gpcm(theta, batch.q)  # logits [B, L, K]
        extras = {"theta": theta, "alpha": g.alpha, "thresholds": g.thresholds}
        return ModelOutput(g.logits, attention={} if return_attention else None, extras=extras)
