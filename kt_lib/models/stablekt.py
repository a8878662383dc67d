"""stableKT (Li, Xu, Liu, Chen, Huang, Luo & Yang, AAAI 2024): "Enhancing Length Generalization for
Attention Based Knowledge Tracing Models with Linear Biases".

# B batch, L steps, D model dim, H heads, Dh = D / H, N blocks
    x_t = c_{q_t} (+ mu_{pid_t} * d_{q_t} with problem ids)     question embedding [B, L, D]
    y_t = c_{q_t} + g_{r_t}                                      interaction embedding [B, L, D]
    h^n = LN(h' + FFN(h')),  h' = LN(h^{n-1} + MHA(Q = K = h^{n-1}, V = y, keys j < t)),  h^0 = x
    MHA: heads h < H/2 score q.k, heads h >= H/2 the penumbral (hyperbolic) score P(q, k); all
         add ALiBi's -m_h |i - j| (math in kt_lib.nn.reference, `stable_attention`)
    logit_t = MLP([h^N_t, x_t])
On the `cpu` backend the dot-product heads run through kt_lib.nn.cpu's blocked kernel and the
penumbral ones through kt_lib.nn.penumbral's (the same math, tested against the reference).
Step t reads q/pid at steps <= t and r at steps < t (strict-past mask; t = 0 reads no key and
its attention outputs zero, as pyKT's zero-padded first row); padded keys are never read.
Deviations from pyKT's stablekt.py:
- aligned as ours are: logits[:, t] predicts r_t and step 0 is scored too (pyKT drops pred[:, 0]);
- no absolute positions: pyKT adds cosine positions to x and y for every emb_type through a bug
  (`if ... or self.emb_type.find("wha"):` is -1, i.e. true, when "wha" is absent), which the
  linear biases are meant to replace;
- the bias is computed for any length (pyKT precomputes 1000 steps, on CUDA only);
- mu is the Rasch scalar; pyKT's emb_type "qid" learns a D-vector per problem (preset "pykt").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import require
from ..data.dataset import Batch
from ..nn import penumbral, reference
from ..nn.attention import SharedQKAttention, attend, causal_mask
from ..nn.backend import choose
from ..nn.blocks import TransformerLayer, mlp_head
from ..nn.embeddings import QuestionEmbedding
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class StableKTConfig(BaseConfig):
    """stableKT sizes."""

    d: int = 256  # model dim (embeddings and attention)
    n_heads: int = 8  # attention heads: the first H // 2 dot-product, the rest penumbral
    n_blocks: int = 4  # N: attention blocks
    d_ff: int = 256  # FFN inner dim
    dropout: float = 0.05  # dropout (attention weights, residuals, FFN, prediction MLP)
    final_fc_dim: int = 256  # first hidden layer of the prediction MLP
    final_fc_dim2: int = 256  # second hidden layer of the prediction MLP
    radius: float = 0.5  # r: radius of the penumbral heads' half-space
    gamma: float = 0.7  # scale of the penumbral score
    vector_difficulty: bool = False  # True: a D-vector difficulty per problem (pyKT), not a scalar
    # recompute the attention in backward, its [B, H, L, L] chain unsaved; None: on a GPU only
    # (there it halves the peak memory at the same step time; the `cpu` backend's kernels keep
    # only the weights and the dropped weights, and recompute the rest themselves).
    # The numbers are the same either way (the dropout draws are replayed).
    checkpoint: bool | None = None
    SAME_NUMBERS = ("checkpoint",)

    BINARY = True
    PRESETS = {
        "tiny": {
            "d": 16,
            "n_heads": 4,
            "n_blocks": 1,
            "d_ff": 32,
            "final_fc_dim": 32,
            "final_fc_dim2": 16,
        },
        # pyKT's configs/kt_config.json has no stablekt entry: these are pyKT's
        # examples/wandb_stablekt_train.py defaults (d_model 256, 8 heads, 4 blocks, d_ff 256,
        # dropout 0.05, final_fc_dim 256 / 256, r 0.5, gamma 0.7)
        "paper": {"d": 256, "n_heads": 8, "n_blocks": 4, "d_ff": 256, "dropout": 0.05},
        # the same with pyKT's default embedding (emb_type "qid": vector difficulty)
        "pykt": {
            "d": 256,
            "n_heads": 8,
            "n_blocks": 4,
            "d_ff": 256,
            "dropout": 0.05,
            "vector_difficulty": True,
        },
    }

    def validate(self) -> None:
        super().validate()
        require(self.n_heads >= 2, f"stableKT needs >= 2 heads (two kinds), got {self.n_heads}")
        require(self.d // self.n_heads >= 2, "penumbral heads need a head dim >= 2")
        require(self.d_ff > 0, f"d_ff must be > 0, got {self.d_ff}")
        require(self.final_fc_dim > 0 and self.final_fc_dim2 > 0, "MLP dims must be > 0")
        require(self.radius > 0, f"radius must be > 0, got {self.radius}")
        require(self.gamma >= 0, f"gamma must be >= 0, got {self.gamma}")


def _attention(*args) -> tuple[torch.Tensor, torch.Tensor]:
    """`reference.stable_attention` with the penumbral score's hand-written backward."""
    return reference.stable_attention(*args, penumbral=penumbral.penumbral_scores)


def _attention_out(*args) -> torch.Tensor:
    return _attention(*args)[0]


class StableAttention(SharedQKAttention):
    """simpleKT's shared query/key attention with `reference.stable_attention` on the heads."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        dropout: float,
        radius: float,
        gamma: float,
        ckpt: bool | None,
    ):
        super().__init__(d, n_heads, dropout)
        self.radius, self.gamma, self.ckpt = radius, gamma, ckpt
        self.register_buffer("slopes", reference.alibi_slopes(n_heads), persistent=False)  # [H]

    def weigh(self, q, k, v, mask, dropout: float, need_weights: bool):
        """Heads [B, H, L, Dh] -> (out, weights [B, H, L, S] if asked)."""
        low = (torch.float16, torch.bfloat16)  # under autocast the score chain stays float32
        q, k, v = (t.float() if t.dtype in low else t for t in (q, k, v))
        args = (q, k, v, self.slopes, self.radius, self.gamma, mask, dropout)
        if need_weights:
            return _attention(*args)
        run = _fused_out if choose(q) == "cpu" else _attention_out
        if (q.is_cuda if self.ckpt is None else self.ckpt) and torch.is_grad_enabled():
            # the same numbers (dropout draws replayed); backward recomputes the weights
            return checkpoint(run, *args, use_reentrant=False), None
        return run(*args), None


def _fused_out(q, k, v, slopes, radius: float, gamma: float, mask, dropout: float) -> torch.Tensor:
    """The `cpu` backend's `_attention_out`: the same math with the heads split by kind (a
    softmax is per head): the dot-product half through `attend` with the linear bias
    (kt_lib.nn.cpu's blocked kernel), the penumbral half through `penumbral.penumbral_attention`.
    Dropout draws its own keep masks per query block, as those kernels do. The heads are split
    with `split`, not two slices: a slice's backward fills a zero tensor of the whole input
    (4% of the CPU step), a split's concatenates its parts' gradients."""
    half = q.shape[1] // 2
    bias = reference.linear_bias(slopes.to(q.dtype), q.shape[2], k.shape[2])  # [H, L, S]
    sizes = [half, q.shape[1] - half]
    q_dot, q_pen = q.split(sizes, dim=1)
    k_dot, k_pen = (q_dot, q_pen) if k is q else k.split(sizes, dim=1)  # shared queries and keys
    v_dot, v_pen = v.split(sizes, dim=1)
    out_dot, _ = attend(q_dot, k_dot, v_dot, mask, dropout, bias=bias[:half])
    out_pen = penumbral.penumbral_attention(
        q_pen, k_pen, v_pen, radius, gamma, mask, dropout, bias[half:]
    )
    return torch.cat([out_dot, out_pen], dim=1)


@register("stablekt")
class StableKT(KTModel):
    """stableKT: simpleKT's layout with linear-bias attention, half its heads penumbral."""

    config_cls = StableKTConfig

    def __init__(self, config: StableKTConfig):
        super().__init__(config)
        c = config
        self.embed = QuestionEmbedding(c.num_c, c.d, c.num_pid, c.K, c.vector_difficulty)
        self.blocks = nn.ModuleList()
        for _ in range(c.n_blocks):
            layer = TransformerLayer(c.d, c.n_heads, c.d_ff, c.dropout)
            layer.attn = StableAttention(c.d, c.n_heads, c.dropout, c.radius, c.gamma, c.checkpoint)
            self.blocks.append(layer)
        self.out = mlp_head(2 * c.d, (c.final_fc_dim, c.final_fc_dim2), c.dropout)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        x, y = self.embed(batch.q, batch.r, batch.pid)  # [B, L, D] each
        L = x.shape[1]
        strict = causal_mask(L, x.device, strict=True)  # [L, L]
        mask = (strict & batch.mask[:, None, :]).unsqueeze(1)  # [B, 1, L, L]: no padded key
        h = x
        maps: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.blocks):
            h, w = layer(h, h, y, mask, return_attention)  # [B, L, D]
            if w is not None:
                maps[f"block{i}"] = w
        logits = self.out(torch.cat([h, x], dim=-1)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention=maps if return_attention else None)
