"""qDKT (Sonkar, Waters, Lan, Grimaldi & Baraniuk, EDM 2020): DKT over problem ids.

# B batch, L steps, D embedding/hidden dim, P problems
    x_t = E[pid_t + P * r_t]                       interaction embedding      [B, L, D]
    h_t = LSTM(0, x_0, ..., x_{t-1})               step t reads the interactions < t
    y_t = W h_t + b                                one logit per problem      [B, L, P]
    logit_t = y_t[pid_t]                           read at the problem asked at t
Step t reads (pid, r) at steps < t and pid_t (only to pick its output), never r_t.
Deviations from the paper / pyKT's `qdkt`:
- no fastText initialisation of the problem embeddings and no Laplacian (same-skill) smoothing
  of the outputs (the paper's two extras; pyKT implements neither).
- aligned: pyKT scores h_j against r_{j+1}; here a zero start vector shifts the input by one.
- the rows the data has: a multi-skill problem expanded into one row per skill is a run of
  copies of one (pid, r) token here, which pyKT avoids by training qDKT on question-level files;
  `prepare` warns where the training students have such copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch, KTDataset, interaction_token
from ..nn import LSTM, Dropout
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class QDKTConfig(BaseConfig):
    """qDKT sizes."""

    d: int = 300  # embedding size = LSTM hidden size (pyKT: emb_size)
    dropout: float = 0.2  # dropout before the per-problem output layer

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16},
        # pyKT's examples/wandb_qdkt_train.py defaults (kt_config.json has no qdkt entry);
        # its sweep (seedwandb/qdkt.yaml) searches d in {64, 256}, dropout in {.05, .1, .3, .5}
        "paper": {"d": 300, "dropout": 0.2},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d > 0, f"d must be > 0, got {self.d}")


@register("qdkt")
class QDKT(KTModel):
    """LSTM over (problem, response) interactions with a per-problem output layer."""

    config_cls = QDKTConfig
    attends = False  # a recurrence, no attention weights
    needs = frozenset({"pid"})

    def __init__(self, config: QDKTConfig):
        super().__init__(config)
        c = config
        self.emb = nn.Embedding(c.num_pid * c.K, c.d)
        self.lstm = LSTM(c.d, c.d, batch_first=True)
        self.drop = Dropout(c.dropout)
        self.out = nn.Linear(c.d, c.num_pid)

    def prepare(self, train: KTDataset) -> None:
        """Warn where a row repeats the previous row's problem and response under another skill
        (a multi-skill problem expanded into rows): qDKT reads problems only, so those rows are
        copies it would learn to repeat (docs/baselines.md)."""
        train.warn_problem_copies(
            "qdkt",
            "qDKT reads problems only and learns from these copies; pyKT trains it on "
            "question-level data",
        )

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        pid = batch.pid
        x = self.emb(interaction_token(pid, batch.r, self.config.num_pid))  # [B, L, D]
        x = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)  # shift: step t sees < t
        h = self.lstm(x)[0]  # [B, L, D]
        # y_t[pid_t] without the [B, L, P] output: only the asked problem's row of W is read
        w, b = self.out.weight[pid], self.out.bias[pid]  # [B, L, D], [B, L]
        logits = (self.drop(h) * w).sum(-1) + b  # [B, L]
        return ModelOutput(logits=logits, attention={} if return_attention else None)
