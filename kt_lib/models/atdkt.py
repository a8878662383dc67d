"""AT-DKT (Liu, Liu, Chen, Huang, Weng & Luo, WWW 2023): "Enhancing Deep Knowledge Tracing with
Auxiliary Tasks".

# B batch, L steps, D hidden dim, C skills, N encoder layers
    u = Enc(Q(pid))                    question tagging trunk: N causal layers   [B, L, D]
    z_j = X(q_j, r_j) + u_j + C(q_j)   DKT input of interaction j                [B, L, D]
    h_t = LSTM(0, z_0, ..., z_{t-1})   step t reads the interactions < t
    logit_t = MLP(drop(h_t))[q_t]      response prediction, per-skill output read at q_t
    QT:  CE(MLP_qt(u_t), q_t)          tag the skill of problem pid_t from the problems <= t
    IK:  MSE(sig(MLP_ik(h_t)), mean(r_0..r_{t-1})), steps t > start   prior ability from h_t
    loss = BCE + qt_weight * QT + ik_weight * IK (the auxiliary terms in training only)
Step t reads (pid, q, r) at steps < t, and q_t to pick its output; never r_t (the IK target at
t averages the responses < t, which h_t has already read).
Deviations from pyKT's `atdkt` (emb_type qiddelxembhistranscembpredcurc, its sweep's):
- the QT encoder reads the problem embedding only; pyKT adds the skill embedding C(c_j), the
  very label it predicts (atdkt.py line 78: catemb = qemb + cemb), which makes QT trivial.
- aligned: pyKT scores h_j against r_{j+1}; here a zero start vector shifts the DKT input.
- weights relative to the prediction loss: pyKT's l1 * BCE + l2 * QT + l3 * IK -> l2/l1, l3/l1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, interaction_token
from ..nn import LSTM, Dropout, TransformerLayer, causal_mask, mlp_head
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class ATDKTConfig(BaseConfig):
    """AT-DKT sizes and auxiliary-loss weights."""

    d: int = 300  # embedding size = LSTM hidden size = encoder width (pyKT: emb_size)
    dropout: float = 0.05  # dropout on h_t and inside the three MLP heads
    n_heads: int = 5  # QT encoder heads (pyKT: num_attn_heads)
    n_layers: int = 2  # QT encoder layers (pyKT: num_layers)
    d_ff: int = 2048  # QT encoder FFN width (torch TransformerEncoderLayer's default in pyKT)
    qt_dropout: float = 0.1  # QT encoder dropout (torch's default in pyKT)
    qt_weight: float = 1.0  # question tagging loss weight over the prediction loss (l2 / l1)
    ik_weight: float = 1.0  # prior-knowledge loss weight over the prediction loss (l3 / l1)
    start: int = 50  # IK loss at steps t > start of the window (pyKT's start, on j = t - 1)

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "start": 3},
        # pyKT examples/wandb_atdkt_train.py defaults (kt_config.json has no atdkt entry):
        # emb_size 300, dropout 0.05, 2 layers, 5 heads, l1 = l2 = l3 = 0.5, start 50
        "paper": {"d": 300, "dropout": 0.05, "n_heads": 5, "n_layers": 2, "start": 50},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d >= 2, f"d must be >= 2 (the heads' hidden width is d // 2), got {self.d}")
        require(self.d_ff > 0, f"d_ff must be > 0, got {self.d_ff}")
        require(self.qt_weight >= 0 and self.ik_weight >= 0, "loss weights must be >= 0")
        require(self.start >= 0, f"start must be >= 0, got {self.start}")


def history_accuracy(r: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of the valid responses strictly before each step -> (rate, has history), [B, L]."""
    m = mask.to(torch.float32)
    right = torch.cumsum(r.to(torch.float32) * m, 1) - r * m  # correct answers at steps < t
    seen = torch.cumsum(m, 1) - m  # valid steps < t
    return right / seen.clamp(min=1), seen > 0


@register("atdkt")
class ATDKT(KTModel):
    """DKT with question tagging and individual prior-knowledge auxiliary tasks."""

    config_cls = ATDKTConfig
    needs = frozenset({"pid"})

    def __init__(self, config: ATDKTConfig):
        super().__init__(config)
        c = config
        self.inter_emb = nn.Embedding(c.num_c * c.K, c.d)
        self.q_emb = nn.Embedding(c.num_pid, c.d)
        self.c_emb = nn.Embedding(c.num_c, c.d)
        self.encoder = nn.ModuleList(
            TransformerLayer(c.d, c.n_heads, c.d_ff, c.qt_dropout) for _ in range(c.n_layers)
        )
        self.enc_norm = nn.LayerNorm(c.d)
        self.lstm = LSTM(c.d, c.d, batch_first=True)
        self.drop = Dropout(c.dropout)
        self.out = mlp_head(c.d, (c.d // 2,), c.dropout, d_out=c.num_c)
        self.qt_head = mlp_head(c.d, (c.d // 2,), c.dropout, d_out=c.num_c)
        self.ik_head = mlp_head(c.d, (c.d // 2,), c.dropout, d_out=1)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        c = self.config
        q, r, m = batch.q, batch.r, batch.mask
        u = self.q_emb(batch.pid)  # [B, L, D]
        mask = causal_mask(q.shape[1], device=q.device)  # [L, L]: problems <= t
        maps = {}
        for i, layer in enumerate(self.encoder):
            u, w = layer(u, u, u, mask, need_weights=return_attention)
            if return_attention:
                maps[f"qt.{i}"] = w  # [B, H, L, L]
        u = self.enc_norm(u)  # [B, L, D]
        z = self.inter_emb(interaction_token(q, r, c.num_c)) + u + self.c_emb(q)  # [B, L, D]
        z = torch.cat([torch.zeros_like(z[:, :1]), z[:, :-1]], dim=1)  # shift: step t sees < t
        h = self.lstm(z)[0]  # [B, L, D]
        y = self.out(self.drop(h))  # [B, L, C]
        logits = y.gather(-1, q.unsqueeze(-1)).squeeze(-1)  # [B, L]
        losses = {}
        if self.training:
            w = m.to(u.dtype)
            qt = F.cross_entropy(self.qt_head(u).flatten(0, 1), q.flatten(), reduction="none")
            losses["qt"] = c.qt_weight * (qt * w.flatten()).sum() / w.sum().clamp(min=1)
            rate, has = history_accuracy(r, m)
            after = torch.arange(q.shape[1], device=q.device) > c.start  # [L]
            wk = (has & after & m).to(h.dtype)  # [B, L]
            ik = (torch.sigmoid(self.ik_head(h).squeeze(-1)) - rate.to(h.dtype)) ** 2
            losses["ik"] = c.ik_weight * (ik * wk).sum() / wk.sum().clamp(min=1)
        return ModelOutput(
            logits=logits, losses=losses, attention=maps if return_attention else None
        )
