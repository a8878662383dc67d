"""DKT (Piech et al. 2015): an LSTM over interaction embeddings, the classic reference row.

# B batch, L steps, D embedding/hidden dim, C concepts
Step t reads the interactions before t (a zero start vector at t=0), so logits[:, t] is causal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch, interaction_token
from ..nn import LSTM, Dropout
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class DKTConfig(BaseConfig):
    """DKT sizes."""

    d: int = 200  # embedding size and LSTM hidden size (DKT paper: 200 hidden units)
    n_layers: int = 1  # stacked LSTM layers
    dropout: float = 0.1  # dropout before the output layer

    BINARY = True
    PRESETS = {"tiny": {"d": 16}, "paper": {"d": 200}}

    def validate(self) -> None:
        super().validate()
        require(self.d > 0, f"d must be > 0, got {self.d}")


@register("dkt")
class DKT(KTModel):
    """LSTM knowledge tracing with a per-concept output layer."""

    config_cls = DKTConfig
    attends = False  # a recurrence, no attention weights

    def __init__(self, config: DKTConfig):
        super().__init__(config)
        c = config
        self.emb = nn.Embedding(c.num_c * c.K, c.d)
        self.lstm = LSTM(c.d, c.d, num_layers=c.n_layers, batch_first=True)
        self.drop = Dropout(c.dropout)
        self.out = nn.Linear(c.d, c.num_c)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        x = self.emb(interaction_token(batch.q, batch.r, self.config.num_c))  # [B, L, D]
        x = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)  # shift: step t sees < t
        h, _ = self.lstm(x)
        logits = self.out(self.drop(h))  # [B, L, C]
        logits = logits.gather(-1, batch.q.unsqueeze(-1)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention={} if return_attention else None)
