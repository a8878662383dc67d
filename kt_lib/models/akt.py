"""AKT (Ghosh, Heffernan & Lan 2020): monotonic attention, Rasch embeddings, knowledge retriever.

# B batch, L steps, D model dim, H heads, N encoder blocks
Layout (as AKT's code, which the paper's figure simplifies):
- embeddings: x (questions) and y (interactions) from `RaschEmbedding`;
- knowledge encoder: N layers of self-attention on y, inclusive mask (y_t may read r_t: the
  retriever below only ever reads y at strictly earlier steps);
- knowledge retriever: 2N layers alternating question self-attention (Q = K = V = x, inclusive
  mask, no FFN) and cross-attention (Q = K = x, V = encoded y, strict-past mask, + FFN);
- prediction: MLP on [retrieved h_t, x_t];
- `prefilter`, applied to x and y before the encoder and the retriever (not to the x the MLP
  reads): the identity here; a variant swaps it (e.g. for a causal smoothing).
Causality: h_t reads x at steps <= t and encoded y at steps < t; at t = 0 the strict mask has no
key, the cross-attention outputs zero (AKT's zero-padded first row), so logits[:, 0] depend on
q_0 (and pid_0) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch
from ..nn.attention import MonotonicWeights, causal_mask
from ..nn.blocks import mlp_head
from ..nn.embeddings import RaschEmbedded, RaschEmbedding
from ..nn.monotonic import MonotonicLayer
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class AKTConfig(BaseConfig):
    """AKT sizes; defaults are the AKT paper's (its released code's arguments)."""

    d: int = 256  # model dim (embeddings and attention)
    n_heads: int = 8  # attention heads, each with its own decay rate
    n_blocks: int = 1  # N: encoder layers; the retriever has 2N
    d_ff: int = 1024  # FFN inner dim
    dropout: float = 0.05  # dropout (attention weights, residuals, FFN, prediction MLP)
    kq_same: bool = True  # share the query and key projections (AKT default)
    final_fc_dim: int = 512  # first hidden layer of the prediction MLP
    final_fc_dim2: int = 256  # second hidden layer of the prediction MLP
    l2: float = 1e-5  # weight of the L2 penalty on the Rasch difficulties mu ("rasch_l2")

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "d_ff": 32, "final_fc_dim": 32, "final_fc_dim2": 16},
        # AKT paper: d=256, 8 heads, 1 encoder block (2 retriever layers), d_ff=1024
        "paper": {"d": 256, "n_heads": 8, "n_blocks": 1, "d_ff": 1024},
        # as the authors' code builds it: its load_model passes no d_ff, so the constructor's
        # 2048 applies, not the 1024 of its command line; train with recipe("akt_authors")
        "authors": {"d": 256, "n_heads": 8, "n_blocks": 1, "d_ff": 2048},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_ff > 0, f"d_ff must be > 0, got {self.d_ff}")
        require(self.final_fc_dim > 0 and self.final_fc_dim2 > 0, "MLP dims must be > 0")
        require(self.l2 >= 0, f"l2 must be >= 0, got {self.l2}")
        default = type(self).__dataclass_fields__["l2"].default
        require(  # the penalty is on the problems' Rasch difficulties: none without problem ids
            self.num_pid > 0 or self.l2 == default,
            f"l2={self.l2} weighs the L2 penalty on the problems' Rasch difficulties, and this "
            "model has no problem ids (num_pid 0): leave l2 at its default, or train on data "
            "with problem ids",
        )


@dataclass
class AKTState:
    """What the trunk computes before the output heads."""

    h: torch.Tensor  # [B, L, D] retrieved knowledge state
    emb: RaschEmbedded  # x, y, mu
    attention: dict[str, torch.Tensor] = field(default_factory=dict)  # only if asked


@register("akt")
class AKT(KTModel):
    """Attentive knowledge tracing: encoder on y, retriever on x, MLP on [h, x]."""

    config_cls = AKTConfig

    def __init__(self, config: AKTConfig):
        super().__init__(config)
        c = config
        self.embed = RaschEmbedding(c.num_c, c.d, c.num_pid, c.K)
        layer = lambda ffn: MonotonicLayer(c.d, c.n_heads, c.d_ff, c.dropout, c.kq_same, ffn)  # noqa: E731
        self.encoder = nn.ModuleList([layer(True) for _ in range(c.n_blocks)])
        # even index: question self-attention (no FFN); odd: cross-attention to encoded y (+ FFN)
        self.retriever = nn.ModuleList([layer(i % 2 == 1) for i in range(2 * c.n_blocks)])
        self.out = mlp_head(2 * c.d, (c.final_fc_dim, c.final_fc_dim2), c.dropout)
        # applied to x and to y before the encoder and the retriever, [B, L, D] -> [B, L, D]
        # (the prediction MLP reads the unfiltered x); AKT's is the identity, a variant swaps it
        self.prefilter: nn.Module = nn.Identity()

    def layer_names(self) -> list[str]:
        """Names used for attention maps and decay rates, in forward order."""
        enc = [f"encoder{i}" for i in range(len(self.encoder))]
        ret = [
            f"{'question' if i % 2 == 0 else 'retriever'}{i // 2}"
            for i in range(len(self.retriever))
        ]
        return enc + ret

    def decay_rates(self) -> dict[str, torch.Tensor]:
        """Layer name -> per-head decay rate softplus(gamma) [H], for the layers whose attention
        decays (all of AKT's; none where a variant's attention has no decay)."""
        layers = [*self.encoder, *self.retriever]
        return {
            n: m.attn.decay_rates().cpu()
            for n, m in zip(self.layer_names(), layers, strict=True)
            if hasattr(m.attn, "decay_rates")
        }

    def trunk(self, batch: Batch, need_weights: bool = False) -> AKTState:
        """Embeddings, encoder and retriever: the retrieved state h and the embeddings."""
        emb = self.embed(batch.q, batch.r, batch.pid)
        L = batch.q.shape[1]
        incl = causal_mask(L, batch.q.device)
        strict = causal_mask(L, batch.q.device, strict=True)
        names = iter(self.layer_names())
        maps: dict[str, torch.Tensor] = {}

        def keep(w) -> None:
            name = next(names)
            if isinstance(w, MonotonicWeights):
                maps[name], maps[f"{name}/undecayed"] = w.decayed, w.undecayed
            elif w is not None:  # an attention without decay: its weights alone
                maps[name] = w

        y = self.prefilter(emb.y)
        for layer in self.encoder:
            y, w = layer(y, y, y, incl, need_weights)
            keep(w)
        x = self.prefilter(emb.x)
        for i, layer in enumerate(self.retriever):
            if i % 2 == 0:
                x, w = layer(x, x, x, incl, need_weights)
            else:
                x, w = layer(x, x, y, strict, need_weights)
            keep(w)
        return AKTState(h=x, emb=emb, attention=maps)

    def predict_logits(self, state: AKTState) -> torch.Tensor:
        """Prediction MLP on [h, x] -> logits [B, L]."""
        return self.out(torch.cat([state.h, state.emb.x], dim=-1)).squeeze(-1)

    def base_losses(self, state: AKTState, batch: Batch) -> dict[str, torch.Tensor]:
        reg = RaschEmbedding.l2_penalty(state.emb.mu, batch.mask, self.config.l2)
        return {} if reg is None else {"rasch_l2": reg}

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        state = self.trunk(batch, return_attention)
        logits = self.predict_logits(state)
        return ModelOutput(
            logits=logits.float(),
            losses=self.base_losses(state, batch),
            attention=state.attention if return_attention else None,
        )
