"""The GPCM item-response reference: item parameters alone, no student history.

# B batch, L steps, K categories, N items
    P(Y_t = k) = softmax_k(sum_{h<k} alpha_i (theta - beta_{i,h})),   i = the item asked at t
with theta one learned population ability and, per item, a discrimination and K - 1 ordered
thresholds (`kt_lib.heads.gpcm.GPCMHead`; K = 2: the 2PL). With one ability for everyone only
each item's category probabilities are identified (alpha and the thresholds trade off), which
is all a prediction needs. The item is the problem where the data
carry problem ids, else the skill. No response reaches a prediction: what a sequence model gains
over this row is what it learns from the student's own history (seed 002's reviewers' baseline,
the IRT reference of the ordinal study).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..data.dataset import Batch
from ..heads.gpcm import GPCMHead
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class GPCMIRTConfig(BaseConfig):
    """Nothing to size: one ability and each item's parameters."""

    K: int = 4  # response categories
    ordered_thresholds: bool = True  # False: free GPCM step thresholds (see kt_lib.heads.gpcm)

    PRESETS = {"tiny": {}, "paper": {}}


@register("gpcm_irt")
class GPCMIRT(KTModel):
    """An item-only GPCM (2PL at K = 2): the floor every sequence model should clear."""

    config_cls = GPCMIRTConfig
    ordinal = True
    attends = False
    reads_responses = False  # item parameters alone

    def __init__(self, config: GPCMIRTConfig):
        super().__init__(config)
        c = config
        self.by_problem = c.num_pid > 0
        self.theta = nn.Parameter(torch.zeros(()))
        items = c.num_pid if self.by_problem else c.num_c
        self.gpcm = GPCMHead(items, c.K, ordered=c.ordered_thresholds)
        with torch.no_grad():  # items start apart (the shared init makes them all alike)
            self.gpcm.first.weight.add_(0.1 * torch.randn_like(self.gpcm.first.weight))

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        items = batch.pid if self.by_problem else batch.q
        if items is None:
            raise ValueError(
                "gpcm_irt was built with problem ids (num_pid > 0): the batch has none"
            )
        g = self.gpcm(self.theta.expand(items.shape), items)  # logits [B, L, K]
        extras = {"alpha": g.alpha, "thresholds": g.thresholds}
        return ModelOutput(g.logits, attention={} if return_attention else None, extras=extras)
