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
from ..nn.attention import attend, causal_mask
from ..nn.blocks import TransformerLayer, mlp_head
from ..nn.shapes import merge_heads, split_heads
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


class QuestionEmbedding(nn.Module):
    """x = c_q (+ mu_pid * d_q), y = c_q + g_r: the problem term enters x only (simpleKT)."""

    def __init__(self, num_c: int, d: int, num_pid: int, K: int, vector_difficulty: bool):
        super().__init__()
        self.c = nn.Embedding(num_c, d)  # c_q concept embedding
        self.g = nn.Embedding(K, d)  # g_r response embedding
        self.mu = None
        if num_pid > 0:
            self.mu = nn.Embedding(num_pid, d if vector_difficulty else 1)  # problem difficulty
            self.d_q = nn.Embedding(num_c, d)  # d_q concept variation vector
            nn.init.zeros_(self.mu.weight)  # every problem starts at its concept

    def forward(
        self, q: torch.Tensor, r: torch.Tensor, pid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, r, pid [B, L] -> x, y [B, L, D]; pid is ignored when the model has none."""
        c = self.c(q)
        y = c + self.g(r)
        if self.mu is None or pid is None:
            return c, y
        return c + self.mu(pid) * self.d_q(q), y


class SharedQKAttention(nn.Module):
    """Multi-head attention whose queries and keys share one projection (pyKT's kq_same=1)."""

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.h, self.dropout = n_heads, dropout
        self.k_proj = nn.Linear(d, d)  # queries and keys
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        for lin in (self.k_proj, self.v_proj):  # pyKT's init; out_proj keeps torch's weights
            nn.init.xavier_uniform_(lin.weight)
        for lin in (self.k_proj, self.v_proj, self.out_proj):
            nn.init.zeros_(lin.bias)

    def weigh(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        dropout: float,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention on projected heads [B, H, L, Dh]: plain scaled dot-product."""
        return attend(q, k, v, mask, dropout, need_weights)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query [B, L, D], key/value [B, S, D], bool mask [L, S] -> [B, L, D] (+ [B, H, L, S])."""
        k = split_heads(self.k_proj(key), self.h)  # [B, H, S, Dh]
        q = k if query is key else split_heads(self.k_proj(query), self.h)  # [B, H, L, Dh]
        v = split_heads(self.v_proj(value), self.h)  # [B, H, S, Dh]
        p = self.dropout if self.training else 0.0
        out, w = self.weigh(q, k, v, mask, p, need_weights)
        return self.out_proj(merge_heads(out)), w


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
