"""iDKT (seeds 001/003): AKT plus interpretable heads for initial mastery L0 and learning rate T.

# B batch, L steps, D model dim, C skills
iDKT *is* AKT (a subclass: same modules, same names, so an AKT state dict loads into it) with
two extra sigmoid MLPs on [retrieved state h_t, question embedding x_t]:
    L0_t = sigmoid(MLP_L0([h_t, x_t]))    T_t = sigmoid(MLP_T([h_t, x_t]))
aligned to a BKT reference fitted on the training students (`prepare`):
    loss = BCE + Rasch L2 + lambda_ref MSE(p, p_BKT) + lambda_L0 MSE(L0, L0_BKT[q_t])
           + lambda_T MSE(T, T_BKT[q_t])          (means over valid positions)
p_BKT is BKT's causal prediction (responses before t only), so the alignment keeps the causal
contract. The heads never feed the logits: with every lambda at 0 the logits equal AKT's.

Presets: `paper` is the AKT paper's size (N=1 encoder block, 2 retriever layers, d=256, 8 heads;
the README's iDKT row); `design` is the design documents' size (seeds 001/003), N=4 encoder blocks,
2N=8 retriever layers, d_model=256, H=8 heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..config import require
from ..data.dataset import Batch, BatchLoader, KTDataset
from ..nn.blocks import mlp_head
from ..reference_models.bkt import BKTReference
from .akt import AKT, AKTConfig
from .base import ModelOutput, register

ALIGN = {"ref": "p", "L0": "L0", "T": "T"}  # lambda suffix -> head / reference target name


@dataclass
class IDKTConfig(AKTConfig):
    """AKT sizes plus the interpretable heads and their alignment weights."""

    head_dim: int = 256  # hidden units of the L0 and T heads
    lambda_ref: float = 0.1  # weight of MSE(p, p_BKT)
    lambda_L0: float = 0.1  # weight of MSE(L0 head, L0_BKT of the skill)
    lambda_T: float = 0.1  # weight of MSE(T head, T_BKT of the skill)
    bkt_max_iter: int = 200  # EM iterations of the BKT reference (at most)
    bkt_max_guess: float = 0.5  # upper bound on BKT guess (identifiability)
    bkt_max_slip: float = 0.5  # upper bound on BKT slip

    def validate(self) -> None:
        super().validate()
        require(self.head_dim > 0, f"head_dim must be > 0, got {self.head_dim}")
        for name in ("lambda_ref", "lambda_L0", "lambda_T"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require(self.bkt_max_iter >= 1, f"bkt_max_iter must be >= 1, got {self.bkt_max_iter}")
        require(
            0 < self.bkt_max_guess <= 0.5 and 0 < self.bkt_max_slip <= 0.5,
            "bkt_max_guess and bkt_max_slip must be in (0, 0.5]",
        )

    PRESETS = {
        **AKTConfig.PRESETS,
        "tiny": {**AKTConfig.PRESETS["tiny"], "head_dim": 16},
        # the design documents' size: N=4 encoder blocks (8 retriever layers), d=256, 8 heads
        "design": {"d": 256, "n_heads": 8, "n_blocks": 4, "d_ff": 1024},
    }


@register("idkt")
class IDKT(AKT):
    """AKT + L0/T heads aligned to a BKT reference (see the module docstring)."""

    config_cls = IDKTConfig

    def __init__(self, config: IDKTConfig):
        super().__init__(config)
        c = config
        self.l0_head = mlp_head(2 * c.d, (c.head_dim,), c.dropout)
        self.t_head = mlp_head(2 * c.d, (c.head_dim,), c.dropout)
        self.reference = BKTReference(
            max_iter=c.bkt_max_iter, max_guess=c.bkt_max_guess, max_slip=c.bkt_max_slip
        )

    def prepare(self, train: KTDataset) -> None:
        """Fit the BKT reference on the training students (only them)."""
        self.reference.fit(train)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        state = self.trunk(batch, return_attention)
        logits = self.predict_logits(state).float()  # first: dropout draws match AKT's
        z = torch.cat([state.h, state.emb.x], dim=-1)  # [B, L, 2D]
        l0, t = self.l0_head(z).float(), self.t_head(z).float()
        extras = {
            "p": torch.sigmoid(logits),
            "L0": torch.sigmoid(l0).squeeze(-1),
            "T": torch.sigmoid(t).squeeze(-1),
        }
        return ModelOutput(
            logits=logits,
            losses=self.base_losses(state, batch),
            attention=state.attention if return_attention else None,
            extras=extras,
        )

    def alignment(self, out: ModelOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """Unweighted MSEs to the BKT reference over valid positions: align_ref, align_L0, ..."""
        if not self.reference.fitted:
            raise RuntimeError(
                "iDKT's BKT reference is not fitted: call model.prepare(train) "
                "(train.fit does) or load a checkpoint"
            )
        ref = self.reference.targets(batch)
        m = batch.mask
        return {
            f"align_{k}": (out.extras[name][m] - ref[name][m]).pow(2).mean()
            for k, name in ALIGN.items()
        }

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        terms = super().loss(out, batch, epoch)
        weights = {k: getattr(self.config, f"lambda_{k}") for k in ALIGN}
        if any(w > 0 for w in weights.values()):
            for key, value in self.alignment(out, batch).items():
                w = weights[key.removeprefix("align_")]
                if w > 0:
                    terms[key] = w * value
                    terms["total"] = terms["total"] + terms[key]
        return terms

    def extra_state(self) -> dict[str, torch.Tensor]:
        if not self.reference.fitted:
            return {}
        return {f"bkt.{k}": v for k, v in self.reference.state_dict().items()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        bkt = {k.removeprefix("bkt."): v for k, v in state.items() if k.startswith("bkt.")}
        if bkt:
            self.reference.load_state_dict(bkt)

    def diagnostics(self, data: KTDataset, **ev) -> dict[str, float]:
        """Pearson r of each head with its BKT target: per position (`r_L0`, `r_T`, `r_p`) and
        between per-skill means (`r_L0_skill`, `r_T_skill`), on `data`."""
        df = self.interpretable_params(data, **ev)
        out = {f"r_{k}": float(np.corrcoef(df[k], df[f"{k}_bkt"])[0, 1]) for k in ("L0", "T", "p")}
        per_skill = df.groupby("skill")[["L0", "L0_bkt", "T", "T_bkt"]].mean()
        for k in ("L0", "T"):
            out[f"r_{k}_skill"] = float(np.corrcoef(per_skill[k], per_skill[f"{k}_bkt"])[0, 1])
        return out

    @torch.no_grad()
    def interpretable_params(
        self, data: KTDataset, batch_size: int = 128, max_len: int = 200, device: str = "cpu"
    ) -> pd.DataFrame:
        """One row per valid position: heads (L0, T, p) beside BKT's (L0_bkt, T_bkt, p_bkt)."""
        was_training = self.training
        self.eval()
        cols: dict[str, list[np.ndarray]] = {}
        for batch in BatchLoader(data, batch_size, max_len, shuffle=False):
            out = self(batch.to(device))
            ref = self.reference.targets(batch)
            m = batch.mask
            pos = batch.start.unsqueeze(1) + torch.arange(m.shape[1])
            found = {
                "uid": batch.uid.unsqueeze(1).expand_as(m)[m],
                "step": pos[m],
                "skill": batch.q[m],
                "r": batch.r[m],
                **{k: out.extras[k].cpu()[m] for k in ("L0", "T", "p")},
                **{f"{k}_bkt": ref[k][m] for k in ("L0", "T", "p", "mastery")},
            }
            for k, v in found.items():
                cols.setdefault(k, []).append(v.numpy())
        self.train(was_training)
        return pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})
