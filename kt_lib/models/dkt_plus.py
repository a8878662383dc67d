"""DKT+ (Yeung & Yeung, L@S 2018): "Addressing Two Problems in Deep Knowledge Tracing via
Prediction-Consistent Regularization".

# B batch, L steps, D embedding/hidden dim, C concepts
DKT's trunk (`DKT`: interaction embedding, LSTM, per-concept output layer), run over the start
vector and all L interactions, gives y_0 ... y_L [C]: y_s from the interactions before s.
  logit_t  = y_t[q_t]                                        (DKT's prediction, reads < t)
  L_r      = mean_t BCE(y_{t+1}[q_t], r_t)                   (reconstruct the answer just read)
  L_w1     = mean_t |sigmoid(y_{t+1}) - sigmoid(y_t)|_1 / C  (waviness, t >= 1: both real steps)
  L_w2     = mean_t |sigmoid(y_{t+1}) - sigmoid(y_t)|_2^2 / C
  loss     = BCE(logits) + lambda_r L_r + lambda_w1 L_w1 + lambda_w2 L_w2
The regularisers read r_t through y_{t+1} only: they are training terms and never reach a logit.
Deviations from pyKT's dkt+: aligned (pyKT scores y after step t against q_{t+1}); the
reconstruction covers every real step, the last one included (pyKT drops each sequence's last).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..config import require
from ..data.dataset import Batch, interaction_token
from .base import ModelOutput, register
from .dkt import DKT, DKTConfig


@dataclass
class DKTPlusConfig(DKTConfig):
    """DKT sizes plus the weights of the three regularisers."""

    lambda_r: float = 0.2  # reconstruction of the answer just read
    lambda_w1: float = 1.0  # waviness, L1 norm
    lambda_w2: float = 10.0  # waviness, squared L2 norm

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16},
        # pyKT configs/kt_config.json "dkt+" (emb_size 200 = LSTM size, as the DKT+ authors'
        # 200-unit LSTM; lambdas 0.2 / 1.0 / 10.0); dropout is pyKT's constructor default 0.1
        "paper": {"d": 200, "dropout": 0.1, "lambda_r": 0.2, "lambda_w1": 1.0, "lambda_w2": 10.0},
    }

    def validate(self) -> None:
        super().validate()
        for name in ("lambda_r", "lambda_w1", "lambda_w2"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")


@register("dkt_plus")
class DKTPlus(DKT):
    """DKT with prediction-consistent regularisation (reconstruction and waviness)."""

    config_cls = DKTPlusConfig

    def outputs(self, batch: Batch) -> torch.Tensor:
        """y_0 ... y_L [B, L + 1, C] (logits): y_s from the interactions before s."""
        x = self.emb(interaction_token(batch.q, batch.r, self.config.num_c))  # [B, L, D]
        x = torch.cat([torch.zeros_like(x[:, :1]), x], dim=1)  # [B, L + 1, D]: start vector
        h, _ = self.lstm(x)
        return self.out(self.drop(h))  # [B, L + 1, C]

    def regularisers(self, y: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """The weighted reconstruction and waviness terms from y [B, L + 1, C]."""
        c = self.config
        q, m = batch.q.unsqueeze(-1), batch.mask
        terms = {}
        if c.lambda_r > 0:
            w = m.to(y.dtype)  # [B, L]
            recon = y[:, 1:].gather(-1, q).squeeze(-1)  # [B, L]: after reading step t, at q_t
            each = F.binary_cross_entropy_with_logits(recon, batch.r.to(y.dtype), reduction="none")
            terms["reconstruction"] = c.lambda_r * (each * w).sum() / w.sum().clamp(min=1)
        if c.lambda_w1 > 0 or c.lambda_w2 > 0:
            p = torch.sigmoid(y[:, 1:])  # [B, L, C]: after reading step t
            diff = p[:, 1:] - p[:, :-1]  # [B, L - 1, C]: step t's change, t >= 1
            w = (m[:, 1:] & m[:, :-1]).to(y.dtype)  # [B, L - 1]
            n = w.sum().clamp(min=1) * c.num_c
            if c.lambda_w1 > 0:
                terms["waviness_l1"] = c.lambda_w1 * (diff.abs().sum(-1) * w).sum() / n
            if c.lambda_w2 > 0:
                terms["waviness_l2"] = c.lambda_w2 * (diff.square().sum(-1) * w).sum() / n
        return terms

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        y = self.outputs(batch)  # [B, L + 1, C]
        logits = y[:, :-1].gather(-1, batch.q.unsqueeze(-1)).squeeze(-1)  # [B, L]
        return ModelOutput(
            logits=logits,
            losses=self.regularisers(y, batch),
            attention={} if return_attention else None,
        )
