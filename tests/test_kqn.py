"""KQN: the knowledge query against a plain per-step loop, unit skill vectors, preset sizes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kt_lib.audit import random_batch
from kt_lib.models import build_model

C = 7


def test_logit_is_the_state_before_t_queried_by_the_skill_of_q_t():
    torch.manual_seed(0)
    model = build_model("kqn", preset="tiny", num_c=C).eval()
    batch = random_batch(C, B=3, L=9, seed=2)
    with torch.no_grad():
        got = model(batch).logits
        # the skill MLP on an explicit one-hot, as the paper writes it
        W1, b1 = model.skill_in.weight.T, model.skill_bias  # [M, C], [M]
        for b in range(3):
            hc = None
            x = torch.zeros(1, 1, 2 * C)  # nothing answered before step 0
            for t in range(int(batch.mask[b].sum())):
                h, hc = model.rnn(x, hc)
                k = model.state(h[0, 0])  # [N]
                s = torch.relu(
                    model.skill_out(torch.relu(W1 @ F.one_hot(batch.q[b, t], C).float() + b1))
                )
                want = k @ (s / s.norm().clamp(min=1e-12))
                assert torch.allclose(got[b, t], want, atol=1e-5), (b, t)
                x = F.one_hot(batch.q[b, t] + C * batch.r[b, t], 2 * C).float().view(1, 1, -1)


def test_skill_vectors_have_unit_length_and_padding_answers_nothing():
    torch.manual_seed(0)
    model = build_model("kqn", preset="paper", num_c=C).eval()
    s = model.skill(torch.arange(C))
    assert torch.allclose(s.norm(dim=-1), torch.ones(C), atol=1e-5)
    batch = random_batch(C, B=2, L=6, ragged=False, seed=3)
    batch.mask[:, 3:] = False
    k = model.knowledge(batch)
    batch.q[:, 3:], batch.r[:, 3:] = 5, 1  # whatever padding holds, no state moves
    assert torch.equal(model.knowledge(batch), k)
    batch.mask[:, 3:] = True  # the same ids read as answers do move the later states
    assert not torch.allclose(model.knowledge(batch)[:, 4:], k[:, 4:])


def test_paper_preset_size():
    model = build_model("kqn", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.d_rnn, c.d_mlp, c.n_layers, c.rnn, c.dropout) == (128, 128, 128, 1, "lstm", 0.4)
    # pyKT's KQN at these sizes: LSTM(200, 128) 168,960 + Linear(128, 128) 16,512 + skill MLP
    # Linear(100, 128) 12,928 + Linear(128, 128) 16,512
    assert sum(p.numel() for p in model.parameters()) == 214_912
    gru = build_model("kqn", preset="paper", num_c=100, rnn="gru")
    assert isinstance(gru.rnn, torch.nn.GRU)
