"""IEKT (Long, Liu, Li, Zhang, Zhang & Yu, SIGIR 2021): "Tracing Knowledge State with Individual
Cognition and Acquisition Estimation".

# B batch, L steps, D hidden dim, Nc cognition levels, Na acquisition levels
    v_t = [C[q_t], Q[pid_t]]                                   question             [B, L, 2D]
    CE:   pi^c_t = softmax(f_c([v_t, h_{t-1}])),  m_t = M_c[a_t],  a_t ~ pi^c_t   cognition
          logit_t = f_y([h_{t-1}, v_t, m_t])                   (h_{-1} = 0)
    KASE: u = [h_{t-1}, v_t],  y_t = [logit_t > 0]             the model's own answer
          pi^a_t = softmax(f_a([u r_t, u (1 - r_t), u y_t, u (1 - y_t)])),  s_t = M_a[e_t],
          e_t ~ pi^a_t                                         acquisition sensitivity
    h_t = GRU([v_t, s_t] if r_t = 1 else [s_t, v_t], h_{t-1})
    reward_t = [y_t = r_t] / n (n: the row's valid steps),  G_t = sum_{k >= t} gamma^(k-t) reward_k
    pg = lambda * sum_{b, t} -(log pi^c_t(a_t) + log pi^a_t(e_t)) G_t / (valid steps)  (training)
f_c, f_a, f_y are MLPs; M_c [Nc, 2D] and M_a [Na, 2D] are learned level embeddings. Training
samples both actions (the policies are trained by REINFORCE, the rest by BCE + pg through
log pi); evaluation is deterministic: `eval_action="mode"` takes the most probable level,
`"mean"` the policies' expected level embedding (sum_a pi_a M[a]).
Step t reads pid_t and q_t and, through h_{t-1}, (pid, q, r) at steps < t; r_t enters only the
acquisition step, after the prediction.
Deviations from pyKT's `iekt` (the authors' code):
- deterministic evaluation; pyKT samples both actions in eval too, so its predictions are random.
- no unused parameters: pyKT builds a problem table, a concept table and a linear layer it never
  reads (78,656 parameters at the paper preset).
- the GRU is torch's GRUCell: pyKT's hand-written cell has the same gates (torch initialises).
- n counts a row's valid steps; pyKT counts its nonzero question ids + 1 (problem 0 is missed).
- the MLPs drop out after each hidden layer (pyKT once, before the output: the same at 1 layer).
- actions by the inverse CDF of one uniform draw per step and policy, drawn before the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require
from ..data.dataset import Batch, KTDataset
from ..nn import mlp_head
from .base import BaseConfig, KTModel, ModelOutput, register

EVAL_ACTIONS = ("mode", "mean")


@dataclass
class IEKTConfig(BaseConfig):
    """IEKT sizes and the policy-gradient objective."""

    d: int = 64  # hidden state size; question vectors and level embeddings are 2d (emb_size)
    mlp_layers: int = 1  # hidden layers (width = input width) of f_c, f_a, f_y (pyKT: n_layer)
    cog_levels: int = 10  # Nc: cognition levels (the action space of f_c)
    acq_levels: int = 10  # Na: acquisition sensitivity levels (the action space of f_a)
    dropout: float = 0.0  # in the three MLPs
    gamma: float = 0.93  # discount of the returns G_t
    pg_weight: float = 40.0  # lambda: the policy-gradient term's weight (pyKT: lamb)
    eval_action: str = "mode"  # evaluation: "mode" (most probable level) or "mean" (expected)

    BINARY = True
    PRESETS = {
        "tiny": {"d": 8, "cog_levels": 4, "acq_levels": 3},
        # pyKT's examples/wandb_iekt_train.py defaults (kt_config.json has no iekt entry):
        # emb_size 64, n_layer 1, 10 and 10 levels, dropout 0, gamma 0.93, lamb 40
        "paper": {"d": 64, "mlp_layers": 1, "cog_levels": 10, "acq_levels": 10},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d > 0, f"d must be > 0, got {self.d}")
        require(self.mlp_layers >= 0, f"mlp_layers must be >= 0, got {self.mlp_layers}")
        require(
            self.mlp_layers >= 1 or self.dropout == 0,
            "dropout acts after the MLPs' hidden layers: with mlp_layers 0 it must be 0",
        )
        for name in ("cog_levels", "acq_levels"):
            n = getattr(self, name)
            require(n >= 2, f"{name} must be >= 2 (an action space), got {n}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(self.pg_weight >= 0, f"pg_weight must be >= 0, got {self.pg_weight}")
        require(
            self.eval_action in EVAL_ACTIONS,
            f"eval_action must be one of {EVAL_ACTIONS}, got {self.eval_action!r}",
        )


def discounted_returns(reward: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = reward_t + gamma * G_{next valid step}, 0 after the last: [B, L] -> [B, L] (padded
    steps carry the next valid step's return and are never scored)."""
    g = torch.zeros_like(reward[:, 0])
    out = []
    for t in range(reward.shape[1] - 1, -1, -1):
        g = torch.where(mask[:, t], reward[:, t] + gamma * g, g)
        out.append(g)
    return torch.stack(out[::-1], 1)


def act(
    logits: torch.Tensor, levels: torch.Tensor, u: torch.Tensor | None, how: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A policy's level embedding [B, 2D] from its logits [B, N] over `levels` [N, 2D], with
    log pi(chosen) [B] when sampling: the inverse CDF at the uniform draws u [B]; without u,
    the most probable level ("mode") or the expected embedding ("mean")."""
    if u is not None:
        p = torch.softmax(logits.detach(), -1)
        a = (p.cumsum(-1) < u.unsqueeze(-1)).sum(-1).clamp(max=len(levels) - 1)  # [B]
        return levels[a], F.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
    if how == "mean":
        return torch.softmax(logits, -1).to(levels.dtype) @ levels, None
    return levels[logits.argmax(-1)], None


@register("iekt")
class IEKT(KTModel):
    """GRU knowledge state with sampled cognition and acquisition levels, trained by REINFORCE."""

    config_cls = IEKTConfig
    attends = False  # a recurrence, no attention weights
    needs = frozenset({"pid"})

    def __init__(self, config: IEKTConfig):
        super().__init__(config)
        c = config
        d = c.d

        def mlp(d_in: int, d_out: int) -> nn.Module:
            return mlp_head(d_in, (d_in,) * c.mlp_layers, c.dropout, d_out=d_out)

        self.skill = nn.Embedding(c.num_c, d)  # C
        self.problem = nn.Embedding(c.num_pid, d)  # Q
        self.cognition = nn.Parameter(torch.randn(c.cog_levels, 2 * d))  # M_c
        self.acquisition = nn.Parameter(torch.randn(c.acq_levels, 2 * d))  # M_a
        self.cog_policy = mlp(3 * d, c.cog_levels)  # f_c on [v, h]
        self.acq_policy = mlp(12 * d, c.acq_levels)  # f_a on the four gated copies of [h, v]
        self.predictor = mlp(5 * d, 1)  # f_y on [h, v, m]
        self.gru = nn.GRUCell(4 * d, d)

    def prepare(self, train: KTDataset) -> None:
        """Warn where a multi-skill problem was expanded into rows (docs/baselines.md)."""
        train.warn_problem_copies(
            "iekt",
            "IEKT reads each row's skill and learns from the copies' responses; pyKT's reads a "
            "question once, averaging its skills",
        )

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        c = self.config
        m = batch.mask
        v = torch.cat([self.skill(batch.q), self.problem(batch.pid)], -1)  # [B, L, 2D]
        B, L = batch.q.shape
        sample = self.training
        # the policies' uniform draws for every step, in one call: [2, L, B]
        u = torch.rand(2, L, B, device=v.device) if sample else None
        r = batch.r.to(v.dtype).unsqueeze(-1)  # [B, L, 1]
        h = v.new_zeros(B, c.d)
        logits, guesses, log_pi = [], [], []
        for t, (v_t, r_t) in enumerate(zip(v.unbind(1), r.unbind(1), strict=True)):
            z = self.cog_policy(torch.cat([v_t, h], -1))  # [B, Nc]
            m_t, lp_c = act(z, self.cognition, u[0, t] if sample else None, c.eval_action)
            hv = torch.cat([h, v_t], -1)  # [B, 3D]
            y = self.predictor(torch.cat([hv, m_t], -1)).squeeze(-1)  # [B]
            guess = (y.detach() > 0).to(v.dtype).unsqueeze(-1)  # [B, 1] the model's answer
            o = torch.cat([hv * r_t, hv * (1 - r_t), hv * guess, hv * (1 - guess)], -1)
            za = self.acq_policy(o)  # [B, Na]
            s_t, lp_a = act(za, self.acquisition, u[1, t] if sample else None, c.eval_action)
            x = torch.cat([v_t * r_t + s_t * (1 - r_t), s_t * r_t + v_t * (1 - r_t)], -1)
            h = torch.where(m[:, t, None], self.gru(x, h), h)  # [B, D]
            logits.append(y)
            guesses.append(guess.squeeze(-1))
            if sample:
                log_pi.append(lp_c + lp_a)
        logits = torch.stack(logits, 1)  # [B, L]
        extras = {"guess": torch.stack(guesses, 1)}  # [B, L] 1 where logit_t > 0
        losses = {}
        if sample:
            w = m.to(v.dtype)
            right = (extras["guess"] == batch.r.to(v.dtype)).to(v.dtype) * w  # [B, L]
            reward = right / w.sum(1, keepdim=True).clamp(min=1)
            ret = discounted_returns(reward, m, c.gamma)  # [B, L], no gradient
            extras["returns"] = ret
            pg = -(torch.stack(log_pi, 1) * ret * w).sum() / w.sum().clamp(min=1)
            losses["pg"] = c.pg_weight * pg
        return ModelOutput(
            logits=logits, losses=losses, attention={} if return_attention else None, extras=extras
        )
