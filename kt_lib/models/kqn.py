"""KQN (Lee & Yeung, LAK 2019): "Knowledge Query Network for Knowledge Tracing".

# B batch, L steps, C concepts, R RNN hidden, M skill-MLP hidden, N state/skill vector dim
  x_t   = one_hot(q_t + C r_t) [2C]  for t >= 0; x_{-1} = 0 (nothing answered yet)
  k_t   = W_k LSTM(x_{-1}, x_0, ..., x_{t-1})_t + b_k          knowledge state vector [N]
  s_t   = normalise(ReLU(W_2 ReLU(W_1 one_hot(q_t) + b_1) + b_2))  skill vector [N], unit length
  logit_t = dropout(k_t) . s_t                                  (the "knowledge query")
Step t reads the interactions before t (through k_t) and q_t (through s_t) only.
Deviations from pyKT's KQN: aligned (pyKT's k_t reads x_t and is scored against q_{t+1}, so its
first step is never predicted); padded steps enter the RNN as zero vectors; the one-hot input of
the skill MLP is a row lookup of W_1 (the same function and parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, interaction_token
from ..nn import LSTM, Dropout
from .base import BaseConfig, KTModel, ModelOutput, register

RNNS = {"lstm": LSTM, "gru": nn.GRU}


@dataclass
class KQNConfig(BaseConfig):
    """KQN sizes."""

    d: int = 128  # N: knowledge state and skill vector size (pyKT n_hidden)
    d_rnn: int = 128  # R: RNN hidden units of the knowledge encoder (n_rnn_hidden)
    d_mlp: int = 128  # M: hidden units of the skill encoder MLP (n_mlp_hidden)
    n_layers: int = 1  # stacked RNN layers (n_rnn_layers)
    rnn: str = "lstm"  # knowledge encoder cell: "lstm" or "gru"
    dropout: float = 0.4  # dropout on the knowledge state vector

    BINARY = True
    PRESETS = {
        "tiny": {"d": 8, "d_rnn": 16, "d_mlp": 8, "dropout": 0.1},
        # pyKT configs/kt_config.json "kqn" (n_hidden, n_rnn_hidden, n_mlp_hidden 128, one LSTM
        # layer, dropout 0.4)
        "paper": {"d": 128, "d_rnn": 128, "d_mlp": 128, "n_layers": 1, "dropout": 0.4},
    }

    def validate(self) -> None:
        super().validate()
        require(min(self.d, self.d_rnn, self.d_mlp) > 0, "d, d_rnn and d_mlp must be > 0")
        require(self.rnn in RNNS, f"rnn must be one of {sorted(RNNS)}, got {self.rnn!r}")


@register("kqn")
class KQN(KTModel):
    """Knowledge state from an RNN, skill vector from an MLP, logit = their dot product."""

    config_cls = KQNConfig
    attends = False  # a recurrence, no attention weights

    def __init__(self, config: KQNConfig):
        super().__init__(config)
        c = config
        self.rnn = RNNS[c.rnn](c.num_c * c.K, c.d_rnn, num_layers=c.n_layers, batch_first=True)
        self.state = nn.Linear(c.d_rnn, c.d)
        self.skill_in = nn.Embedding(c.num_c, c.d_mlp)  # W_1 one_hot(q) as a row lookup
        self.skill_bias = nn.Parameter(torch.zeros(c.d_mlp))  # b_1
        bound = 1 / c.num_c**0.5  # nn.Linear(C, M)'s initialisation, as the authors' layer
        nn.init.uniform_(self.skill_in.weight, -bound, bound)
        nn.init.uniform_(self.skill_bias, -bound, bound)
        self.skill_out = nn.Linear(c.d_mlp, c.d)
        self.drop = Dropout(c.dropout)

    def knowledge(self, batch: Batch) -> torch.Tensor:
        """k_t [B, L, N] from the interactions before t."""
        c = self.config
        tok = interaction_token(batch.q, batch.r, c.num_c)  # [B, L]
        x = F.one_hot(tok, c.num_c * c.K).to(self.state.weight.dtype)  # [B, L, 2C]
        x = x * batch.mask.unsqueeze(-1)  # padding answers nothing
        x = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)  # shift: step t sees < t
        h, _ = self.rnn(x)  # [B, L, R]
        return self.state(h)  # [B, L, N]

    def skill(self, q: torch.Tensor) -> torch.Tensor:
        """s_t [B, L, N], unit length (zero where the MLP's ReLU zeroes every unit)."""
        h = torch.relu(self.skill_in(q) + self.skill_bias)  # [B, L, M]
        return F.normalize(torch.relu(self.skill_out(h)), dim=-1)  # [B, L, N]

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        k = self.drop(self.knowledge(batch))  # [B, L, N]
        s = self.skill(batch.q)  # [B, L, N]
        logits = (k * s).sum(-1)  # [B, L]
        return ModelOutput(
            logits=logits,
            attention={} if return_attention else None,
            extras={"knowledge": k, "skill": s},
        )
