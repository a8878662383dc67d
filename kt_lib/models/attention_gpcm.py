"""The GPCM models of the registry: ordinal knowledge tracing with a GPCM output (seed 002).

# B batch, L steps, D model dim, H heads, K response categories, S summary dim, C concepts
Both models share one trunk:
    question stream   e_t = E_q(q_t) + P(t)              (known at t before the response)
    encoder           read_t from q at steps <= t and r at steps < t only
    memory            m_t = LSTM state after the interactions x_s = e_s + R(r_s), s < t
    summary state     s_t = tanh(W [read_t; m_t; e_t])   [B, L, S]
    ability           theta_t = w . s_t                   [B, L]
    GPCM layer        per-concept alpha > 0 and K-1 ordered thresholds -> logits [B, L, K]
- GPCMModel ("attention_gpcm"): interactions x_s = e_s + R(r_s) (R an ordinal response
  embedding) are refined by `n_layers` causal self-attention layers (s reads interactions <= s),
  then e_t reads the refined history at steps < t. The published AttentionGPCM refines with an
  unmasked nn.MultiheadAttention, so every prediction read future responses.
- ModularGPCMModel ("modular_attention_gpcm"): the encoder is `n_layers` stacked
  AttentionPipelines of registered ordinal mechanisms (kt_lib.heads.ordinal) fused by concat,
  weighted, mean or gated; a pipeline's output at t reads r < t only, so stacking stays causal.
The recurrent memory stands in for the published model's DKVMN memory, which sits between its
attention refinement and its summary network (`memory=False` drops it: attention only).
With K = 2 the GPCM layer is a 2PL model, so both also run on binary data.

The registry models (`build_model(name, config)`, `forward(batch) -> ModelOutput`) live here;
seed 002's interface (`AttentionGPCM(n_questions, ...)`, `model(questions, responses)`) is the
thin adapter layer in kt_lib.models.gpcm_interface.

Deliberate deviations from seed 002 (its code leaks the future or is unsound):
- every mechanism is causal (kt_lib.heads.ordinal): step t reads responses < t only, so step 0's
  attention row is all zero instead of summing to 1, and `get_attention_weights` returns a dict
  name -> [B, H, L, L] for every mechanism (the seed mixed a tensor, a dict and None);
- its evaluation cache keyed outputs by shape and the set of response values, so two different
  sequences shared an entry; `eval_cache()` keys by content and is opt-in;
- mixed precision is bf16 autocast with float32 weights (TrainConfig.precision), not
  `model.half()` (float16 weights underflow without a loss scaler); gradient checkpointing
  (non-reentrant, dropout draws replayed) runs in training with gradients only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import require
from ..data.dataset import Batch
from ..heads.gpcm import ORDINAL_LOSSES, GPCMHead, parse_loss
from ..heads.ordinal import (
    FUSIONS,
    MECHANISMS,
    AttentionConfig,
    AttentionContext,
    AttentionPipeline,
    AttentionRegistry,
    MechanismCache,
    OrdinalEmbedding,
)
from ..heads.ordinal.config import SEED_MECHANISMS
from ..nn import LSTM, Dropout, TransformerLayer, causal_mask
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class GPCMConfig(BaseConfig):
    """AttentionGPCM sizes (paper: the published AttentionGPCM's embed 64, 4 heads, 2 cycles)."""

    K: int = 4  # response categories (2: binary data, the GPCM layer is then a 2PL)
    ordered_thresholds: bool = True  # False: free GPCM step thresholds (see kt_lib.heads.gpcm)
    d: int = 64  # model dim of the embeddings and attention
    n_heads: int = 4  # attention heads
    n_layers: int = 1  # causal refinement layers (modular: stacked pipelines)
    d_ff: int | None = None  # FFN inner dim of the refinement layers; None -> 4 * d
    d_summary: int = 50  # width of the summary state theta is read from
    memory: bool = True  # recurrent memory of past interactions in the summary (published: DKVMN)
    dropout: float = 0.1  # dropout on embeddings, attention and the summary
    max_len: int = 200  # longest window (learned positions)
    loss: str = "ce"  # prediction loss: "ce", "emd", "qwk" or a sum such as "ce+emd"
    ordinal_loss_weight: float = 1.0  # weight of the non-CE terms of `loss`
    # training with gradients only: recompute each encoder layer / mechanism in the backward
    # pass instead of keeping its activations (less memory, about one more encoder forward)
    gradient_checkpointing: bool = False
    SAME_NUMBERS = ("gradient_checkpointing",)

    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "d_summary": 16, "max_len": 64},
        "paper": {"d": 64, "n_heads": 4, "n_layers": 2, "d_summary": 50},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_summary > 0, f"d_summary must be > 0, got {self.d_summary}")
        require(self.ordinal_loss_weight >= 0, "ordinal_loss_weight must be >= 0")
        try:
            parse_loss(self.loss)
        except KeyError as exc:
            raise ValueError(f"loss {self.loss!r}: {exc.args[0]}") from None


@dataclass
class ModularGPCMConfig(GPCMConfig):
    """ModularAttentionGPCM: the trunk above plus the mechanism pipeline (seed 002 defaults)."""

    n_layers: int = 1  # stacked pipelines
    mechanisms: list[str] = field(default_factory=lambda: list(SEED_MECHANISMS))  # registry names
    fusion: str = "concat"  # how mechanism outputs are fused: concat, weighted, mean, gated
    distance_penalty: float = 0.5  # initial penalty per unit of ordinal distance
    window_size: int = 3  # ordinal_pattern's causal convolution window
    correct_threshold: int | None = None  # hierarchical_ordinal's initial cut; None -> K // 2

    def validate(self) -> None:
        super().validate()
        require(len(self.mechanisms) > 0, "mechanisms must name at least one mechanism")
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        require(
            not unknown,
            f"unknown mechanism(s) {unknown}; valid: {AttentionRegistry.list_available()}",
        )
        require(self.fusion in FUSIONS, f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        require(
            self.fusion != "gated" or len(self.mechanisms) == 2,
            f"fusion 'gated' gates between exactly two mechanisms, got {self.mechanisms}",
        )
        self.attention_config().validate()

    def attention_config(self) -> AttentionConfig:
        """The AttentionConfig every mechanism of the pipeline is built with."""
        threshold = self.K // 2 if self.correct_threshold is None else self.correct_threshold
        return AttentionConfig(
            embed_dim=self.d,
            n_heads=self.n_heads,
            n_cats=self.K,
            dropout=self.dropout,
            distance_penalty=self.distance_penalty,
            window_size=self.window_size,
            correct_threshold=threshold,
        )


def _checkpointed(module: nn.Module, fn, *args):
    """fn(*args), recomputed in the backward pass when `module` is training with gradients."""
    if module.training and torch.is_grad_enabled():
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


class CausalRefinement(nn.Module):
    """Self-attention over interactions (s reads <= s), then a strict-past read by the queries."""

    def __init__(self, c: GPCMConfig):
        super().__init__()
        d_ff = c.d_ff or 4 * c.d
        self.response_embedding = OrdinalEmbedding(c.K, c.d)
        self.layers = nn.ModuleList(
            TransformerLayer(c.d, c.n_heads, d_ff, c.dropout) for _ in range(c.n_layers)
        )
        self.read = TransformerLayer(c.d, c.n_heads, d_ff, c.dropout)
        self.gradient_checkpointing = c.gradient_checkpointing

    def forward(self, e, r, mask, need_weights=False, q=None):
        """e [B, L, D] question stream, r [B, L], mask [B, L] -> read [B, L, D], maps."""
        L = e.shape[1]
        keys = mask.view(mask.shape[0], 1, 1, L)  # [B, 1, 1, L] valid keys
        inclusive = causal_mask(L, e.device) & keys
        strict = causal_mask(L, e.device, strict=True) & keys
        h = e + self.response_embedding(r)  # interactions: step s carries r_s
        maps = {}
        for i, layer in enumerate(self.layers):
            if self.gradient_checkpointing and not need_weights:
                h = _checkpointed(self, lambda x, f=layer: f(x, x, x, inclusive)[0], h)
            else:
                h, maps[f"refine{i}"] = layer(h, h, h, inclusive, need_weights)
        out, maps["read"] = self.read(e, h, h, strict, need_weights)
        return out, maps


class PipelineEncoder(nn.Module):
    """Stacked AttentionPipelines: each refines the question stream from responses < t."""

    def __init__(self, c: ModularGPCMConfig):
        super().__init__()
        att = c.attention_config()
        self.pipelines = nn.ModuleList(
            AttentionPipeline(
                [AttentionRegistry.create(m, att) for m in c.mechanisms],
                c.fusion,
                c.gradient_checkpointing,
            )
            for _ in range(c.n_layers)
        )

    def forward(self, e, r, mask, need_weights=False, q=None):
        """As CausalRefinement; `q` [B, L] (concept ids) goes into each context's metadata."""
        B, L = r.shape
        meta = {"questions": q, "batch_size": B, "seq_len": L} if q is not None else {}
        h, maps = e, {}
        for i, pipeline in enumerate(self.pipelines):
            h, w = pipeline.run(AttentionContext(h, r, mask, dict(meta)), need_weights)
            prefix = f"block{i}/" if len(self.pipelines) > 1 else ""
            maps.update({prefix + k: v for k, v in w.items()})
        return h, maps


@register("attention_gpcm")
class GPCMModel(KTModel):
    """Causal attention encoder, summary state, GPCM output over K ordered categories."""

    config_cls = GPCMConfig
    ordinal = True

    def __init__(self, config: GPCMConfig):
        super().__init__(config)
        c = config
        self.q_embedding = nn.Embedding(c.num_c, c.d)
        self.pos_embedding = nn.Embedding(c.max_len, c.d)
        self.drop = Dropout(c.dropout)
        self.encoder = self.build_encoder()
        self.memory = LSTM(c.d, c.d, batch_first=True) if c.memory else None
        self.memory_response = OrdinalEmbedding(c.K, c.d) if c.memory else None
        self.summary = nn.Sequential(
            nn.Linear((3 if c.memory else 2) * c.d, c.d_summary), nn.Tanh(), Dropout(c.dropout)
        )
        self.ability = nn.Linear(c.d_summary, 1)
        self.gpcm = GPCMHead(c.num_c, c.K, ordered=c.ordered_thresholds)
        self.loss_parts = parse_loss(c.loss)
        self._last_inputs: Batch | None = None  # what get_attention_weights() reads

    def build_encoder(self) -> nn.Module:
        return CausalRefinement(self.config)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        """Logits [B, L, K] over the response categories (and attention maps when asked)."""
        if (
            batch.q.dim() != 2
            or batch.r.shape != batch.q.shape
            or batch.mask.shape != batch.q.shape
        ):
            shapes = (tuple(batch.q.shape), tuple(batch.r.shape), tuple(batch.mask.shape))
            raise ValueError(f"Batch q, r, mask must all be [B, L], got {shapes}")
        L = batch.q.shape[1]
        if L > self.config.max_len:
            raise ValueError(f"sequence length {L} > max_len {self.config.max_len}")
        if not torch.compiler.is_compiling():
            self._last_inputs = batch
        pos = torch.arange(L, device=batch.q.device)
        e = self.drop(self.q_embedding(batch.q) + self.pos_embedding(pos))  # [B, L, D]
        read, maps = self.encoder(e, batch.r, batch.mask, return_attention, q=batch.q)
        parts = [read, e]
        if self.memory is not None:
            h, _ = self.memory(e + self.memory_response(batch.r))  # h_s has read r_s
            parts.append(F.pad(h[:, :-1], (0, 0, 1, 0)))  # shift: step t sees states of s < t
        theta = self.ability(self.summary(torch.cat(parts, dim=-1))).squeeze(-1)  # [B, L]
        g = self.gpcm(theta, batch.q)
        extras = {"theta": theta, "alpha": g.alpha, "thresholds": g.thresholds}
        return ModelOutput(
            logits=g.logits, attention=maps if return_attention else None, extras=extras
        )

    @torch.no_grad()
    def get_attention_weights(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """Attention maps name -> [B, H, L, L] of `batch` (None: the last forward's inputs),
        computed as in evaluation (no dropout)."""
        if batch is None:
            if self._last_inputs is None:
                raise RuntimeError("no forward pass yet: call the model first or pass the inputs")
            batch = self._last_inputs
        was_training = self.training
        self.eval()
        try:
            return self.forward(batch, return_attention=True).attention
        finally:
            self.train(was_training)

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        """The configured prediction loss ('ce', 'emd', 'qwk' or a '+' sum) over valid steps."""
        m = batch.mask
        logits, y = out.logits[m], batch.r[m]
        parts = {name: ORDINAL_LOSSES[name](logits, y) for name in self.loss_parts}
        w = self.config.ordinal_loss_weight
        pred = sum(v if name == "ce" else w * v for name, v in parts.items())
        terms = {**(parts if len(parts) > 1 else {}), "pred": pred, **out.losses}
        terms["total"] = pred + sum(out.losses.values())
        return terms

    @torch.no_grad()
    def item_parameters(self) -> dict[str, np.ndarray]:
        """Learned per-concept discrimination alpha [C] and thresholds [C, K-1]."""
        alpha, thresholds = self.gpcm.item_parameters()
        return {"alpha": alpha.cpu().numpy(), "thresholds": thresholds.cpu().numpy()}


@register("modular_attention_gpcm")
class ModularGPCMModel(GPCMModel):
    """GPCMModel whose encoder is a pipeline of plug-in ordinal attention mechanisms."""

    config_cls = ModularGPCMConfig

    def build_encoder(self) -> nn.Module:
        return PipelineEncoder(self.config)

    @property
    def attention_pipeline(self) -> AttentionPipeline:
        """The (first) pipeline, as seed 002 names it."""
        return self.encoder.pipelines[0]

    @contextlib.contextmanager
    def eval_cache(self, max_entries: int = 8) -> Iterator[MechanismCache]:
        """Inside the block, evaluation (eval mode, no gradients) reuses a mechanism's output
        when its inputs and parameters are bitwise equal to a stored call's; dropped on exit.
        Pays off only when the same batch is evaluated again by an unchanged model."""
        cache = MechanismCache(max_entries)
        for p in self.encoder.pipelines:
            p.cache = cache
        try:
            yield cache
        finally:
            for p in self.encoder.pipelines:
                p.cache = None
