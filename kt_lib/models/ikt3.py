"""iKT3 (seeds 001/003): dual-stream encoder, performance head and an IRT mastery head aligned to a
pluggable reference model (Rasch by default) under a lambda warm-up.

# B batch, L steps, D model dim, H heads, C skills
Causal contract: both streams are shifted right by one step (a learned start token sits at t = 0),
so position t of the encoder holds interaction t-1 and an inclusive causal mask lets h_t, v_t read
interactions 0..t-1 only; residual paths never carry (q_t, r_t). Only the skill embedding of the
queried q_t joins at the heads. No row is ever empty, so no NaN at t = 0.

Heads:
- performance: MLP(Linear-ReLU-Dropout-Linear) on [h_t, v_t, skill_emb(q_t)] -> logits [B, L]
- IRT mastery: theta_t = MLP(h_t), beta = one learned scalar per skill,
  M_IRT = sigmoid(theta_t - beta[q_t]); theta, beta and M_IRT go to `extras`.
  By default beta_c = Linear(skill_emb_c) (the diagram feeds the skill embedding to head 2): still
  one scalar per skill, but shared with head 1 and it moves at a useful pace under Adam, where a
  free [C, 1] table moves ~lr per step and needs thousands of steps to spread (beta_from="table").

Loss (seed, exactly): L = (1 - lam) l_bce + c l_22 + lam (l_21 + l_23), where
  l_21 = BCE(M_IRT, M_ref), l_22 = MSE(beta[q], beta_IRT[q]),
  l_23 = MSE(mean_t theta_t, theta_IRT[uid]),
  and lam(epoch) = lambda_target * min(1, epoch / warmup). Means run over valid positions; rows of
  students the reference has not seen add nothing to l_23.

Pluggable reference (kt_lib.reference_models): each alignment term reads named targets
(`ALIGN`), and a reference declares the names it `provides`. The mastery target is required
(checked when the config is validated); a term whose targets the reference lacks is 0. With
"irt" every term is on; with "bkt" l_21 aligns M_IRT to BKT's causal P(mastered) of the skill
asked at t, and l_22/l_23 are 0 (BKT has no difficulty or ability scale), so theta and beta keep
a shared free location: only theta_t - beta[q_t] is anchored.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, BatchLoader, KTDataset, interaction_token
from ..nn import Dropout, TransformerLayer, causal_mask, mlp_head
from ..reference_models import REFERENCES, build_reference, references_providing
from .base import BaseConfig, KTModel, ModelOutput, register

# alignment term -> the reference targets it reads; a reference without them contributes 0
ALIGN = {"l_21": ("mastery",), "l_22": ("beta",), "l_23": ("theta_student", "seen")}
REQUIRED = ALIGN["l_21"]  # the mastery head has nothing to align to without these


@dataclass
class IKT3Config(BaseConfig):
    """iKT3 sizes and loss schedule (seed defaults for the loss)."""

    d: int = 64  # model dim of both streams and the skill embedding
    n_heads: int = 4  # attention heads per stream
    n_blocks: int = 2  # transformer blocks per stream (design documents: 8, the `design` preset)
    d_ff: int | None = None  # FFN inner dim; None -> 4 * d
    d_head: int | None = None  # hidden width of the two MLP heads; None -> d
    dropout: float = 0.1  # dropout in blocks and heads
    max_len: int = 200  # longest window (learned positions)
    value_input: str = "response"  # value stream tokens: "response" (seed: emb(r)) or "interaction"
    beta_from: str = "skill_emb"  # beta_c: "skill_emb" (Linear of the skill embedding) or "table"
    lambda_target: float = 0.5  # final interpretability weight lambda
    warmup: int = 50  # epochs over which lambda grows linearly from 0 to lambda_target
    c: float = 0.01  # weight of the always-on difficulty regulariser l_22
    reference: str = "irt"  # registered reference model (kt_lib.reference_models.REFERENCES)
    reference_options: dict = field(default_factory=dict)  # keyword arguments of the reference

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "n_heads": 2, "n_blocks": 1, "max_len": 64},
        # the size the workbook reports: the default sizes (d=64, 4 heads, 2 blocks; 0.25 M
        # parameters on ASSIST2009's 110 skills), the best measured under fit's shared optimiser
        # (AdamW lr 1e-3). ASSIST2009 fold 1, 15-epoch cap, CPU: test AUC 0.8071 here, 0.8049 at
        # d=128 / 8 heads (0.93 M), 0.7631 at the design documents' size (`design`)
        "paper": {"max_len": 200},
        # the design documents' size: N=8 blocks per stream, d=256, 8 heads (13.0 M parameters
        # on ASSIST2009). At fit's lr 1e-3 one AdamW step moves its logits 7.6x as far as
        # `paper`'s and it trains badly (ASSIST2009 fold 1: 0.7631); it wants lr 1e-4
        "design": {"d": 256, "n_heads": 8, "n_blocks": 8, "max_len": 200},
    }

    def validate(self) -> None:
        super().validate()
        require(
            self.value_input in ("response", "interaction"),
            f"value_input must be 'response' or 'interaction', got {self.value_input!r}",
        )
        require(
            self.beta_from in ("skill_emb", "table"),
            f"beta_from must be 'skill_emb' or 'table', got {self.beta_from!r}",
        )
        require(
            0 <= self.lambda_target <= 1,
            f"lambda_target must be in [0, 1], got {self.lambda_target}",
        )
        require(self.warmup >= 0, f"warmup must be >= 0, got {self.warmup}")
        require(self.c >= 0, f"c must be >= 0, got {self.c}")
        usable = references_providing(*REQUIRED)
        require(
            self.reference in REFERENCES,
            f"unknown reference {self.reference!r}; valid: {usable}",
        )
        accepted = reference_parameters(self.reference)
        unknown = sorted(set(self.reference_options) - accepted)
        require(
            not unknown,
            f"reference_options {unknown} are not options of reference {self.reference!r}; "
            f"it takes {sorted(accepted) or 'none'}",
        )
        require(
            set(REQUIRED) <= REFERENCES[self.reference].provides,
            f"reference {self.reference!r} gives no {'/'.join(REQUIRED)} target for the "
            f"mastery head; references that do: {usable}",
        )


def reference_parameters(name: str) -> set[str]:
    """The keyword options reference `name`'s constructor takes (`reference_options`)."""
    params = list(inspect.signature(REFERENCES[name].__init__).parameters.values())[1:]
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def lambda_schedule(epoch: int, lambda_target: float, warmup: int) -> float:
    """lambda(epoch) = lambda_target * min(1, epoch / warmup); warmup 0 means no warm-up."""
    if warmup <= 0:
        return float(lambda_target)
    return float(lambda_target) * min(1.0, epoch / warmup)


class Stream(nn.Module):
    """One encoder stream: N post-norm blocks (own MHA + FFN each) under an inclusive mask."""

    def __init__(self, d: int, n_heads: int, d_ff: int, n_blocks: int, dropout: float):
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerLayer(d, n_heads, d_ff, dropout) for _ in range(n_blocks)
        )

    def forward(
        self, x: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        mask = causal_mask(x.shape[1], x.device)  # [L, L]; inputs are already shifted
        maps = []
        for blk in self.blocks:
            x, w = blk(x, x, x, mask, need_weights)
            maps.append(w)
        return x, maps


def mlp(d_in: int, d_hidden: int, dropout: float) -> nn.Sequential:
    """Linear-ReLU-Dropout-Linear to one output."""
    return mlp_head(d_in, (d_hidden,), dropout, "relu_unfused")


@register("ikt3")
class IKT3(KTModel):
    """Dual-stream iKT3 with an IRT mastery head aligned to a reference model."""

    config_cls = IKT3Config
    attention_key_shift = 1  # key j of the attention maps holds interaction j - 1 (start token)

    def __init__(self, config: IKT3Config):
        super().__init__(config)
        c = config
        d_ff, d_head = c.d_ff or 4 * c.d, c.d_head or c.d
        self.ctx_emb = nn.Embedding(2 * c.num_c, c.d)  # interaction tokens q + C r
        n_val = 2 * c.num_c if c.value_input == "interaction" else 2
        self.val_emb = nn.Embedding(n_val, c.d)
        self.start = nn.Parameter(torch.zeros(2, c.d))  # start tokens of the context/value streams
        self.pos = nn.Embedding(c.max_len, c.d)
        self.skill_emb = nn.Embedding(c.num_c, c.d)
        self.drop = Dropout(c.dropout)
        self.context = Stream(c.d, c.n_heads, d_ff, c.n_blocks, c.dropout)
        self.value = Stream(c.d, c.n_heads, d_ff, c.n_blocks, c.dropout)
        self.perf_head = mlp(3 * c.d, d_head, c.dropout)
        self.theta_head = mlp(c.d, d_head, c.dropout)
        if c.beta_from == "table":
            self.beta_table = nn.Embedding(c.num_c, 1)
            nn.init.zeros_(self.beta_table.weight)
        else:
            self.beta_proj = nn.Linear(c.d, 1)
        nn.init.normal_(self.start, std=0.02)
        self.reference = build_reference(c.reference, **c.reference_options)

    def skill_beta(self) -> torch.Tensor:
        """Learned difficulty of every skill [C] (one scalar per skill)."""
        if self.config.beta_from == "table":
            return self.beta_table.weight[:, 0]
        return self.beta_proj(self.skill_emb.weight).squeeze(-1)

    def _shift(self, x: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> [B, L, D] with the start token at t = 0 and x_{t-1} at t."""
        return torch.cat([start.expand(x.shape[0], 1, -1), x[:, :-1]], dim=1)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        c = self.config
        B, L = batch.q.shape
        if L > c.max_len:
            raise ValueError(f"sequence length {L} > max_len {c.max_len}")
        q, r = batch.q, batch.r
        tok = interaction_token(q, r, c.num_c)
        pos = self.pos(torch.arange(L, device=q.device))  # [L, D]
        ctx = self._shift(self.ctx_emb(tok), self.start[0]) + pos
        val = (
            self._shift(self.val_emb(tok if c.value_input == "interaction" else r), self.start[1])
            + pos
        )
        h, maps_h = self.context(self.drop(ctx), return_attention)  # [B, L, D] knowledge state
        v, maps_v = self.value(self.drop(val), return_attention)  # [B, L, D] value state
        s = self.skill_emb(q)  # [B, L, D] queried skill
        logits = self.perf_head(torch.cat([h, v, s], dim=-1)).squeeze(-1)  # [B, L]
        theta = self.theta_head(h).squeeze(-1)  # [B, L] ability after interactions < t
        skill_beta = self.skill_beta()  # [C]
        beta = skill_beta[q]  # [B, L]
        attention = None
        if return_attention:
            attention = {f"context{i}": w for i, w in enumerate(maps_h)}
            attention.update({f"value{i}": w for i, w in enumerate(maps_v)})
        extras = {
            "theta": theta,
            "beta": beta,
            "mastery_logit": theta - beta,
            "mastery": torch.sigmoid(theta - beta),
            "skill_beta": skill_beta,
        }
        return ModelOutput(logits=logits, attention=attention, extras=extras)

    # -- training -----------------------------------------------------------------------------

    def prepare(self, train: KTDataset) -> None:
        """Fit the reference model on the training students."""
        self.reference.fit(train)

    def lam(self, epoch: int) -> float:
        return lambda_schedule(epoch, self.config.lambda_target, self.config.warmup)

    def schedule_notes(self, epochs: int) -> list[str]:
        """The lambda warm-up (seed: 50 epochs) is longer than a run of `epochs` epochs: lambda
        never reaches lambda_target there (and early stopping may end it sooner)."""
        c = self.config
        if c.warmup <= 0 or c.lambda_target <= 0 or epochs - 1 >= c.warmup:
            return []
        top = lambda_schedule(epochs - 1, c.lambda_target, c.warmup)
        return [
            f"ikt3: lambda warms up over {c.warmup} epochs, but this run has at most {epochs}: "
            f"lambda reaches {top:.3g}, not lambda_target {c.lambda_target:g} (set warmup <= "
            f"{epochs - 1}, or train longer)"
        ]

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        """Seed loss with every term (and lambda) returned so `fit` logs them per epoch."""
        if not self.reference.fitted:
            raise RuntimeError("iKT3 needs its reference: call model.prepare(train) (fit does)")
        m = batch.mask
        ref = self.reference.targets(batch)
        x = out.extras
        zero = x["theta"].new_zeros(())  # a term the reference cannot inform
        l_bce = F.binary_cross_entropy_with_logits(out.logits[m], batch.r[m].float())
        l_21 = F.binary_cross_entropy_with_logits(
            x["mastery_logit"][m], ref["mastery"][m].to(out.logits.dtype)
        )
        l_22 = l_23 = zero
        if "beta" in ref:
            l_22 = F.mse_loss(x["beta"][m], ref["beta"][m].to(out.logits.dtype))
        if all(k in ref for k in ALIGN["l_23"]):
            mf = m.to(x["theta"].dtype)
            mean_theta = (x["theta"] * mf).sum(1) / mf.sum(1).clamp(min=1)  # [B]
            keep = ref["seen"] & m.any(1)
            if keep.any():
                l_23 = F.mse_loss(mean_theta[keep], ref["theta_student"][keep].to(mean_theta.dtype))
        lam = self.lam(epoch)
        total = (1 - lam) * l_bce + self.config.c * l_22 + lam * (l_21 + l_23)
        return {
            "total": total,
            "bce": l_bce,
            "l_21": l_21,
            "l_22": l_22,
            "l_23": l_23,
            "lambda": torch.tensor(lam, device=l_bce.device),
        }

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {f"reference.{k}": v for k, v in self.reference.state_dict().items()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        prefix = "reference."
        own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if own:
            self.reference.load_state_dict(own)


@torch.no_grad()
def ikt3_traces(
    model: IKT3,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """One row per valid step: uid, step, skill, r, p (P correct), theta, beta, mastery (M_IRT),
    and the reference's beta_ref, theta_ref (ability from the strict past) and m_ref (NaN where
    the reference has no such target, e.g. beta/theta of BKT)."""
    was_training = model.training
    model.eval()
    max_len = max_len or model.config.max_len
    cols: dict[str, list] = {
        k: []
        for k in (
            "uid",
            "step",
            "skill",
            "r",
            "p",
            "theta",
            "beta",
            "mastery",
            "beta_ref",
            "theta_ref",
            "m_ref",
        )
    }
    for batch in BatchLoader(data, batch_size, max_len):
        batch = batch.to(device)
        out = model(batch)
        m = batch.mask
        ref = model.reference.targets(batch) if model.reference.fitted else None
        pos = batch.start.unsqueeze(1) + torch.arange(m.shape[1], device=m.device)
        vals = {
            "uid": batch.uid.unsqueeze(1).expand_as(m),
            "step": pos,
            "skill": batch.q,
            "r": batch.r,
            "p": torch.sigmoid(out.logits),
            "theta": out.extras["theta"],
            "beta": out.extras["beta"],
            "mastery": out.extras["mastery"],
        }
        nan = torch.full_like(out.logits, float("nan"))
        ref = ref or {}
        vals["beta_ref"] = ref.get("beta", nan)
        vals["theta_ref"] = ref.get("theta_prefix", nan)
        vals["m_ref"] = ref.get("mastery", nan)
        for k, v in vals.items():
            cols[k].append(v[m].cpu().numpy())
    model.train(was_training)
    return pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})


def student_abilities(traces: pd.DataFrame) -> pd.DataFrame:
    """Per student: mean theta over its steps (the quantity l_23 aligns), steps, mean response."""
    g = traces.groupby("uid")
    return pd.DataFrame(
        {
            "mean_theta": g["theta"].mean(),
            "final_theta": g["theta"].last(),
            "steps": g.size(),
            "mean_r": g["r"].mean(),
        }
    ).reset_index()
