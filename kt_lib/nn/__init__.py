"""Neural building blocks: masks, attention, transformer layers."""

from .attention import MultiHeadAttention, attend, causal_mask
from .blocks import FeedForward, TransformerLayer

__all__ = ["MultiHeadAttention", "attend", "causal_mask", "FeedForward", "TransformerLayer"]
