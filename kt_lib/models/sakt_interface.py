"""Seed 004's public interface to SAKT: `SAKT(num_questions, ...)` over the registry model's
network (`kt_lib.models.sakt.SAKTNet`), with the seed's validation.

# B batch, L history steps, Lq query steps
`SAKT(...)(q, r, qry) -> [B, Lq, 1]` probabilities with the seed's inclusive mask: queries are
right-aligned to the history, so query i reads interactions up to and including step
s = L - Lq + i (Lq = L is classic SAKT, where qry[i] is the question asked after interaction i;
the seed's example q=[1,2,3], qry=[4] reads all three interactions).

Padding (seed 004 section 9.2: padded positions are excluded from attention):
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

import torch
from torch import nn

from ..data.dataset import interaction_token
from ..seed_warnings import SeedRangeWarning, quiet
from .sakt import SAKTModel, SAKTNet

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
        public.net.query_positions = c.query_positions  # the paper preset's queries carry none
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
