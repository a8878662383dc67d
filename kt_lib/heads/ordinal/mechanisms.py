"""The five causal ordinal attention mechanisms of seed 002, registered in `MECHANISMS`.

# B batch, L steps, D embed dim, H heads, K response categories, W conv window
Each reads `embeddings` at steps <= t and `responses` at steps < t only (kt_lib.heads.ordinal).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...nn import MultiHeadAttention
from .base import (
    SHARPNESS,
    AttentionConfig,
    AttentionContext,
    AttentionMechanism,
    AttentionRegistry,
    BiasedAttention,
    past_mask,
    previous_response,
)


@AttentionRegistry.register("ordinal_aware")
class OrdinalAwareAttention(AttentionMechanism):
    """Attention to past interactions with a learned per-head penalty on |r_{t-1} - r_s|."""

    def __init__(self, config: AttentionConfig):
        super().__init__(config)
        self.attn = BiasedAttention(config.embed_dim, config.n_heads, config.dropout)
        self.distance_penalty = nn.Parameter(torch.full((config.n_heads,), config.distance_penalty))

    def attend(self, context, need_weights=False):
        r = context.responses
        dist = (previous_response(r).unsqueeze(-1) - r.unsqueeze(-2)).abs()  # [B, L, L]
        bias = -self.distance_penalty.view(1, -1, 1, 1) * dist.unsqueeze(1).to(
            context.embeddings.dtype
        )
        kv = self.history(context)
        h, w = self.attn(context.embeddings, kv, kv, past_mask(context), bias, need_weights)
        return self.residual(context, h), ({"attention": w} if need_weights else {})


@AttentionRegistry.register("response_conditioned")
class ResponseConditionedRefinement(AttentionMechanism):
    """Each past interaction gets a gated refinement specific to its response category."""

    def __init__(self, config: AttentionConfig):
        super().__init__(config)
        D, K = config.embed_dim, config.n_cats
        self.gates = nn.Linear(D, K * D)
        self.hidden = nn.Linear(D, K * D)
        self.out_weight = nn.Parameter(torch.randn(K, D, D) / D**0.5)
        self.out_bias = nn.Parameter(torch.zeros(K, D))
        self.refine_norm = nn.LayerNorm(D)
        self.attn = MultiHeadAttention(D, config.n_heads, config.dropout)

    def refine(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """x [B, L, D] interactions, r [B, L] -> each step refined by its own category's path."""
        B, L, D = x.shape
        K = self.config.n_cats
        gate = torch.sigmoid(self.gates(x).view(B, L, K, D))
        hid = self.drop(F.relu(self.hidden(x).view(B, L, K, D)))
        out = torch.einsum("blkd,kde->blke", hid, self.out_weight) + self.out_bias  # [B, L, K, D]
        pick = r.view(B, L, 1, 1).expand(B, L, 1, D)
        gate, out = gate.gather(2, pick).squeeze(2), out.gather(2, pick).squeeze(2)
        return self.refine_norm(gate * out + (1 - gate) * x)

    def attend(self, context, need_weights=False):
        kv = self.refine(self.history(context), context.responses)
        h, w = self.attn(context.embeddings, kv, kv, past_mask(context), need_weights)
        return self.residual(context, h), ({"attention": w} if need_weights else {})


@AttentionRegistry.register("ordinal_pattern")
class OrdinalPatternAttention(AttentionMechanism):
    """A causal convolution over the last W interactions (trends, near misses) feeds attention."""

    def __init__(self, config: AttentionConfig):
        super().__init__(config)
        D, K = config.embed_dim, config.n_cats
        self.pattern_conv = nn.Conv1d(D + K, D, kernel_size=config.window_size)
        self.attn = MultiHeadAttention(D, config.n_heads, config.dropout)

    def patterns(self, context: AttentionContext) -> torch.Tensor:
        """[B, L, D]: pattern at s summarises interactions s-W+1..s (left padding only)."""
        onehot = F.one_hot(context.responses, self.config.n_cats).to(context.embeddings.dtype)
        x = torch.cat([self.history(context), onehot], dim=-1).transpose(1, 2)  # [B, D+K, L]
        x = F.pad(x, (self.config.window_size - 1, 0))
        return F.relu(self.pattern_conv(x)).transpose(1, 2)

    def attend(self, context, need_weights=False):
        kv = self.patterns(context)
        h, w = self.attn(context.embeddings, kv, kv, past_mask(context), need_weights)
        return self.residual(context, h), ({"attention": w} if need_weights else {})


@AttentionRegistry.register("qwk_aligned")
class QWKAlignedAttention(AttentionMechanism):
    """Scores penalised by QWK's quadratic disagreement between r_{t-1} and r_s, per head.

    The seed multiplied scores by the QWK weight, which raises negative scores of distant pairs;
    an additive penalty `gamma (1 - w_qwk)` always lowers them (gamma starts at
    `distance_penalty (K-1)^2`, i.e. the same penalty as ordinal_aware at distance 1).
    """

    def __init__(self, config: AttentionConfig):
        super().__init__(config)
        K = config.n_cats
        self.attn = BiasedAttention(config.embed_dim, config.n_heads, config.dropout)
        k = torch.arange(K, dtype=torch.float32)
        self.register_buffer(
            "qwk_weights",
            1 - (k.unsqueeze(1) - k.unsqueeze(0)) ** 2 / (K - 1) ** 2,
            persistent=False,
        )
        init = config.distance_penalty * (K - 1) ** 2
        self.qwk_penalty = nn.Parameter(torch.full((config.n_heads,), init))

    def attend(self, context, need_weights=False):
        r = context.responses
        agreement = self.qwk_weights[
            previous_response(r).unsqueeze(-1), r.unsqueeze(-2)
        ]  # [B, L, L]
        bias = -self.qwk_penalty.view(1, -1, 1, 1) * (1 - agreement).unsqueeze(1)
        kv = self.history(context)
        h, w = self.attn(
            context.embeddings, kv, kv, past_mask(context), bias.to(kv.dtype), need_weights
        )
        return self.residual(context, h), ({"attention": w} if need_weights else {})


@AttentionRegistry.register("hierarchical_ordinal")
class HierarchicalOrdinalAttention(AttentionMechanism):
    """Two levels: attention over past correct/incorrect outcomes, then over full ordinal ones.

    "Correct" is a soft, differentiable `r_s >= threshold` with a learned threshold (the seed's
    hard comparison gave its threshold parameter no gradient).
    """

    def __init__(self, config: AttentionConfig):
        super().__init__(config)
        D, H = config.embed_dim, config.n_heads
        self.threshold = nn.Parameter(torch.tensor(float(config.correct_threshold)))
        self.outcome = nn.Embedding(2, D)  # incorrect, correct
        self.binary_attn = MultiHeadAttention(D, H, config.dropout)
        self.binary_norm = nn.LayerNorm(D)
        self.ordinal_attn = MultiHeadAttention(D, H, config.dropout)

    def attend(self, context, need_weights=False):
        e, r = context.embeddings, context.responses
        mask = past_mask(context)
        correct = torch.sigmoid(SHARPNESS * (r.to(e.dtype) - self.threshold + 0.5)).unsqueeze(-1)
        binary = e + correct * self.outcome.weight[1] + (1 - correct) * self.outcome.weight[0]
        h1, w1 = self.binary_attn(e, binary, binary, mask, need_weights)
        h1 = self.binary_norm(e + self.drop(h1))
        kv = self.history(context)
        h2, w2 = self.ordinal_attn(h1, kv, kv, mask, need_weights)
        out = self.norm(h1 + self.drop(h2))
        return out, ({"binary": w1, "ordinal": w2} if need_weights else {})
