"""DTransformer (Yin et al., WWW 2023, "Tracing Knowledge Instead of Patterns").

# B batch, L steps, D model dim, H heads, Dh head dim, K knowledge slots (n_know)
Embeddings are AKT's Rasch embeddings (kt_lib.nn.embeddings): x_t from (q_t, pid_t), y_t from
(q_t, pid_t, r_t). Four attention blocks, each x = LN(query + Drop(Attn)), with AKT's per-head
distance decay (kt_lib.nn.monotonic; the math in kt_lib.nn.reference):
  Block 1  hq = Attn(x, x, x)          inclusive mask: hq_t reads questions <= t
  Block 2  hs = Attn(y, y, y)          inclusive mask: hs_t reads r_i for i <= t, r_t INCLUDED
  Block 3  p  = Attn(Q=K=hq, V=hs)     inclusive ("peek_cur"): p_t holds r_t
  Block 4  z  = Attn(Q=slot_k, K=hq, V=p)  STRICT past, max-out: z_{t,k} reads p_j for j < t
  readout  h_t = sum_k softmax_k(slot_k . x_t) z_{t,k};  logit_t = MLP([x_t, h_t])
Causal contract, path by path: x_t and hq_t carry questions/problems up to t only; every response
enters through y -> Block 2 -> Block 3, and reaches the prediction only through Block 4, whose
strict mask admits p_j for j < t, and p_j carries responses at steps <= j < t. The distance
decay is computed from the masked weights (visible keys only); the training-time key hiding only
removes keys; LayerNorm works per step. Rows with no visible key (Block 4 at t = 0) output zeros.
A subclass may replace Block 3's last heads through `block3_extra_heads`; they obey the same rule
(their output at step t may use the current student up to t, and is read by Block 4 after t only).
The contrastive loss (off by default) is causal too: see `contrastive_terms`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import require
from ..data.dataset import Batch
from ..nn import causal_mask, mlp_head
from ..nn.dropout import Dropout
from ..nn.embeddings import RaschEmbedding
from ..nn.monotonic import ExtraHeads, MonotonicAttention
from .base import BaseConfig, KTModel, ModelOutput, register

MIN_SEQ_LEN = 5  # DTransformer: shorter rows are left alone by key hiding and augmentation


CL_FIELDS = ("lambda_cl", "cl_temperature", "hard_neg")  # the contrastive loss's own settings


@dataclass
class DTransformerConfig(BaseConfig):
    """DTransformer sizes and options."""

    d: int = 256  # model dim (seed 000: 256 = 8 heads x 32)
    n_heads: int = 8  # attention heads per block (a subclass may replace some of Block 3's)
    n_know: int = 16  # knowledge slots read by Block 4
    d_fc: int = 256  # hidden size of the prediction MLP (then d_fc // 2)
    dropout: float = 0.2  # residual/MLP dropout, also the rate of training-time key hiding
    key_drop: bool = True  # DTransformer's training-time random hiding of past keys
    rasch_l2: float = 1e-3  # L2 weight on problem difficulties (only with problem ids)
    contrastive: bool = False  # add DTransformer's contrastive loss (three forward passes)
    lambda_cl: float = 0.1  # weight of the contrastive loss
    cl_temperature: float = 0.05  # temperature of the contrastive cosine similarities
    hard_neg: bool = True  # contrastive hard negatives: views with flipped past responses
    max_len: int = 200  # longest window accepted

    BINARY = True
    PRESETS = {
        "tiny": {"d": 32, "n_heads": 8, "n_know": 4, "d_fc": 32, "max_len": 64},
        "paper": {"d": 256, "n_heads": 8, "n_know": 16, "d_fc": 256},
    }

    def validate(self) -> None:
        super().validate()
        require(self.n_know >= 1, f"n_know must be >= 1, got {self.n_know}")
        require(self.d_fc >= 2, f"d_fc must be >= 2, got {self.d_fc}")
        require(self.cl_temperature > 0, f"cl_temperature must be > 0, got {self.cl_temperature}")
        # the contrastive loss's settings are read by it alone: set, they would act on nothing
        if not self.contrastive:
            moved = [f"{k}={getattr(self, k)!r}" for k in CL_FIELDS
                     if getattr(self, k) != getattr(DTransformerConfig, k)]  # fmt: skip
            require(not moved, f"{', '.join(moved)}: set for the contrastive loss, which is off "
                               "(contrastive=True turns it on)")  # fmt: skip


def sample_key_drop(valid: torch.Tensor, rate: float) -> torch.Tensor:
    """[B, L] keys to hide from later queries: max(1, int(len * rate)) of the first len - 1 steps
    per row (rows shorter than MIN_SEQ_LEN untouched), drawn from the global RNG."""
    B, L = valid.shape
    lens = valid.sum(1)
    cand = torch.arange(L, device=valid.device).unsqueeze(0) < (lens - 1).unsqueeze(1)
    n = (lens.float() * rate).long().clamp(min=1)
    u = torch.rand(B, L, device=valid.device).masked_fill(~cand, 2.0)
    rank = u.argsort(1).argsort(1)
    return (rank < n.unsqueeze(1)) & cand & (lens >= MIN_SEQ_LEN).unsqueeze(1)


class DTLayer(nn.Module):
    """DTransformer's layer: x = LN(query + Drop(Attn(query, key, value))), no FFN."""

    def __init__(
        self, d: int, n_heads: int, dropout: float, kq_same: bool = True, key_drop: bool = True
    ):
        super().__init__()
        self.attn = MonotonicAttention(d, n_heads, 0.0, kq_same, xavier_init=False)
        self.drop = Dropout(dropout)
        self.ln = nn.LayerNorm(d)
        self.rate = dropout if key_drop else 0.0
        self.strict_slots = True  # Block 4 reads the strict past (False only in audit tests)

    def mask(self, valid: torch.Tensor, peek_cur: bool) -> torch.Tensor:
        """[B|1, 1, L, L]: inclusive or strict causal, minus randomly hidden keys in training."""
        L = valid.shape[1]
        base = causal_mask(L, valid.device, strict=not peek_cur)
        if not (self.training and self.rate > 0):
            return base[None, None]
        hidden = sample_key_drop(valid, self.rate)  # [B, L]
        later = causal_mask(L, valid.device, strict=True)  # query t > key j
        return (base & ~(hidden.unsqueeze(1) & later)).unsqueeze(1)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        valid: torch.Tensor,
        peek_cur: bool,
        need_weights: bool = False,
        extra: ExtraHeads | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self.mask(valid, peek_cur)
        h, w = self.attn(query, key, value, mask, need_weights, extra)
        return self.ln(query + self.drop(h)), (w.decayed if w is not None else None)

    def read_slots(
        self,
        slots: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        valid: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Block 4: strict-past reading by slot queries -> z [B, L, K, D]."""
        keep = torch.ones(1, valid.shape[1], dtype=torch.bool, device=valid.device)
        if self.training and self.rate > 0:
            keep = ~sample_key_drop(valid, self.rate)  # hidden keys vanish for every later query
        p = self.drop.p if self.training else 0.0
        y, w = self.attn.read_slots(slots, key, value, keep, need_weights, self.strict_slots, p)
        return self.ln(y), w


@dataclass
class Encoded:
    """Intermediate tensors of one pass."""

    x: torch.Tensor  # [B, L, D] question embeddings
    z: torch.Tensor  # [B, L, K, D] knowledge read at each step (strict past)
    mu: torch.Tensor | None  # [B, L] problem difficulties (None without pids)
    attention: dict[str, torch.Tensor]


@register("dtransformer")
class DTransformer(KTModel):
    """Four-block DTransformer with knowledge slots and a readout MLP."""

    config_cls = DTransformerConfig

    def __init__(self, config: DTransformerConfig):
        super().__init__(config)
        c = config
        self.embed = RaschEmbedding(c.num_c, c.d, c.num_pid, c.K)
        self.block1 = DTLayer(c.d, c.n_heads, c.dropout, key_drop=c.key_drop)
        self.block2 = DTLayer(c.d, c.n_heads, c.dropout, key_drop=c.key_drop)
        self.block3 = DTLayer(c.d, c.n_heads, c.dropout, key_drop=c.key_drop)
        self.block4 = DTLayer(c.d, c.n_heads, c.dropout, kq_same=False, key_drop=c.key_drop)
        self.know = nn.Parameter(torch.empty(c.n_know, c.d).uniform_(-1.0, 1.0))
        self.out = mlp_head(2 * c.d, (c.d_fc, c.d_fc // 2), c.dropout, "gelu")

    def block3_extra_heads(
        self, batch: Batch, hq: torch.Tensor, hs: torch.Tensor, need_weights: bool
    ) -> tuple[ExtraHeads | None, dict[str, torch.Tensor]]:
        """Outputs that replace Block 3's last heads, and their attention maps by name (none
        here: a subclass computes them from `self.block3.attn.queries(hq)`)."""
        return None, {}

    def _check(self, batch: Batch) -> None:
        if batch.q.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {batch.q.shape[1]} > max_len {self.config.max_len}")

    def interaction_states(self, batch: Batch) -> torch.Tensor:
        """Block 2 states hs [B, L, D] (the interaction states a subclass may encode)."""
        emb = self.embed(batch.q, batch.r, batch.pid)
        return self.block2(emb.y, emb.y, emb.y, batch.mask, peek_cur=True)[0]

    def encode(self, batch: Batch, need_weights: bool = False) -> Encoded:
        """Blocks 1-4 -> knowledge z [B, L, K, D]."""
        emb = self.embed(batch.q, batch.r, batch.pid)
        valid = batch.mask
        hq, w1 = self.block1(emb.x, emb.x, emb.x, valid, True, need_weights)
        hs, w2 = self.block2(emb.y, emb.y, emb.y, valid, True, need_weights)
        extra, extra_maps = self.block3_extra_heads(batch, hq, hs, need_weights)
        p, w3 = self.block3(hq, hq, hs, valid, True, need_weights, extra)
        z, w4 = self.block4.read_slots(self.know, hq, p, valid, need_weights)  # [B, L, K, D]
        attention = {}
        if need_weights:
            attention = {
                "block1": w1,
                "block2": w2,
                "block3": w3,
                "block4": w4.mean(1),
            }  # [B, H, L, S], averaged over slots
            attention.update(extra_maps)
        return Encoded(emb.x, z, emb.mu, attention)

    def readout(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """h_t = sum_k softmax_k(slot_k . x_t) z_{t,k} -> [B, L, D]."""
        alpha = torch.softmax(x @ self.know.T, dim=-1)  # [B, L, K]
        return (alpha.unsqueeze(-2) @ z).squeeze(-2)  # no [B, L, K, D] product

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        self._check(batch)
        enc = self.encode(batch, return_attention)
        h = self.readout(enc.z, enc.x)
        logits = self.out(torch.cat([enc.x, h], dim=-1)).squeeze(-1)
        losses = {}
        penalty = RaschEmbedding.l2_penalty(enc.mu, batch.mask, self.config.rasch_l2)
        if penalty is not None:
            losses["rasch_l2"] = penalty
        extras = {}
        if self.config.contrastive and self.training:
            extras["z"] = enc.z
        return ModelOutput(logits, losses, enc.attention if return_attention else None, extras)

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        terms = super().loss(out, batch, epoch)
        if self.config.contrastive and self.training and "z" in out.extras:
            ce, keep = self.contrastive_terms(batch, out.extras["z"])
            if keep.any():
                terms["cl"] = self.config.lambda_cl * ce[keep].mean()
                terms["total"] = terms["total"] + terms["cl"]
        return terms

    def _knowledge(self, batch: Batch) -> torch.Tensor:
        """z of an augmented view for the contrastive loss. In training it is recomputed in the
        backward pass (activation checkpointing, RNG state replayed) instead of keeping a second
        and third encoder's activations: the contrastive step then fits in about 2 GiB less."""
        if not (self.training and torch.is_grad_enabled()):
            return self.encode(batch).z
        return checkpoint(lambda b: self.encode(b).z, batch, use_reentrant=False)

    def contrastive_terms(
        self, batch: Batch, z: torch.Tensor | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-(row, step) contrastive loss [B, T] and the steps that count [B, T].

        DTransformer's contrast: the knowledge of row b at step t should match its augmented
        view (adjacent steps swapped) and differ from other rows and from a hard negative (some
        responses flipped). Made causal: a swap of steps (i, i+1) puts step i+1 into the view's
        past at step i+1, so that (row, step) is dropped as an anchor and masked out as a
        negative; flips only reach later steps (strict past). Every term at step t then depends
        on steps < t only, and augmentations depend on lengths only.
        """
        valid = batch.mask
        lens = valid.sum(1)
        T = int(lens.min())
        B = len(lens)
        if T < MIN_SEQ_LEN or B < 2:
            empty = torch.zeros(B, max(T, 0), device=valid.device)
            return empty, empty.bool()
        rate = max(self.config.dropout, 1e-3)
        if z is None:
            z = self.encode(batch).z
        perm, hit = _adjacent_swaps(lens, valid.shape[1], rate, generator)
        view = _gather_steps(batch, perm)
        z_view = self._knowledge(view)
        anchors = F.normalize(z[:, :T].mean(-2), dim=-1)  # [B, T, D]
        cands = [F.normalize(z_view[:, :T].mean(-2), dim=-1)]
        blocked = [hit[:, :T]]
        if self.config.hard_neg:
            flipped = batch.clone()
            flip = _pick_steps(lens, valid.shape[1], rate, generator)
            flipped.r = torch.where(flip, 1 - batch.r, batch.r)
            cands.append(F.normalize(self._knowledge(flipped)[:, :T].mean(-2), dim=-1))
            blocked.append(torch.zeros_like(hit[:, :T]))
        sim = torch.cat([torch.einsum("btd,ctd->bct", anchors, c) for c in cands], dim=1)
        sim = sim / self.config.cl_temperature  # [B, B or 2B, T]
        blocked = torch.cat(blocked, dim=0).unsqueeze(0).expand(B, -1, -1).clone()
        blocked[torch.arange(B), torch.arange(B)] = False  # the positive stays (masked below)
        sim = sim.masked_fill(blocked, torch.finfo(sim.dtype).min)
        target = torch.arange(B, device=valid.device).unsqueeze(1).expand(B, T)
        ce = F.cross_entropy(sim, target, reduction="none")  # [B, T]
        return ce, ~hit[:, :T]


def _pick_steps(lens: torch.Tensor, L: int, rate: float, generator, upto: int = 0) -> torch.Tensor:
    """[B, L] max(1, int(len * rate)) distinct random steps < len - upto per row."""
    B = len(lens)
    cand = torch.arange(L, device=lens.device).unsqueeze(0) < (lens - upto).unsqueeze(1)
    u = torch.rand(B, L, generator=generator).to(lens.device).masked_fill(~cand, 2.0)
    rank = u.argsort(1).argsort(1)
    n = (lens.float() * rate).long().clamp(min=1)
    return (rank < n.unsqueeze(1)) & cand


def _adjacent_swaps(
    lens: torch.Tensor, L: int, rate: float, generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping adjacent swaps (i, i+1), i of one random parity per row.

    Returns the gather index perm [B, L] and `hit` [B, L]: steps i+1 whose view past contains
    the original step i+1.
    """
    B = len(lens)
    steps = torch.arange(L, device=lens.device).unsqueeze(0).expand(B, L)
    parity = torch.randint(0, 2, (B, 1), generator=generator).to(lens.device)
    chosen = _pick_steps(lens, L, rate, generator, upto=1) & (steps % 2 == parity)
    perm = steps.clone()
    i = chosen.nonzero(as_tuple=True)
    perm[i[0], i[1]] = i[1] + 1
    perm[i[0], i[1] + 1] = i[1]
    hit = torch.zeros_like(chosen)
    hit[i[0], i[1] + 1] = True
    return perm, hit


def _gather_steps(batch: Batch, perm: torch.Tensor) -> Batch:
    view = batch.clone()
    view.q, view.r = batch.q.gather(1, perm), batch.r.gather(1, perm)
    if batch.pid is not None:
        view.pid = batch.pid.gather(1, perm)
    return view
