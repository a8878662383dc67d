"""Deep-IRT (Yeung, EDM 2019): DKVMN's memory read mapped to IRT ability and difficulty.

# B batch, L steps, M memory slots, Dk key dim, Df summary dim
    f_t, k_t        as DKVMN (read of the memory before the write of step t, question key)
    theta_t = tanh(w_theta f_t + b)                  [B, L]  student ability (paper eq. 12)
    beta_t  = tanh(w_beta k_t + b)                   [B, L]  question difficulty (eq. 13)
    logit_t = 3.0 * theta_t - beta_t                         (eq. 14; 3.0 as paper and code)
Step t reads q_t and the memory written by the interactions before t (never r_t).
Deviations from the authors' (TensorFlow) and pyKT's code:
- theta has the paper's tanh; the authors' code leaves the ability layer linear (pyKT has tanh);
- dropout on f_t and k_t before the two layers (pyKT's; the authors have none, paper preset 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..data.dataset import Batch
from .base import ModelOutput, register
from .dkvmn import DKVMN, DKVMNConfig

ABILITY_SCALE = 3.0  # the scale of theta in the logit (paper eq. 14 and both codes)


@dataclass
class DeepIRTConfig(DKVMNConfig):
    """Deep-IRT sizes; defaults are the authors' (the same for every dataset)."""

    d_key: int = 50  # Dk ("key_memory_state_dim")
    d_value: int = 100  # Dv ("value_memory_state_dim")
    d_summary: int = 50  # Df ("summary_vector_output_dim")
    n_slots: int = 50  # M ("memory_size")
    dropout: float = 0.0  # dropout on f_t and k_t before the ability and difficulty layers

    PRESETS = {
        "tiny": DKVMNConfig.PRESETS["tiny"],
        # the authors' code (ckyeungac/DeepIRT, configs.py, every dataset): memory 50, key 50,
        # value 100, summary 50
        "paper": {"d_key": 50, "d_value": 100, "d_summary": 50, "n_slots": 50, "dropout": 0.0},
        # pyKT configs/kt_config.json "deep_irt": dim_s 200 (every dim), size_m 50, dropout 0.2
        "pykt": {"d_key": 200, "d_value": 200, "d_summary": 200, "n_slots": 50, "dropout": 0.2},
    }


class IRTHead(nn.Module):
    """Ability from the summary, difficulty from the question key, both squashed by tanh."""

    def __init__(self, d_summary: int, d_key: int):
        super().__init__()
        self.ability = nn.Linear(d_summary, 1)
        self.difficulty = nn.Linear(d_key, 1)

    def forward(self, f: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta = torch.tanh(self.ability(f)).squeeze(-1)  # [B, L]
        beta = torch.tanh(self.difficulty(k)).squeeze(-1)  # [B, L]
        return theta, beta


@register("deep_irt")
class DeepIRT(DKVMN):
    """DKVMN trunk with an IRT output: logit = 3 theta - beta."""

    config_cls = DeepIRTConfig

    def output_layer(self, c: DKVMNConfig) -> nn.Module:
        return IRTHead(c.d_summary, c.d_key)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        s = self.trunk(batch)
        theta, beta = self.out(self.drop(s.f), self.drop(s.k))  # [B, L] each
        return ModelOutput(
            logits=ABILITY_SCALE * theta - beta,
            attention=self.maps(s) if return_attention else None,
            extras={"theta": theta, "beta": beta},
        )
