"""sparseKT (Huang, Liu, Zhao, Luo & Weng, SIGIR 2023): simpleKT with k-sparse attention.

# B batch, L steps, D model dim, H heads, S key steps
simpleKT (kt_lib.models.simplekt) with every block's attention weights made sparse:
    a_ts   = softmax_s(q_t . k_s / sqrt(Dh)) over readable keys s < t
    keep_t = the k keys of largest a_ts ("topk"), or the fewest keys, largest first, whose
             weights sum to >= ratio ("soft", pyKT's qid_accumulative_attn)
    w_ts   = a_ts / sum_{s' in keep_t} a_ts'  on keep_t, 0 elsewhere
(the math, with its tie rule, is kt_lib.nn.reference's k-sparse section). Step t reads what
simpleKT's step t reads: the selection ranks readable keys (s < t) only.
Deviations from pyKT's sparsekt.py (the authors' code), besides simpleKT's:
- kept weights are renormalised (the softmax of the kept scores); pyKT applies a second softmax
  to the kept *probabilities*, which makes the kept weights nearly uniform (`reweight:
  softmax`, the `pykt` preset, reproduces it);
- ties: pyKT keeps every key tied with the k-th weight (top-k) and drops every key tied with the
  first one dropped (soft); here a stable sort keeps exactly k keys / the exact prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..nn.attention import SharedQKAttention
from ..nn.sparse import REWEIGHTS, SELECTIONS, sparse_attend
from .base import register
from .simplekt import PAPER_SIZES, SimpleKT, SimpleKTConfig


@dataclass
class SparseKTConfig(SimpleKTConfig):
    """sparseKT: simpleKT's sizes plus the selection."""

    selection: str = "topk"  # "topk": the k largest weights; "soft": the fewest reaching `ratio`
    k: int = 5  # top-k: keys kept per query (pyKT's k_index)
    ratio: float = 0.8  # soft: weight the kept keys reach (pyKT's sparse_ratio)
    reweight: str = "renormalise"  # kept weights: renormalised, or pyKT's "softmax" of them

    PRESETS = {
        "tiny": {**SimpleKTConfig.PRESETS["tiny"], "k": 2},
        # simpleKT's paper preset (pyKT's training-script sizes) with pyKT's sparsekt script
        # defaults: k_index=5, sparse_ratio=0.8 (kt_config.json has no sparsekt entry)
        "paper": {**PAPER_SIZES, "selection": "topk", "k": 5},
        "soft": {**PAPER_SIZES, "selection": "soft", "ratio": 0.8},
        "pykt": {
            **PAPER_SIZES,
            "selection": "topk",
            "k": 5,
            "vector_difficulty": True,
            "reweight": "softmax",
        },
    }

    def validate(self) -> None:
        super().validate()
        require(self.selection in SELECTIONS, f"selection must be one of {SELECTIONS}")
        require(self.reweight in REWEIGHTS, f"reweight must be one of {REWEIGHTS}")
        require(self.k >= 1, f"k must be >= 1, got {self.k}")
        require(0 < self.ratio <= 1, f"ratio must be in (0, 1], got {self.ratio}")


class SparseAttention(SharedQKAttention):
    """simpleKT's attention with k-sparse weights."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        dropout: float,
        selection: str,
        k: int,
        ratio: float,
        reweight: str = "renormalise",
    ):
        super().__init__(d, n_heads, dropout)
        self.selection, self.k, self.ratio, self.reweight = selection, k, ratio, reweight

    def weigh(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        dropout: float,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return sparse_attend(
            q, k, v, mask, self.selection, self.k, self.ratio, dropout, need_weights, self.reweight
        )


@register("sparsekt")
class SparseKT(SimpleKT):
    """sparseKT: simpleKT whose attention keeps only the top-k (or top-mass) past interactions."""

    config_cls = SparseKTConfig

    def attention(self) -> nn.Module:
        c = self.config
        return SparseAttention(c.d, c.n_heads, c.dropout, c.selection, c.k, c.ratio, c.reweight)
