"""simpleKT (Liu, Liu, Chen, Huang & Luo, ICLR 2023): Rasch question embeddings, plain attention.

# B batch, L steps, D model dim, H heads, N blocks
    x_t = c_{q_t} (+ mu_{pid_t} * d_{q_t} with problem ids)     question embedding [B, L, D]
    y_t = c_{q_t} + g_{r_t}                                      interaction embedding [B, L, D]
    h^0 = x + P,  v = y + P                                      P: fixed sinusoidal positions
    h^n = LN(h' + FFN(h')),  h' = LN(h^{n-1} + MHA(Q = K = h^{n-1}, V = v, keys j < t))
    logit_t = MLP([h^N_t, x_t])
Step t reads q/pid at steps <= t and r at steps < t: the attention's mask is the strict past, so
at t = 0 it reads no key and outputs zero (pyKT's zero-padded first row).
Deviations from pyKT's simplekt.py (the authors' code):
- aligned as ours are: logits[:, t] predicts r_t and step 0 is scored too (pyKT drops pred[:, 0]);
- mu is the Rasch scalar of the paper; pyKT's default emb_type "qid" learns a D-vector per
  problem (`vector_difficulty=True`, preset "pykt");
- the positions are computed, not a frozen parameter (no max_len, nothing in the state dict);
- Dropout is kt_lib's (fast Bernoulli on CPU); the maps returned are the weights before dropout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch
from ..nn.attention import SharedQKAttention, causal_mask
from ..nn.blocks import TransformerLayer, mlp_head
from ..nn.embeddings import QuestionEmbedding
from .base import BaseConfig, KTModel, ModelOutput, register

# the paper tunes per dataset and names no sizes, and pyKT's configs/kt_config.json has no
# simplekt entry: these are pyKT's examples/wandb_simplekt_train.py defaults
PAPER_SIZES = {"d": 256, "n_heads": 4, "n_blocks": 2, "d_ff": 256, "dropout": 0.1}


@dataclass
class SimpleKTConfig(BaseConfig):
    """simpleKT sizes; defaults are the paper preset's."""

    d: int = 256  # model dim (embeddings and attention)
    n_heads: int = 4  # attention heads
    n_blocks: int = 2  # N: attention blocks
    d_ff: int = 256  # FFN inner dim
    dropout: float = 0.1  # dropout (attention weights, residuals, FFN, prediction MLP)
    final_fc_dim: int = 256  # first hidden layer of the prediction MLP
    final_fc_dim2: int = 256  # second hidden layer of the prediction MLP
    vector_difficulty: bool = False  # True: a D-vector difficulty per problem (pyKT), not a scalar

    BINARY = True
    PRESETS = {
        "tiny": {
            "d": 16,
            "n_heads": 2,
            "n_blocks": 1,
            "d_ff": 32,
            "final_fc_dim": 32,
            "final_fc_dim2": 16,
        },
        "paper": PAPER_SIZES,
        "pykt": {**PAPER_SIZES, "vector_difficulty": True},  # pyKT's default emb_type "qid"
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_ff > 0, f"d_ff must be > 0, got {self.d_ff}")
        require(self.final_fc_dim > 0 and self.final_fc_dim2 > 0, "MLP dims must be > 0")


def sinusoid_positions(L: int, d: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """[L, D] fixed positions, sin on even dims and cos on odd ones (pyKT's cosine positions)."""
    pos = torch.arange(L, device=device, dtype=torch.float32).unsqueeze(1)  # [L, 1]
    freq = torch.exp(torch.arange(0, d, 2, device=device) * (-math.log(10000.0) / d))  # [D/2]
    pe = torch.empty(L, d, device=device)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d // 2])
    return pe.to(dtype)


@register("simplekt")
class SimpleKT(KTModel):
    """simpleKT: question queries attend to past interactions; MLP on [h, x]."""

    config_cls = SimpleKTConfig

    def __init__(self, config: SimpleKTConfig):
        super().__init__(config)
        c = config
        self.embed = QuestionEmbedding(c.num_c, c.d, c.num_pid, c.K, c.vector_difficulty)
        self.blocks = nn.ModuleList()
        for _ in range(c.n_blocks):
            layer = TransformerLayer(c.d, c.n_heads, c.d_ff, c.dropout)
            layer.attn = self.attention()  # the post-norm layer around simpleKT's attention
            self.blocks.append(layer)
        self.out = mlp_head(2 * c.d, (c.final_fc_dim, c.final_fc_dim2), c.dropout)

    def attention(self) -> nn.Module:
        """The attention of every block (a variant swaps it)."""
        c = self.config
        return SharedQKAttention(c.d, c.n_heads, c.dropout)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        x, y = self.embed(batch.q, batch.r, batch.pid)  # [B, L, D] each
        L, dev = x.shape[1], x.device
        pos = sinusoid_positions(L, x.shape[-1], dev, x.dtype)  # [L, D]
        h, v = x + pos, y + pos
        strict = causal_mask(L, dev, strict=True)  # [L, L]; padding is right, i.e. in the future
        maps: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.blocks):
            h, w = layer(h, h, v, strict, return_attention)  # [B, L, D]
            if w is not None:
                maps[f"block{i}"] = w
        logits = self.out(torch.cat([h, x], dim=-1)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention=maps if return_attention else None)
