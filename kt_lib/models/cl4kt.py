"""CL4KT (Lee et al., WWW 2022, "Contrastive Learning for Knowledge Tracing"): AKT-style
question and interaction encoders with a knowledge retriever, plus a contrastive loss over
augmented views of each student's window.

# B batch, L steps, D model dim, H heads, N blocks, C concepts
    x = E_q[q],  y = E_i[q + (C + 1) r]
    x = QuestionEncoder^N(x)      monotonic self-attention, keys <= t, + GELU FFN
    y = InteractionEncoder^N(y)   monotonic self-attention, keys <= t, + GELU FFN
    h = Retriever^N(x, x, y)      queries/keys x, values y, keys < t (no key at t = 0: zero)
    logit_t = MLP([h_t, E_q[q_t]])
Training adds lambda_cl * (InfoNCE(questions of view 1, view 2) + InfoNCE(interactions of view
1, view 2 | hard negatives: the clean window with flipped responses)), views from
kt_lib.nn.augment (mask, replace, permute, crop), mean-pooled over each view's real steps.
Step t reads q at steps <= t and r at steps < t; the views only enter the loss, never a logit.
Deviations from the authors' code (UpstageAI/cl4kt models/cl4kt.py):
- their retriever's first row has no key and softmaxes over ALL steps (masked_fill -1e32); with
  2 blocks that row is a key of every later query, so future responses reach every prediction.
  Ours outputs zero there (kt_lib's attention), as AKT's zero_pad.
- view encoders use the same causal masks as the prediction path (theirs are bidirectional).
- the hard-negative view runs through every interaction block (theirs re-reads the raw
  embedding in each block, so only the last block counts); padded keys are masked.
- concepts only, as theirs (their problem ids are loaded but unused); no positions (as theirs).
- views are drawn afresh at every step from torch's RNG (theirs are seeded by the sample's
  index, so a student's two views are the same in every epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, KTDataset
from ..nn import Dropout, causal_mask, mlp_head
from ..nn.augment import (
    crop_window,
    flip_responses,
    mask_tokens,
    permute_window,
    replace_by_difficulty,
)
from ..nn.monotonic import MonotonicLayer
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class CL4KTConfig(BaseConfig):
    """CL4KT sizes, augmentations and contrastive loss."""

    d: int = 64  # model dim
    n_heads: int = 8  # attention heads
    n_blocks: int = 2  # N: blocks in each encoder and in the retriever
    d_ff: int = 1024  # FFN inner dim
    dropout: float = 0.2  # attention weights, residuals, FFN, prediction MLP
    kq_same: bool = True  # one projection for queries and keys
    final_fc_dim: int = 512  # prediction MLP hidden widths: final_fc_dim, final_fc_dim // 2
    lambda_cl: float = 0.1  # weight of the contrastive loss (the authors' reg_cl)
    temperature: float = 0.05  # cosine similarities are divided by it
    mask_prob: float = 0.2  # question masking, per step
    replace_prob: float = 0.3  # difficulty-based question replacement, per step
    permute_prob: float = 0.3  # fraction of the real steps in the permuted window
    crop_prob: float = 0.3  # fraction of the real steps kept by the crop
    negative_prob: float = 1.0  # response flip probability of the hard negative (0: none)
    hard_negative_weight: float = 1.0  # added to each row's hard-negative similarity

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "d_ff": 32, "final_fc_dim": 16},
        # the authors' configs/example.yaml (cl4kt_config); pyKT has no CL4KT
        "paper": {"d": 64, "n_heads": 8, "n_blocks": 2, "d_ff": 1024, "dropout": 0.2},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d_ff > 0 and self.final_fc_dim > 1, "d_ff and final_fc_dim must be > 0")
        require(self.lambda_cl >= 0, f"lambda_cl must be >= 0, got {self.lambda_cl}")
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        for name in ("mask_prob", "replace_prob", "permute_prob", "negative_prob"):
            v = getattr(self, name)
            require(0 <= v <= 1, f"{name} must be in [0, 1], got {v}")
        require(0 < self.crop_prob <= 1, f"crop_prob must be in (0, 1], got {self.crop_prob}")


def _layer(c: CL4KTConfig) -> MonotonicLayer:
    """AKT's layer with CL4KT's GELU feed-forward swapped in."""
    layer = MonotonicLayer(c.d, c.n_heads, c.d_ff, c.dropout, c.kq_same)
    layer.ffn = nn.Sequential(
        nn.Linear(c.d, c.d_ff), nn.GELU(), Dropout(c.dropout), nn.Linear(c.d_ff, c.d)
    )
    return layer


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each row i against column i (the positive): logits [B, S >= B]."""
    return F.cross_entropy(logits, torch.arange(logits.shape[0], device=logits.device))


def pooled(h: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of h [B, L, D] over the real steps -> [B, D]."""
    w = valid.to(h.dtype).unsqueeze(-1)
    return (h * w).sum(1) / w.sum(1).clamp(min=1)


@register("cl4kt")
class CL4KT(KTModel):
    """Monotonic-attention KT with a contrastive loss over augmented views (training only)."""

    config_cls = CL4KTConfig

    def __init__(self, config: CL4KTConfig):
        super().__init__(config)
        c = config
        self.mask_id = c.num_c  # the masked question's id
        self.question = nn.Embedding(c.num_c + 1, c.d)
        self.interaction = nn.Embedding(2 * (c.num_c + 1), c.d)
        self.q_encoder = nn.ModuleList(_layer(c) for _ in range(c.n_blocks))
        self.i_encoder = nn.ModuleList(_layer(c) for _ in range(c.n_blocks))
        self.retriever = nn.ModuleList(_layer(c) for _ in range(c.n_blocks))
        self.out = mlp_head(2 * c.d, (c.final_fc_dim, c.final_fc_dim // 2), c.dropout, "gelu")
        # replacement tables learned in prepare(); identity until then
        self.register_buffer("easier", torch.arange(c.num_c), persistent=False)
        self.register_buffer("harder", torch.arange(c.num_c), persistent=False)

    # -- state from the training students -------------------------------------------------------

    def prepare(self, train: KTDataset) -> None:
        """Order concepts by their correct rate among the training students: a concept's easier
        neighbour has the next higher rate, its harder one the next lower (itself at the ends;
        concepts never seen map to themselves)."""
        C = self.config.num_c
        right, seen = torch.zeros(C, dtype=torch.float64), torch.zeros(C, dtype=torch.float64)
        for s in train.students:
            q = torch.as_tensor(s.q, dtype=torch.long)
            seen.index_add_(0, q, torch.ones(len(q), dtype=torch.float64))
            right.index_add_(0, q, torch.as_tensor(s.r, dtype=torch.float64))
        known = (seen > 0).nonzero().squeeze(1)
        order = known[(right[known] / seen[known]).argsort(stable=True)]  # hardest first
        easier, harder = torch.arange(C), torch.arange(C)
        if len(order) > 1:
            easier[order[:-1]] = order[1:]
            harder[order[1:]] = order[:-1]
        self.easier.copy_(easier)
        self.harder.copy_(harder)

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"easier": self.easier.cpu(), "harder": self.harder.cpu()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        self.easier.copy_(state["easier"])
        self.harder.copy_(state["harder"])

    # -- the prediction path ----------------------------------------------------------------------

    def _token(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return q + (self.config.num_c + 1) * r  # the mask id has its own pair of tokens

    @staticmethod
    def _masks(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inclusive and strict causal masks over real keys, [B, 1, L, L]."""
        L = valid.shape[1]
        keys = valid[:, None, None, :]
        incl = causal_mask(L, valid.device) & keys
        return incl, causal_mask(L, valid.device, strict=True) & keys

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        r = batch.r.masked_fill(~batch.mask, 0)
        incl, strict = self._masks(batch.mask)
        x0 = self.question(batch.q)  # [B, L, D]
        x, y = x0, self.interaction(self._token(batch.q, r))
        maps: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.q_encoder):
            x, w = layer(x, x, x, incl, return_attention)
            if w is not None:
                maps[f"question{i}"] = w.decayed
        for i, layer in enumerate(self.i_encoder):
            y, w = layer(y, y, y, incl, return_attention)
            if w is not None:
                maps[f"interaction{i}"] = w.decayed
        for i, layer in enumerate(self.retriever):
            x, w = layer(x, x, y, strict, return_attention)  # h_t reads y at steps < t
            if w is not None:
                maps[f"retriever{i}"] = w.decayed
        logits = self.out(torch.cat([x, x0], -1)).squeeze(-1)  # [B, L]
        return ModelOutput(logits=logits, attention=maps if return_attention else None)

    # -- the contrastive term ---------------------------------------------------------------------

    def view(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One augmented view (q, r, valid) of the batch: mask, replace, permute, crop."""
        c, valid = self.config, batch.mask
        r = batch.r.masked_fill(~valid, 0)
        q = mask_tokens(batch.q, valid, c.mask_prob, self.mask_id, c.num_c, generator)
        unmasked = valid & (q != self.mask_id)
        q = replace_by_difficulty(
            q, r, unmasked, c.replace_prob, self.easier, self.harder, generator
        )
        idx = permute_window(valid, c.permute_prob, generator)
        q, r = q.gather(1, idx), r.gather(1, idx)
        idx, valid = crop_window(valid, c.crop_prob, generator)
        return q.gather(1, idx) * valid, r.gather(1, idx) * valid, valid

    def encode_view(
        self, layers: nn.ModuleList, h: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Per-step view states [B, L, D]: the attention sublayers only, as the authors' views
        (apply_pos=False), with the prediction path's causal masks."""
        incl, _ = self._masks(valid)
        for layer in layers:
            a, _ = layer.attn(h, h, h, incl)
            h = layer.ln1(h + layer.drop1(a))
        return h

    def contrastive(self, batch: Batch, generator: torch.Generator | None = None) -> torch.Tensor:
        """The unweighted CL loss: question InfoNCE + interaction InfoNCE (+ hard negatives)."""
        c = self.config
        (q1, r1, v1), (q2, r2, v2) = self.view(batch, generator), self.view(batch, generator)

        def z(layers: nn.ModuleList, emb: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
            return pooled(self.encode_view(layers, emb, valid), valid)  # [B, D]

        def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return F.cosine_similarity(a[:, None], b[None], dim=-1) / c.temperature  # [B, B]

        zq1, zq2 = (
            z(self.q_encoder, self.question(q1), v1),
            z(self.q_encoder, self.question(q2), v2),
        )
        zi1 = z(self.i_encoder, self.interaction(self._token(q1, r1)), v1)
        zi2 = z(self.i_encoder, self.interaction(self._token(q2, r2)), v2)
        sim_i = cos(zi1, zi2)
        if c.negative_prob > 0:
            r = batch.r.masked_fill(~batch.mask, 0)
            neg = flip_responses(r, batch.mask, c.negative_prob, generator)
            zk = z(self.i_encoder, self.interaction(self._token(batch.q, neg)), batch.mask)
            hard = torch.eye(len(zk), device=zk.device, dtype=zk.dtype) * c.hard_negative_weight
            sim_i = torch.cat([sim_i, cos(zi1, zk) + hard], 1)  # [B, 2B]
        return info_nce(cos(zq1, zq2)) + info_nce(sim_i)

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        terms = super().loss(out, batch, epoch)
        c = self.config
        if self.training and torch.is_grad_enabled() and c.lambda_cl > 0:
            terms["cl"] = c.lambda_cl * self.contrastive(batch)
            terms["total"] = terms["total"] + terms["cl"]
        return terms
