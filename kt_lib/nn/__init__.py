"""Neural building blocks: masks, attention (one interface, three backends), dropout, layers.

- attention.py  the interface: `attend`, `monotonic_attention`, `slot_attention`, masks, MHA
- reference.py  the math, plainly (the `reference` backend)
- cpu.py        cache-blocked CPU kernels (the `cpu` backend)
- cuda.py       whole-tensor programs (the `cuda` backend)
- backend.py    which backend runs (by device, or forced with `use_backend`)
- dropout.py    the one `Dropout` (fast Bernoulli on CPU)
- monotonic.py  AKT/DTransformer attention modules; blocks.py the shared transformer layer
- state_bank.py per-step states a later step reads by student (SKVMN's hops, ReKT's attempts)
"""

from .attention import (
    MonotonicWeights,
    MultiHeadAttention,
    attend,
    causal_mask,
    monotonic_attention,
    slot_attention,
)
from .backend import BACKENDS, use_backend
from .blocks import LSTM, FeedForward, TransformerLayer, mlp_head
from .dropout import Dropout
from .state_bank import StateBank

__all__ = [
    "BACKENDS",
    "Dropout",
    "LSTM",
    "FeedForward",
    "MonotonicWeights",
    "MultiHeadAttention",
    "StateBank",
    "TransformerLayer",
    "attend",
    "causal_mask",
    "mlp_head",
    "monotonic_attention",
    "slot_attention",
    "use_backend",
]
