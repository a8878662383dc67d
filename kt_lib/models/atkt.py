"""ATKT (Guo et al., ACM MM 2021, "Enhancing Knowledge Tracing via Adversarial Training"),
in its causal form (pyKT's `atktfix`).

# B batch, L steps, Ds skill dim, Da answer dim, E = Ds + Da, Hd hidden dim, C concepts
    x_s   = [E_s[q_s], E_a[r_s]] if r_s = 1 else [E_a[r_s], E_s[q_s]]     [B, L, E]
    h_s   = LSTM(x_0..x_s)                                                [B, L, Hd]
    e_j   = w . tanh(W h_j + b)                     attention score of state j
    row_s = sum_{j <= s} softmax_{j <= s}(e_j) h_j   causal attention of state s
    f_s   = [sum_{s' < s} row_s', h_s]                                    [B, L, 2 Hd]
            (`context="mean"`, a diagnostic: the sum over the n_s valid s' < s divided by
            max(n_s, 1), so that its scale does not grow with the log)
    logit_t = (W_o Dropout(f_{t-1}) + b_o)[q_t],  f_{-1} = 0
Training adds beta * BCE(the same forward on x + delta), delta = epsilon * g / ||g||_2 (per
student), g = d BCE / d x, the perturbation held constant (FGSM; `loss()`, not the trainer).
Step t reads interactions < t (f_{t-1}) and q_t (the gathered output column).
Deviations from the authors' code and pyKT:
- the authors' softmax runs over the WHOLE sequence (future and padded states set every weight:
  pyKT atkt.py `alphas=nn.Softmax(dim=1)(att_w)`); ours is atktfix's causal softmax over j <= s.
- padded steps: zero embeddings, never attention keys, never summed into the context.
- the output for step t is indexed at t (pyKT: pred[:, s] against r[:, s + 1]); step 0 reads
  f_{-1} = 0, i.e. the output bias of q_0 (pyKT and the authors score no step 0).
- the perturbation's norm is taken in torch (the authors go through numpy; same value).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import require
from ..data.dataset import Batch
from ..nn import LSTM, Dropout
from .base import BaseConfig, KTModel, ModelOutput, register


@dataclass
class ATKTConfig(BaseConfig):
    """ATKT sizes and the adversarial step."""

    skill_dim: int = 256  # Ds: concept embedding
    answer_dim: int = 96  # Da: response embedding
    hidden_dim: int = 80  # Hd: LSTM hidden size
    attention_dim: int = 80  # inner width of the attention score MLP
    epsilon: float = 10.0  # L2 norm of each student's perturbation
    beta: float = 0.2  # weight of the adversarial loss
    dropout: float = 0.0  # before the output layer (the authors have none; pyKT 0.2)
    context: str = "sum"  # "sum": the running sum of the earlier rows (atktfix); "mean": their mean

    BINARY = True
    PRESETS = {
        "tiny": {"skill_dim": 8, "answer_dim": 6, "hidden_dim": 8, "attention_dim": 8},
        # the authors' code (xiaopengguo/ATKT main.py defaults, ASSIST2009: epsilon 10, beta 0.2;
        # attention dim 80 hard-coded in model.py)
        "paper": {
            "skill_dim": 256,
            "answer_dim": 96,
            "hidden_dim": 80,
            "attention_dim": 80,
            "epsilon": 10.0,
            "beta": 0.2,
            "dropout": 0.0,
        },
        # pyKT configs/kt_config.json `atkt`/`atktfix` (80/80/80) and ATKT.__init__ defaults
        "pykt": {
            "skill_dim": 80,
            "answer_dim": 80,
            "hidden_dim": 80,
            "attention_dim": 80,
            "epsilon": 10.0,
            "beta": 0.2,
            "dropout": 0.2,
        },
    }

    def validate(self) -> None:
        super().validate()
        for name in ("skill_dim", "answer_dim", "hidden_dim", "attention_dim"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        require(self.epsilon >= 0, f"epsilon must be >= 0, got {self.epsilon}")
        require(self.beta >= 0, f"beta must be >= 0, got {self.beta}")
        ok = self.context in ("sum", "mean")
        require(ok, f"context must be 'sum' or 'mean', got {self.context!r}")


def causal_state_context(
    h: torch.Tensor, score: torch.Tensor, valid: torch.Tensor, mean: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """ATKT's causal attention: h [B, L, Hd], score [B, L], valid [B, L] bool ->
    (context [B, L, Hd] with context_s = sum_{s' < s} row_s' (`mean`: divided by the number of
    valid s' < s, at least 1), weights [B, L, L])."""
    L = h.shape[1]
    # masked_softmax over the readable keys (j <= s, valid), built from the blocked ones and
    # without its [B, L, L] any() and product: a row reads a key iff a valid step j <= s exists
    blocked = torch.ones(L, L, dtype=torch.bool, device=h.device).triu(1)  # key j > row s
    blocked = blocked | ~valid[:, None, :]  # [B, L, L]
    low = torch.finfo(score.dtype).min
    a = score[:, None, :].expand(-1, L, -1).masked_fill(blocked, low).softmax(-1)  # [B, L, L]
    has_key = valid.cumsum(1) > 0  # [B, L]
    if h.device.type != "cpu" or not bool(has_key.all()):  # rows with no key read nothing
        a = a * has_key[..., None]
    row = (a @ h) * valid[..., None]  # [B, L, Hd]; padded rows add nothing
    before = row.cumsum(1) - row  # the rows before s (the authors' cumsum minus self)
    if mean:
        n = (valid.cumsum(1) - valid.long()).clamp_min(1)  # [B, L]: valid steps before s
        before = before / n[..., None]
    return before, a


@register("atkt")
class ATKT(KTModel):
    """LSTM over interaction embeddings, a causal attention over its states, FGSM training."""

    config_cls = ATKTConfig

    def __init__(self, config: ATKTConfig):
        super().__init__(config)
        c = config
        self.skill = nn.Embedding(c.num_c, c.skill_dim)
        self.answer = nn.Embedding(2, c.answer_dim)
        self.lstm = LSTM(c.skill_dim + c.answer_dim, c.hidden_dim, batch_first=True)
        self.att_mlp = nn.Linear(c.hidden_dim, c.attention_dim)
        self.att_score = nn.Linear(c.attention_dim, 1, bias=False)
        self.drop = Dropout(c.dropout)
        self.out = nn.Linear(2 * c.hidden_dim, c.num_c)

    def embed(self, batch: Batch) -> torch.Tensor:
        """Interaction embeddings x [B, L, E]; the order of the halves encodes the response."""
        r = batch.r.masked_fill(~batch.mask, 0)
        s, a = self.skill(batch.q), self.answer(r)  # [B, L, Ds], [B, L, Da]
        x = torch.cat([s, a], -1)  # [B, L, E]: right answers' order
        wrong = r != 1  # [B, L]
        x[wrong] = torch.cat([a[wrong], s[wrong]], -1)  # cat's fresh output, saved by none
        return x * batch.mask.unsqueeze(-1)  # padded steps embed to zero, as the authors'

    def predict(self, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, L] and attention weights [B, L, L] from interaction embeddings x."""
        h, _ = self.lstm(x)  # [B, L, Hd]
        score = self.att_score(torch.tanh(self.att_mlp(h))).squeeze(-1)  # [B, L]
        ctx, a = causal_state_context(h, score, batch.mask, self.config.context == "mean")
        f = torch.cat([ctx, h], -1)  # [B, L, 2Hd], f_s reads interactions <= s
        f = torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], 1)  # step t reads f_{t-1}
        logits = self.out(self.drop(f))  # [B, L, C]
        return logits.gather(-1, batch.q.unsqueeze(-1)).squeeze(-1), a

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        x = self.embed(batch)
        logits, a = self.predict(x, batch)
        # row s of "states": the weights of state s over states j <= s (read from step s + 2 on)
        maps = {"states": a.unsqueeze(1).detach()} if return_attention else None
        return ModelOutput(logits=logits, attention=maps, extras={"embeddings": x})

    def perturbation(self, pred_loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """FGSM: epsilon * g / ||g||_2 per student, g = d pred_loss / d x; no graph kept."""
        (g,) = torch.autograd.grad(pred_loss, x, retain_graph=True)
        norm = g.flatten(1).norm(dim=1).view(-1, 1, 1)  # [B, 1, 1]
        return self.config.epsilon * g / (norm + 1e-16)

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        terms = super().loss(out, batch, epoch)
        x = out.extras.get("embeddings")
        train = self.training and torch.is_grad_enabled() and self.config.beta > 0
        if not train or x is None or not x.requires_grad:
            return terms
        delta = self.perturbation(terms["pred"], x)
        adv_logits, _ = self.predict(self.embed(batch) + delta, batch)
        adv = super().loss(ModelOutput(logits=adv_logits), batch, epoch)["pred"]
        terms["adv"] = self.config.beta * adv
        terms["total"] = terms["total"] + terms["adv"]
        return terms
