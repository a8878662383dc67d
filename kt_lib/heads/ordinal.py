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

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import from_dict, require
from ..nn import Dropout, MultiHeadAttention, causal_mask
from ..nn.backend import choose as attention_backend
from ..registry import Registry

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
    """What a mechanism reads (seed 002's context; `mask` is True on valid steps)."""

    embeddings: torch.Tensor  # [B, L, D] per-step state known before the response: q, position
    responses: torch.Tensor  # [B, L] long in [0, K); r_t is read by steps > t only
    mask: torch.Tensor | None = None  # [B, L] bool, True = real step (None: all real)
    # seed 002's context metadata; models fill questions [B, L], batch_size and seq_len
    metadata: dict[str, Any] = field(default_factory=dict)

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


# --- mechanisms ------------------------------------------------------------------------------


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


# --- composition ---------------------------------------------------------------------------


def _mechanism_output(
    mechanism: AttentionMechanism, embeddings, responses, mask, metadata
) -> torch.Tensor:
    """A mechanism's output alone (what gradient checkpointing recomputes in the backward pass)."""
    return mechanism.attend(AttentionContext(embeddings, responses, mask, metadata))[0]


class MechanismCache:
    """Evaluation-time cache of mechanism outputs, keyed by content.

    A stored output is returned only when the mechanism, its parameters, the embeddings, the
    responses and the mask are bitwise equal to those it was computed from (snapshots are kept,
    so later in-place edits cannot fool it) and the settings that change the arithmetic (dtype,
    device, autocast, attention backend, matmul precision, need_weights) are the same. The seed's
    key (shapes plus the set of response values) maps different sequences to one entry. Used only
    in eval mode without gradients; `max_entries` outputs are kept per mechanism (least recently
    used dropped). Worth it only when the same batch is evaluated again by an unchanged model.
    """

    def __init__(self, max_entries: int = 8):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.entries: dict[int, list[tuple]] = {}  # id(mechanism) -> [(module, key, snap, out)]
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _settings(mechanism: AttentionMechanism, context: AttentionContext, need_weights: bool):
        e = context.embeddings
        kind = e.device.type
        autocast = torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind)
        return (
            need_weights,
            e.dtype,
            str(e.device),
            tuple(e.shape),
            context.mask is None,
            autocast,
            attention_backend(e),
            torch.get_float32_matmul_precision(),
            tuple((k, v) for k, v in sorted(context.metadata.items()) if not torch.is_tensor(v)),
        )

    @staticmethod
    def _snapshot(mechanism: AttentionMechanism, context: AttentionContext) -> list[torch.Tensor]:
        tensors = [context.embeddings, context.responses]
        tensors += [] if context.mask is None else [context.mask]
        tensors += [v for _, v in sorted(context.metadata.items()) if torch.is_tensor(v)]
        return [t.detach() for t in tensors] + [p.detach() for p in mechanism.parameters()]

    def fetch(self, mechanism: AttentionMechanism, context: AttentionContext, need_weights: bool):
        """`mechanism.attend(context, need_weights)`, from the cache when the inputs match."""
        key = self._settings(mechanism, context, need_weights)
        now = self._snapshot(mechanism, context)
        entries = self.entries.setdefault(id(mechanism), [])
        for i, (module, k, snap, result) in enumerate(entries):
            if (
                module is mechanism
                and k == key
                and all(
                    a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
                    for a, b in zip(snap, now, strict=True)
                )
            ):
                self.hits += 1
                entries.append(entries.pop(i))  # most recently used last
                out, maps = result
                return out.clone(), {name: w.clone() for name, w in maps.items()}
        self.misses += 1
        out, maps = mechanism.attend(context, need_weights)
        entries.append(
            (
                mechanism,
                key,
                [t.clone() for t in now],
                (out.clone(), {n: w.clone() for n, w in maps.items()}),
            )
        )
        del entries[: -self.max_entries]
        return out, maps

    def clear(self) -> None:
        self.entries.clear()
        self.hits = self.misses = 0


class AttentionPipeline(nn.Module):
    """Run several mechanisms on one context and fuse their outputs.

    Fusions: concat (a linear map of the concatenated outputs), weighted (softmax weights),
    mean, gated (the seed's CompositeAttention: g = sigmoid(W [o_1; o_2]), g o_1 + (1 - g) o_2,
    per step and feature; exactly two mechanisms). Every fusion is per step, so a fusion of
    causal mechanisms stays causal.
    """

    def __init__(
        self,
        mechanisms: list[AttentionMechanism],
        fusion_method: str = "concat",
        gradient_checkpointing: bool = False,
    ):
        super().__init__()
        if not mechanisms:
            raise ValueError("AttentionPipeline needs at least one mechanism")
        if fusion_method not in FUSIONS:
            raise ValueError(
                f"unknown fusion method {fusion_method!r}; valid: {', '.join(FUSIONS)}"
            )
        dims = [m.embed_dim for m in mechanisms]
        if fusion_method != "concat" and len(set(dims)) > 1:
            raise ValueError(f"fusion {fusion_method!r} needs equal embed_dim, got {dims}")
        if fusion_method == "gated" and len(mechanisms) != 2:
            raise ValueError(
                f"fusion 'gated' gates between exactly two mechanisms, got {len(mechanisms)}"
            )
        self.mechanisms = nn.ModuleList(mechanisms)
        self.fusion_method = fusion_method
        self.embed_dim = dims[0]
        self.gradient_checkpointing = gradient_checkpointing
        self.cache: MechanismCache | None = None  # set by the model's `eval_cache()`
        if fusion_method == "concat":
            self.fusion_layer = nn.Linear(sum(dims), dims[0])
        elif fusion_method == "weighted":
            self.weights = nn.Parameter(torch.zeros(len(mechanisms)))  # softmax -> 1/n each
        elif fusion_method == "gated":
            self.gate = nn.Linear(2 * dims[0], dims[0])
        names = [m.registry_name or type(m).__name__ for m in mechanisms]
        self.names = (
            names if len(set(names)) == len(names) else [f"{i}:{n}" for i, n in enumerate(names)]
        )

    def fusion_weights(self) -> torch.Tensor | None:
        """Softmax weights of the `weighted` fusion (None for the others)."""
        return self.weights.softmax(0) if self.fusion_method == "weighted" else None

    def fuse(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """Mechanism outputs, each [B, L, D_i] -> [B, L, D]."""
        if self.fusion_method == "concat":
            return self.fusion_layer(torch.cat(outputs, dim=-1))
        if self.fusion_method == "weighted":
            return torch.einsum("n,nbld->bld", self.fusion_weights(), torch.stack(outputs))
        if self.fusion_method == "gated":
            g = torch.sigmoid(self.gate(torch.cat(outputs, dim=-1)))  # [B, L, D]
            return g * outputs[0] + (1 - g) * outputs[1]
        return torch.stack(outputs).mean(0)

    def attend_one(
        self, mechanism: AttentionMechanism, context: AttentionContext, need_weights: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One mechanism's (output, maps): cached in evaluation, checkpointed in training."""
        grad = torch.is_grad_enabled()
        if self.cache is not None and not (self.training or mechanism.training or grad):
            return self.cache.fetch(mechanism, context, need_weights)
        if self.gradient_checkpointing and self.training and grad and not need_weights:
            c = context
            out = checkpoint(
                _mechanism_output,
                mechanism,
                c.embeddings,
                c.responses,
                c.mask,
                c.metadata,
                use_reentrant=False,
            )
            return out, {}
        return mechanism.attend(context, need_weights)

    def run(
        self, context: AttentionContext, need_weights: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(fused output [B, L, D], maps '<mechanism>/<map>' -> [B, H, L, L] when asked)."""
        for n_cats in {m.config.n_cats for m in self.mechanisms}:
            context.check(n_cats)
        outputs, maps = [], {}
        for name, m in zip(self.names, self.mechanisms, strict=True):
            out, w = self.attend_one(m, context, need_weights)
            outputs.append(out)
            maps.update({f"{name}/{key}": v for key, v in w.items()})
        return self.fuse(outputs), maps

    def forward(self, context: AttentionContext) -> torch.Tensor:
        return self.run(context)[0]

    def get_attention_weights(self, context: AttentionContext) -> dict[str, torch.Tensor]:
        """Every mechanism's maps, keyed '<mechanism>/<map>'."""
        with torch.no_grad():
            return self.run(context, need_weights=True)[1]


def build_pipeline(
    names: list[str],
    config: AttentionConfig | dict | None = None,
    fusion_method: str = "concat",
    gradient_checkpointing: bool = False,
) -> AttentionPipeline:
    """Pipeline of registered mechanisms sharing one config."""
    mechanisms = [AttentionRegistry.create(n, config) for n in names]
    return AttentionPipeline(mechanisms, fusion_method, gradient_checkpointing)


def composite_attention(
    config: AttentionConfig | dict | None = None,
    first: str = "ordinal_aware",
    second: str = "ordinal_pattern",
) -> AttentionPipeline:
    """Seed 002's CompositeAttention: a learned gate between two mechanisms (fusion 'gated').

    Like a mechanism it maps a context to [B, L, D] and exposes `get_attention_weights`.
    """
    return build_pipeline([first, second], config, "gated")
