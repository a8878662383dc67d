"""extraKT (Li, Bai, Guo et al., ECAI 2024): "Extending Context Window of Attention Based Knowledge
Tracing Models via Length Extrapolation".

# B batch, L query steps, S key steps, D model dim, H heads, Dh = D / H, N encoder blocks
AKT's layout (kt_lib.models.akt: Rasch embeddings, encoder on y, retriever on x, MLP on [h, x])
with every attention layer's distance decay replaced by ALiBi's linear bias on the scores:
    s_ij = q_i . k_j / sqrt(Dh) - m_h |i - j|           m_h: ALiBi slopes, 2^(-8 (h+1) / H)
    w_ij = masked softmax_j(s_ij),   out_i = sum_j w_ij v_j
    y' = encoder(y; keys j <= t),  h = retriever(Q = K = x, V = y'; keys j < t)
    logit_t = MLP([h_t, x_t])
(the math is kt_lib.nn.reference's `alibi_attention`; queries and keys share one projection).
What step t reads is AKT's: the bias depends on i - j only and the masks are AKT's, so logits[:, t]
read q/pid at steps <= t and r at steps < t (t = 0: q_0 and pid_0 alone).
Deviations from pyKT's extrakt.py (emb_type "qid"), besides AKT's:
- the bias is computed for the window's length (pyKT precomputes 1000 x 1000 on CUDA with
  `.cuda()`: it fails on CPU and for windows over 1000 steps);
- no decay rates: pyKT builds a `gammas` parameter in every layer and never reads it under "qid";
- the question self-attention layers have no FFN (pyKT builds one in each and never runs it);
- the Rasch penalty is AKT's here (weight x mean of mu^2 over valid steps; pyKT sums mu^2 over
  every position, padding included, onto a mean BCE).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import require
from ..nn import reference
from ..nn.attention import SharedQKAttention, attend
from .akt import AKT, AKTConfig
from .base import register

# pyKT's configs/kt_config.json has no extrakt entry: these are its examples/wandb_extrakt_train.py
# defaults (d_model 256, d_ff 256, 4 heads, 4 blocks, dropout 0.05, learning rate 1e-3); the model
# passes final_fc_dim 512 and a second hidden layer of 256 (AKTConfig's defaults)
PAPER_SIZES = {"d": 256, "n_heads": 4, "n_blocks": 4, "d_ff": 256, "dropout": 0.05}


@dataclass
class ExtraKTConfig(AKTConfig):
    """extraKT sizes: AKT's fields (the slopes are fixed by the number of heads)."""

    PRESETS = {"tiny": AKTConfig.PRESETS["tiny"], "paper": PAPER_SIZES}

    def validate(self) -> None:
        super().validate()
        require(
            self.kq_same,
            "extraKT shares the query and key projection (pyKT's kq_same=1); kq_same=False is "
            "not implemented",
        )


class ALiBiAttention(SharedQKAttention):
    """simpleKT's shared query/key attention with ALiBi's linear bias on the scores, per head."""

    def __init__(self, d: int, n_heads: int, dropout: float = 0.0):
        super().__init__(d, n_heads, dropout)
        # fixed, not learned: outside the state dict, moved with the module's dtype and device
        self.register_buffer("slopes", reference.alibi_slopes(n_heads), persistent=False)  # [H]

    def weigh(self, q, k, v, mask, dropout: float, need_weights: bool):
        """Heads [B, H, L, Dh] -> (out, weights [B, H, L, S] if asked): `attend` with the bias
        -m_h |i - j| added to the scores, i.e. reference.alibi_attention's math."""
        bias = reference.linear_bias(self.slopes.to(q.dtype), q.shape[-2], k.shape[-2])
        return attend(q, k, v, mask, dropout, need_weights, bias=bias)  # bias [H, L, S]


@register("extrakt")
class ExtraKT(AKT):
    """AKT whose attention layers drop the distance decay for a linear bias on their scores."""

    config_cls = ExtraKTConfig

    def __init__(self, config: ExtraKTConfig):
        super().__init__(config)
        c = config
        for layer in (*self.encoder, *self.retriever):
            layer.attn = ALiBiAttention(c.d, c.n_heads, c.dropout)
