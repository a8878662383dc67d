"""The ordinal attention interface (seed 002): config, context, mechanism base class, registry.

Contract and causality rules: see kt_lib.heads.ordinal (the package's public face). The built-in
mechanisms are in kt_lib.heads.ordinal.mechanisms, composition (pipelines, the evaluation cache)
in kt_lib.heads.ordinal.pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...config import from_dict, require
from ...nn import Dropout, MultiHeadAttention, causal_mask
from ...nn.backend import compiling
from ...registry import Registry

MECHANISMS: Registry = Registry("ordinal attention mechanism")
FUSIONS = ("concat", "weighted", "mean", "gated")
SHARPNESS = 4.0  # slope of hierarchical_ordinal's soft "r >= threshold" indicator


@dataclass
class AttentionConfig:
    """Sizes and initial values shared by the mechanisms (seed 002 defaults)."""

    embed_dim: int = 512  # D, model dim of the embeddings the mechanisms refine
    n_heads: int = 8  # attention heads
    n_cats: int = 4  # K response categories
    dropout: float = 0.1  # dropout on attention weights and residual branches
    distance_penalty: float = 0.5  # initial score penalty per unit of ordinal distance
    window_size: int = 3  # W, steps read by ordinal_pattern's causal convolution
    correct_threshold: int = 2  # hierarchical_ordinal's initial "correct" cut: r >= it

    def validate(self) -> None:
        require(self.embed_dim > 0 and self.n_heads > 0, "embed_dim and n_heads must be > 0")
        require(
            self.embed_dim % self.n_heads == 0,
            f"embed_dim={self.embed_dim} is not divisible by n_heads={self.n_heads}",
        )
        require(self.n_cats >= 2, f"n_cats must be >= 2, got {self.n_cats}")
        require(0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout}")
        require(self.window_size >= 1, f"window_size must be >= 1, got {self.window_size}")
        require(
            1 <= self.correct_threshold <= self.n_cats - 1,
            f"correct_threshold must be in [1, n_cats - 1 = {self.n_cats - 1}], "
            f"got {self.correct_threshold}",
        )


@dataclass
class AttentionContext:
    """What a mechanism reads (seed 002's context). Two mask conventions, never mixed up:
    `mask` is True on real steps (kt_lib's), `padding_mask` True on padded steps (the seed's
    `AttentionContext.mask`, PyTorch's key_padding_mask); give one. A `mask` that leaves some
    row no real step is refused: it is almost surely a padding mask passed as `mask`."""

    embeddings: torch.Tensor  # [B, L, D] per-step state known before the response: q, position
    responses: torch.Tensor  # [B, L] long in [0, K); r_t is read by steps > t only
    mask: torch.Tensor | None = None  # [B, L] bool, True = real step (None: all real)
    # seed 002's context metadata; models fill questions [B, L], batch_size and seq_len
    metadata: dict[str, Any] = field(default_factory=dict)
    padding_mask: torch.Tensor | None = None  # [B, L] bool, True = padded (the seed's convention)

    def __post_init__(self) -> None:
        if self.padding_mask is not None:
            if self.mask is not None:
                raise ValueError(
                    "give mask (True = real step) or padding_mask (True = padded), not both"
                )
            self.mask, self.padding_mask = ~self.padding_mask.to(torch.bool), None

    def check(self, n_cats: int) -> None:
        """Shape, dtype and range errors that name the offending tensor."""
        e, r = self.embeddings, self.responses
        if e.dim() != 3:
            raise ValueError(f"embeddings must be [B, L, D], got shape {tuple(e.shape)}")
        if tuple(r.shape) != tuple(e.shape[:2]):
            raise ValueError(
                f"responses must be [B, L] = {tuple(e.shape[:2])}, got {tuple(r.shape)}"
            )
        if r.dtype.is_floating_point or r.dtype == torch.bool:
            raise ValueError(f"responses must hold integer categories, got dtype {r.dtype}")
        if self.mask is not None and tuple(self.mask.shape) != tuple(r.shape):
            raise ValueError(
                f"mask must be [B, L] = {tuple(r.shape)}, got {tuple(self.mask.shape)}"
            )
        if compiling():  # the value checks below read tensors on the host, a graph break
            return  # each: a compiled forward skips them (an eager one runs them)
        if self.mask is not None and r.numel() and not bool(self.mask.any(-1).all()):
            row = int((~self.mask.any(-1)).nonzero()[0, 0])
            raise ValueError(
                f"mask has no real step in row {row}: AttentionContext.mask is True on REAL "
                "steps (kt_lib's convention); a padding mask (True = padded, the seed 002 "
                "convention, PyTorch's key_padding_mask) goes in padding_mask="
            )
        if r.numel() and (int(r.min()) < 0 or int(r.max()) >= n_cats):
            raise ValueError(
                f"responses must lie in [0, {n_cats - 1}], got {int(r.min())}..{int(r.max())}"
            )


def past_mask(context: AttentionContext) -> torch.Tensor:
    """[B, 1, L, L] bool: query t may read key s iff s < t and s is a valid step."""
    B, L = context.responses.shape
    mask = causal_mask(L, context.responses.device, strict=True).unsqueeze(0)  # [1, L, L]
    if context.mask is not None:
        mask = mask & context.mask.to(torch.bool).unsqueeze(1)
    return mask.unsqueeze(1)


def previous_response(responses: torch.Tensor) -> torch.Tensor:
    """[B, L] r_{t-1}, the latest response known at t (0 at t = 0, which reads no key anyway)."""
    return F.pad(responses[:, :-1], (1, 0))


class OrdinalEmbedding(nn.Module):
    """Response embedding, adjacent categories overlap: e(k) = sum_h max(0, 1-|k-h|/(K-1)) V_h."""

    def __init__(self, K: int, d: int):
        super().__init__()
        k = torch.arange(K, dtype=torch.float32)
        mix = (1 - (k.unsqueeze(1) - k.unsqueeze(0)).abs() / (K - 1)).clamp_min(0)  # [K, K]
        self.register_buffer("mix", mix, persistent=False)
        self.basis = nn.Parameter(torch.randn(K, d) / d**0.5)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return self.mix[r] @ self.basis  # [..., D]


class BiasedAttention(MultiHeadAttention):
    """Multi-head attention with an additive score bias [B, H|1, L, S] (rows without keys -> 0)."""

    def forward(self, query, key, value, mask=None, bias=None, need_weights=False):
        if bias is None:
            return super().forward(query, key, value, mask, need_weights)
        q = self.split(self.q_proj(query))
        k = self.split(self.k_proj(key))
        v = self.split(self.v_proj(value))
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias  # [B, H, L, S]
        if mask is None:
            mask = torch.ones_like(scores, dtype=torch.bool)
        has_key = mask.any(-1, keepdim=True)
        scores = scores.masked_fill(~(mask | ~has_key), float("-inf"))
        weights = scores.softmax(-1) * has_key
        p = self.dropout if self.training else 0.0
        out = F.dropout(weights, p) @ v
        return self.out_proj(self.merge(out)), weights if need_weights else None


class AttentionMechanism(nn.Module):
    """Base class: keys/values from past interactions, residual + LayerNorm on the output.

    A subclass overrides `attend(context, need_weights)` (output and attention maps) or, as in
    seed 002's extension guide, `forward(context)` (output only); one that overrides neither
    cannot be built.
    """

    registry_name = ""
    _overrides_forward = False

    def __init__(self, config: AttentionConfig):
        super().__init__()
        self.config = config
        self.embed_dim = config.embed_dim
        self.response_embedding = OrdinalEmbedding(config.n_cats, config.embed_dim)
        self.drop = Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.embed_dim)
        if type(self).attend is AttentionMechanism.attend and not self._overrides_forward:
            raise TypeError(
                f"Can't instantiate {type(self).__name__}: override attend(context, "
                "need_weights) or forward(context)"
            )

    def history(self, context: AttentionContext) -> torch.Tensor:
        """[B, L, D] interaction at each step (carries r_s: read at steps > s only)."""
        return context.embeddings + self.response_embedding(context.responses)

    def residual(self, context: AttentionContext, h: torch.Tensor) -> torch.Tensor:
        return self.norm(context.embeddings + self.drop(h))

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._overrides_forward = cls.forward is not AttentionMechanism.forward

    def attend(
        self, context: AttentionContext, need_weights: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(output [B, L, D], maps name -> [B, H, L, L] when need_weights else {}).

        The workbook's mechanisms override `attend`. A mechanism written as seed 002's extension
        guide says, overriding `forward(context)` only, is accepted: its output, no maps.
        """
        if not self._overrides_forward:
            raise TypeError(
                f"{type(self).__name__} must override attend(context, need_weights) (or, as in "
                "seed 002's extension guide, forward(context))"
            )
        return self.forward(context), {}

    def forward(self, context: AttentionContext) -> torch.Tensor:
        context.check(self.config.n_cats)
        return self.attend(context)[0]

    def get_attention_weights(self, context: AttentionContext) -> dict[str, torch.Tensor]:
        """Attention maps name -> [B, H, L, L] (weights before dropout)."""
        context.check(self.config.n_cats)
        with torch.no_grad():
            return self.attend(context, need_weights=True)[1]


class UnknownMechanismError(KeyError, ValueError):
    """Unknown mechanism name: a KeyError (registry convention) and a ValueError (seed 002)."""


class AttentionRegistry:
    """Seed 002's registry interface over `MECHANISMS` (a `kt_lib.registry.Registry`)."""

    @classmethod
    def register(cls, name: str):
        def decorator(mechanism_class):
            if not (
                isinstance(mechanism_class, type)
                and issubclass(mechanism_class, AttentionMechanism)
            ):
                raise ValueError(f"{mechanism_class} must inherit from AttentionMechanism")
            return MECHANISMS.register(name)(mechanism_class)

        return decorator

    @classmethod
    def create(cls, name: str, config: AttentionConfig | dict | None = None) -> AttentionMechanism:
        """Build mechanism `name`; `config` may be an AttentionConfig, a dict or None (defaults)."""
        if name not in MECHANISMS:
            raise UnknownMechanismError(
                f"unknown ordinal attention mechanism {name!r}; valid names: "
                f"{', '.join(cls.list_available())}"
            )
        if config is None:
            config = AttentionConfig()
        elif isinstance(config, dict):
            config = from_dict(AttentionConfig, config, source="attention config")
        config.validate()
        return MECHANISMS[name](config)

    @classmethod
    def list_available(cls) -> list[str]:
        """Registered names in registration order."""
        return list(MECHANISMS.keys())
