"""Plug-in ordinal attention mechanisms (seed 002) behind a registry, made causal.

# B batch, L steps, D embed dim, H heads, K response categories, W conv window
Contract of every mechanism: `forward(context) -> [B, L, D]`, the shape of `context.embeddings`
(a subclass implements `attend(context, need_weights)`, which also returns its attention maps, or
only `forward(context)`, as seed 002's extension guide writes it), where the output at step t
reads `embeddings` at steps <= t and `responses` at steps < t only.
`embeddings[:, t]` must therefore carry what is known at t before the response (question,
position), never r_t. Each mechanism builds its keys/values from the interactions
`embeddings[:, s] + response_embedding(r_s)` and lets step t read them for s < t only (strict-past
mask: step 0 reads nothing, its attention row is all zero and its output is the residual path).

The seed's versions leak in four ways, all removed here: unmasked `nn.MultiheadAttention`
(every step reads every response), scores weighted by the response at the query step itself
(|r_t - r_s|), response-specific transforms of step t by r_t, and a centred convolution window that
reads r_{t+1}. The query-side response level is therefore the latest known one, r_{t-1}.
`get_attention_weights(context)` returns a dict name -> [B, H, L, L] (the seed mixed a tensor, a
dict and None): entries in [0, 1], each row summing to 1 over its visible keys, or all zero when
a row has none (the seed's rows all summed to 1 because every step read every step).

An `AttentionPipeline` fuses its mechanisms by concat, weighted, mean or gated (the seed's
`CompositeAttention`: a learned per-feature gate between two mechanisms). Its efficiency layer:
`gradient_checkpointing` recomputes each mechanism in the backward pass instead of keeping its
activations (training with gradients only), and an opt-in `MechanismCache` returns the stored
output of a mechanism evaluated again on bitwise-equal inputs and parameters (evaluation only).
"""

from .base import (
    FUSIONS,
    MECHANISMS,
    SHARPNESS,
    AttentionConfig,
    AttentionContext,
    AttentionMechanism,
    AttentionRegistry,
    BiasedAttention,
    OrdinalEmbedding,
    UnknownMechanismError,
    past_mask,
    previous_response,
)
from .mechanisms import (
    HierarchicalOrdinalAttention,
    OrdinalAwareAttention,
    OrdinalPatternAttention,
    QWKAlignedAttention,
    ResponseConditionedRefinement,
)
from .pipeline import (
    AttentionPipeline,
    MechanismCache,
    build_pipeline,
    composite_attention,
)

__all__ = [
    "FUSIONS",
    "MECHANISMS",
    "SHARPNESS",
    "AttentionConfig",
    "AttentionContext",
    "AttentionMechanism",
    "AttentionPipeline",
    "AttentionRegistry",
    "BiasedAttention",
    "HierarchicalOrdinalAttention",
    "MechanismCache",
    "OrdinalAwareAttention",
    "OrdinalEmbedding",
    "OrdinalPatternAttention",
    "QWKAlignedAttention",
    "ResponseConditionedRefinement",
    "UnknownMechanismError",
    "build_pipeline",
    "composite_attention",
    "past_mask",
    "previous_response",
]
