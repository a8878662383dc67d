"""DIMKT (Shen, Liu, Huang, Zhao, Wang & Chen, SIGIR 2022): "Assessing Student's Dynamic
Knowledge State by Exploring the Question Difficulty Effect".

# B batch, L steps, D hidden dim, N difficulty levels
    x_t = W1 [Q(pid_t), C(q_t), QD(qd_t), CD(cd_t)] + b1    question input     [B, L, D]
    SDF:  s_t = sig(W2 (h - x_t)) * drop(tanh(W3 (h - x_t)))  subjective feeling  (h = h_{t-1})
    PKA:  p_t = sig(W4 [s_t, A(r_t)]) * tanh(W5 [s_t, A(r_t)])  knowledge acquired
    KSU:  g_t = sig(W6 [h, A(r_t), CD(cd_t), QD(qd_t)]);  h_t = g_t * h + (1 - g_t) * p_t
    logit_t = x_t . h_{t-1}        (h_{-1} = the learned initial state k0)
qd / cd: difficulty levels of problems / skills, floor(correct rate * N) from the training
students (`prepare`); an item answered fewer than `min_count` times gets the level `N` (rare).
Step t reads x at t and (x, r) at steps < t through h_{t-1}, never r_t.
Deviations from the authors' code (shshen-closer/DIMKT, TensorFlow) and pyKT's `dimkt`:
- tables from the training students only (authors: every student, test included; pyKT: the
  train + validation folds, a leak into model selection).
- rare items get their own level N (authors drop them from the sequences; pyKT puts them in
  level 1, the hardest bucket).
- one W1 maps x_t as input and as target (pyKT; the authors' code has a second projection).
- gate biases are plain biases (authors add b to the weight matrix: q (W + b) = qW + sum(q) b).
- aligned: pyKT scores h_j against the question at j+1; here logit_t = x_t . h_{t-1}.
- the loop precomputes every input term; each step does two matmuls (same math, tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch, KTDataset
from ..nn import Dropout
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class DIMKTConfig(BaseConfig):
    """DIMKT sizes and difficulty tables."""

    d: int = 128  # embedding and knowledge-state size (pyKT: emb_size)
    dropout: float = 0.2  # dropout on the SDF candidate (pyKT's one dropout)
    difficult_levels: int = 100  # N: correct rates bucketed into N levels
    min_count: int = 30  # items answered fewer times (by training students) get the rare level

    BINARY = True
    PRESETS = {
        "tiny": {"d": 16, "difficult_levels": 10, "min_count": 3},
        # authors' train.py: hidden_size 128, dropout 0.2, 100 levels, rare below 30 answers;
        # pyKT the same (kt_config.json dropout 0.2, wandb_dimkt_train.py emb_size 128)
        "paper": {"d": 128, "dropout": 0.2, "difficult_levels": 100, "min_count": 30},
    }

    def validate(self) -> None:
        super().validate()
        require(self.d > 0, f"d must be > 0, got {self.d}")
        require(
            self.difficult_levels >= 1,
            f"difficult_levels must be >= 1, got {self.difficult_levels}",
        )
        require(self.min_count >= 1, f"min_count must be >= 1, got {self.min_count}")


def difficulty_levels(
    ids: np.ndarray, r: np.ndarray, size: int, levels: int, min_count: int
) -> torch.Tensor:
    """[size] level of each id: floor(correct rate * levels) clipped to levels - 1; ids answered
    fewer than `min_count` times (unseen included) get `levels` (rare)."""
    n = np.bincount(ids, minlength=size)
    k = np.bincount(ids, weights=r, minlength=size)
    rate = k / np.maximum(n, 1)
    level = np.minimum(np.floor(rate * levels), levels - 1).astype(np.int64)
    level[n < min_count] = levels
    return torch.from_numpy(level)


@register("dimkt")
class DIMKT(KTModel):
    """Question-difficulty gated recurrence (SDF, PKA, KSU) with difficulty tables from train."""

    config_cls = DIMKTConfig
    attends = False  # a recurrence, no attention weights
    needs = frozenset({"pid"})
    own_log_in_training_state = (
        "the difficulty tables are correct rates over the training students' answers (the "
        "paper's and pyKT's construction), a training student's own included; held-out "
        "students never enter them (tests/test_dimkt.py)"
    )

    def __init__(self, config: DIMKTConfig):
        super().__init__(config)
        c = config
        d, n = c.d, c.difficult_levels + 1  # + the rare level
        self.q_emb = nn.Embedding(c.num_pid, d)
        self.c_emb = nn.Embedding(c.num_c, d)
        self.qd_emb = nn.Embedding(n, d)
        self.cd_emb = nn.Embedding(n, d)
        self.a_emb = nn.Embedding(2, d)
        self.k0 = nn.Parameter(nn.init.xavier_uniform_(torch.empty(1, d)))  # initial state
        self.input = nn.Linear(4 * d, d)  # W1
        self.sdf_gate = nn.Linear(d, d)  # W2
        self.sdf_cand = nn.Linear(d, d)  # W3
        self.pka_gate = nn.Linear(2 * d, d)  # W4
        self.pka_cand = nn.Linear(2 * d, d)  # W5
        self.ksu_gate = nn.Linear(4 * d, d)  # W6
        self.drop = Dropout(c.dropout)
        # difficulty tables: all "rare" until prepare() sees the training students
        self.register_buffer("qd_table", torch.full((c.num_pid,), n - 1), persistent=False)
        self.register_buffer("cd_table", torch.full((c.num_c,), n - 1), persistent=False)

    def prepare(self, train: KTDataset) -> None:
        """Difficulty levels of problems and skills from the training students only."""
        c = self.config
        q = np.concatenate([s.q for s in train.students])
        r = np.concatenate([s.r for s in train.students]).astype(np.float64)
        pid = np.concatenate([s.pid for s in train.students])
        levels = (c.difficult_levels, c.min_count)
        self.qd_table.copy_(difficulty_levels(pid, r, c.num_pid, *levels))
        self.cd_table.copy_(difficulty_levels(q, r, c.num_c, *levels))

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"qd_table": self.qd_table.cpu(), "cd_table": self.cd_table.cpu()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        for name in ("qd_table", "cd_table"):
            if name in state:
                getattr(self, name).copy_(state[name])

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        d = self.config.d
        qd, cd = self.qd_table[batch.pid], self.cd_table[batch.q]  # [B, L] levels
        qd_e, cd_e, a_e = self.qd_emb(qd), self.cd_emb(cd), self.a_emb(batch.r)  # [B, L, D]
        x = self.input(torch.cat([self.q_emb(batch.pid), self.c_emb(batch.q), qd_e, cd_e], -1))
        # every term that does not read h, for all steps at once: linear maps split by input
        w2, w3 = self.sdf_gate.weight, self.sdf_cand.weight  # [D, D]
        w4s, w4a = self.pka_gate.weight.split(d, 1)  # [D, D] on s, on A(r)
        w5s, w5a = self.pka_cand.weight.split(d, 1)
        w6h, w6rest = self.ksu_gate.weight.split([d, 3 * d], 1)
        pre_sdf = torch.cat([self.sdf_gate.bias - x @ w2.T, self.sdf_cand.bias - x @ w3.T], -1)
        b_pka = torch.cat([self.pka_gate.bias, self.pka_cand.bias])  # [2D]
        pre_pka = a_e @ torch.cat([w4a, w5a]).T + b_pka  # [B, L, 2D]
        pre_ksu = torch.cat([a_e, cd_e, qd_e], -1) @ w6rest.T + self.ksu_gate.bias  # [B, L, D]
        w_h = torch.cat([w2, w3, w6h]).T  # [D, 3D]: the three maps that read h
        w_s = torch.cat([w4s, w5s]).T  # [D, 2D]: the two that read s
        B, L = batch.q.shape
        # per-step slices as one unbind: indexing [:, t] would give each step's backward a
        # zero-filled [B, L, .] gradient; unbind's backward stacks them once
        pre_h = torch.cat([pre_sdf, pre_ksu], -1).unbind(1)  # L x [B, 3D]
        pre_s = pre_pka.unbind(1)  # L x [B, 2D]
        # the SDF dropout's draws for every step at once (one draw, as a [B, L, D] dropout)
        keep = None
        if self.training and self.drop.p > 0:
            keep = self.drop(torch.ones(B, L, d, dtype=x.dtype, device=x.device)).unbind(1)
        h = self.k0.expand(B, d)
        states = []
        for t in range(L):  # the recurrence: h_{t-1} -> h_t
            states.append(h)
            zg, zc, zk = torch.addmm(pre_h[t], h, w_h).chunk(3, -1)  # 3 x [B, D]
            s = torch.sigmoid(zg) * torch.tanh(zc)  # SDF [B, D]
            if keep is not None:
                s = s * keep[t]
            zg, zc = torch.addmm(pre_s[t], s, w_s).chunk(2, -1)
            p = torch.sigmoid(zg) * torch.tanh(zc)  # PKA [B, D]
            g = torch.sigmoid(zk)  # KSU gate [B, D]
            h = p + g * (h - p)  # = g * h + (1 - g) * p
        prev = torch.stack(states, 1)  # [B, L, D]: h_{t-1}
        logits = (x * prev).sum(-1)  # [B, L]
        extras = {"qd": qd, "cd": cd}
        return ModelOutput(logits=logits, attention={} if return_attention else None, extras=extras)
