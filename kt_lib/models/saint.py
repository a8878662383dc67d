"""SAINT (Choi et al., L@S 2020, "Towards an appropriate query, key, and value computation for
knowledge tracing"): a transformer encoder over exercises, a decoder over responses.

# B batch, L steps, D model dim, H heads, N encoder (= decoder) blocks
    e_t = E_c[q_t] (+ E_p[pid_t]) + P_t                      exercise stream (encoder input)
    s_t = E_r[r_{t-1}] + P_t,  r_{-1} = start token           response stream (decoder input)
    encoder block:  x = LN(x); x = x + SelfAttn(x); x = LN(x); x = x + FFN(x)
    decoder block:  y = LN(y); y = y + SelfAttn(y); y = y + CrossAttn(y, LN(enc)); y = LN(y);
                    y = y + FFN(y)
    logit_t = w . Dropout(y_t) + b
Every attention is causal with the diagonal (key j <= query t), so step t reads exercises at
steps <= t and responses at steps < t (the start token shifts the responses right by one).
Deviations from pyKT's `saint` (configs/kt_config.json sizes; the authors published no code):
- pyKT builds an embedding table in every block and uses the first block's only; we build one.
- padded keys are masked as well (pyKT relies on right padding alone).
- problem ids are optional (pyKT's num_q > 0 adds E_p[pid] to the concept embedding; we do the
  same when the data has problem ids, else concepts alone).
The pre-norm layout with the residual taken after the norm (x = LN(x) + f(LN(x))) is pyKT's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch
from ..nn import Dropout, FeedForward, MultiHeadAttention, causal_mask
from .base import BaseConfig, KTModel, ModelOutput, register

START = 2  # response token of the decoder's first step (responses are 0/1)


@dataclass
class SAINTConfig(BaseConfig):
    """SAINT sizes."""

    d: int = 256  # model dim (embeddings, attention, FFN inner dim as in pyKT)
    n_heads: int = 8  # attention heads
    n_blocks: int = 2  # encoder blocks, and as many decoder blocks
    d_ff: int | None = None  # FFN inner dim; None -> d (pyKT's transformer_FFN)
    dropout: float = 0.2  # attention weights, residual branches, FFN, before the output layer
    max_len: int = 200  # longest window (learned positions)

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "n_blocks": 2},
        # pyKT configs/kt_config.json `saint`: emb_size 256, 8 heads, dropout 0.2, n_blocks 2
        # (the paper's EdNet configuration is not reproduced here)
        "paper": {"d": 256, "n_heads": 8, "n_blocks": 2, "dropout": 0.2},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_ff is None or self.d_ff > 0, f"d_ff must be > 0 or None, got {self.d_ff}")


class _EncoderBlock(nn.Module):
    """Pre-norm self-attention and FFN; the residual is taken after the norm (pyKT)."""

    def __init__(self, d: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, n_heads, dropout)
        self.ffn = FeedForward(d, d_ff, dropout)
        self.drop1, self.drop2 = Dropout(dropout), Dropout(dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.ln1(x)  # [B, L, D]
        h, w = self.attn(x, x, x, mask, need_weights)
        x = self.ln2(x + self.drop1(h))
        return x + self.drop2(self.ffn(x)), w


class _DecoderBlock(nn.Module):
    """Pre-norm self-attention over responses, cross-attention to the encoder, FFN."""

    def __init__(self, d: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.ln1, self.ln_enc, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = MultiHeadAttention(d, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d, n_heads, dropout)
        self.ffn = FeedForward(d, d_ff, dropout)
        self.drop1, self.drop2, self.drop3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)

    def forward(
        self, y: torch.Tensor, enc: torch.Tensor, mask: torch.Tensor, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        y = self.ln1(y)  # [B, L, D]
        h, w_self = self.self_attn(y, y, y, mask, need_weights)
        y = y + self.drop1(h)
        e = self.ln_enc(enc)  # pyKT normalises the encoder output, not the query, here
        h, w_cross = self.cross_attn(y, e, e, mask, need_weights)
        y = self.ln3(y + self.drop2(h))
        return y + self.drop3(self.ffn(y)), w_self, w_cross


@register("saint")
class SAINT(KTModel):
    """Encoder over exercises, decoder over shifted responses, causal masks everywhere."""

    config_cls = SAINTConfig

    def __init__(self, config: SAINTConfig):
        super().__init__(config)
        c = config
        d_ff = c.d_ff or c.d
        self.concept = nn.Embedding(c.num_c, c.d)
        self.problem = nn.Embedding(c.num_pid, c.d) if c.num_pid > 0 else None
        self.response = nn.Embedding(3, c.d)  # 0, 1 and the start token
        self.pos = nn.Embedding(c.max_len, c.d)
        self.encoder = nn.ModuleList(
            _EncoderBlock(c.d, c.n_heads, d_ff, c.dropout) for _ in range(c.n_blocks)
        )
        self.decoder = nn.ModuleList(
            _DecoderBlock(c.d, c.n_heads, d_ff, c.dropout) for _ in range(c.n_blocks)
        )
        self.drop = Dropout(c.dropout)
        self.out = nn.Linear(c.d, 1)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        B, L = batch.q.shape
        if L > self.config.max_len:
            raise ValueError(f"sequence length {L} > max_len {self.config.max_len}")
        pos = self.pos.weight[:L]  # [L, D]
        x = self.concept(batch.q) + pos  # [B, L, D]
        if self.problem is not None and batch.pid is not None:
            x = x + self.problem(batch.pid)
        r = batch.r.masked_fill(~batch.mask, 0)
        shifted = torch.cat([torch.full_like(r[:, :1], START), r[:, :-1]], dim=1)  # [B, L]
        y = self.response(shifted) + pos  # [B, L, D]
        # key j is readable from query t if j <= t and j is a real step: [B, 1, L, L]
        mask = (causal_mask(L, x.device) & batch.mask[:, None, :]).unsqueeze(1)
        maps: dict[str, torch.Tensor] = {}
        for i, block in enumerate(self.encoder):
            x, w = block(x, mask, return_attention)
            if return_attention:
                maps[f"enc{i}"] = w
        for i, block in enumerate(self.decoder):
            y, w_self, w_cross = block(y, x, mask, return_attention)
            if return_attention:
                maps[f"dec{i}_self"], maps[f"dec{i}_cross"] = w_self, w_cross
        logits = self.out(self.drop(y)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention=maps if return_attention else None)
