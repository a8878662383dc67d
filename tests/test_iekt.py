"""IEKT: the forward and the policy-gradient term against a plain per-student loop (sampled
actions in training, the mode or the mean in evaluation), deterministic evaluation, the sign of
the REINFORCE gradient, padding, what it refuses, the paper preset's size."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.iekt import discounted_returns
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def test_refuses_skill_only_data_by_name():
    skills_only = make_tiny_dataset(NUM_C, 0)
    with pytest.raises(ValueError, match=r"iekt needs problem ids \(pid\), and tiny has none"):
        build_model("iekt", preset="tiny", dataset=skills_only)
    build_model("iekt", preset="tiny", dataset=make_tiny_dataset(NUM_C, NUM_PID))


def test_paper_preset_size():
    # 100 skills, 1000 problems, d 64: Q, C (1100 * 64) + M_c, M_a (2 * 10 * 128)
    # + f_c (192^2 + 192 + 192 * 10 + 10) + f_a (768^2 + 768 + 768 * 10 + 10)
    # + f_y (320^2 + 320 + 320 + 1) + GRU (3 * (256 * 64 + 64) + 3 * (64 * 64 + 64)) = 875,093
    # (pyKT's IEKT: 953,749, with a problem table, a concept table and a layer it never reads)
    model = build_model("iekt", preset="paper", num_c=100, num_pid=1000)
    assert sum(p.numel() for p in model.parameters()) == 875_093


def test_config_refuses_what_would_have_no_meaning_or_no_effect():
    with pytest.raises(ValueError, match="eval_action must be one of"):
        build_model("iekt", preset="tiny", num_c=3, num_pid=5, eval_action="sample")
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\]"):
        build_model("iekt", preset="tiny", num_c=3, num_pid=5, gamma=1.5)
    with pytest.raises(ValueError, match="with mlp_layers 0 it must be 0"):
        build_model("iekt", preset="tiny", num_c=3, num_pid=5, mlp_layers=0, dropout=0.1)
    build_model("iekt", preset="tiny", num_c=3, num_pid=5, mlp_layers=0)  # linear policies


def _model(**kw):
    torch.manual_seed(0)
    return build_model("iekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw).double()


def _iekt_loop(model, b: Batch, u: torch.Tensor | None, how: str = "mode"):
    """Per student and step: logits [B, L], pg (with draws u), and (a_t, pi^c_t, G_t) per valid
    step (with draws u)."""
    c = model.config
    B, L = b.q.shape
    logits = torch.zeros(B, L, dtype=torch.float64)
    terms, steps = [], []

    def choose(z, levels, draw):
        p = torch.softmax(z, -1)
        if draw is not None:  # the first level whose cumulative probability reaches the draw
            cum = torch.cumsum(p, -1).tolist()
            a = next((k for k, x in enumerate(cum) if x >= draw), len(cum) - 1)
            return levels[a], torch.log(p[a]), a, p
        if how == "mean":
            return p @ levels, None, None, p
        return levels[int(p.argmax())], None, int(p.argmax()), p

    for i in range(B):
        h = torch.zeros(c.d, dtype=torch.float64)
        n = int(b.mask[i].sum())
        rewards, log_pi, chosen = [], [], []
        for t in range(L):
            if not b.mask[i, t]:
                continue
            v = torch.cat([model.skill.weight[b.q[i, t]], model.problem.weight[b.pid[i, t]]])
            draws = (None, None) if u is None else (float(u[0, t, i]), float(u[1, t, i]))
            m, lp_c, a, p = choose(model.cog_policy(torch.cat([v, h])), model.cognition, draws[0])
            y = model.predictor(torch.cat([h, v, m]))[0]
            logits[i, t] = y
            r, guess = float(b.r[i, t]), float(y > 0)
            hv = torch.cat([h, v])
            o = torch.cat([hv * r, hv * (1 - r), hv * guess, hv * (1 - guess)])
            s, lp_a, _, _ = choose(model.acq_policy(o), model.acquisition, draws[1])
            x = torch.cat([v, s]) if r == 1 else torch.cat([s, v])
            h = model.gru(x.unsqueeze(0), h.unsqueeze(0))[0]
            rewards.append(float(guess == r) / n)
            if u is not None:
                log_pi.append(lp_c + lp_a)
                chosen.append((a, p))
        ret, g = [], 0.0
        for x in reversed(rewards):
            g = x + c.gamma * g
            ret.append(g)
        ret.reverse()
        if u is not None:
            terms += [-lp * g for lp, g in zip(log_pi, ret, strict=True)]
            steps += [(a, p, g) for (a, p), g in zip(chosen, ret, strict=True)]
    n_valid = int(b.mask.sum())
    pg = c.pg_weight * sum(terms) / n_valid if u is not None else None
    return logits, pg, steps


@pytest.mark.parametrize("how", ["mode", "mean"])
def test_eval_forward_matches_a_plain_loop(how):
    model = _model(eval_action=how).eval()
    b = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=3)
    with torch.no_grad():
        out = model(b)
        want, _, _ = _iekt_loop(model, b, None, how)
    assert out.losses == {}  # no policy-gradient term outside training
    assert torch.allclose(out.logits[b.mask], want[b.mask], atol=1e-12)


def test_training_forward_and_policy_gradient_match_a_plain_loop():
    model = _model().train()
    b = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=4)
    torch.manual_seed(7)
    out = model(b)
    torch.manual_seed(7)
    u = torch.rand(2, 10, 3)  # the forward's one draw: [policy, step, student]
    want, pg, steps = _iekt_loop(model, b, u)
    assert torch.allclose(out.logits[b.mask], want[b.mask], atol=1e-12)
    assert out.losses["pg"].shape == () and torch.allclose(out.losses["pg"], pg, atol=1e-12)
    assert out.losses["pg"] > 0  # -log pi > 0 and the returns are >= 0 (some > 0)
    # REINFORCE's sign: the cognition policy's output bias gets -lambda / N sum_t G_t
    # (onehot(a_t) - pi_t), so a descent step raises the levels chosen before high returns
    bias = model.cog_policy[-1].bias
    (grad,) = torch.autograd.grad(out.losses["pg"], bias)
    want_grad = torch.zeros_like(bias)
    for a, p, g in steps:
        want_grad -= g * (torch.nn.functional.one_hot(torch.tensor(a), len(p)) - p.detach())
    want_grad *= model.config.pg_weight / int(b.mask.sum())
    assert torch.allclose(grad, want_grad, atol=1e-12)
    assert (grad != 0).any()


def test_evaluation_is_deterministic_and_training_samples():
    model = _model()
    b = random_batch(NUM_C, B=4, L=12, num_pid=NUM_PID, seed=5)
    with torch.no_grad():
        for how in ("mode", "mean"):
            model.config.eval_action = how
            model.eval()
            torch.manual_seed(1)
            first = model(b).logits
            torch.manual_seed(2)
            assert torch.equal(model(b).logits, first), how  # pyKT's would differ here
        model.train()
        draws = []
        for seed in (1, 1, 2):
            torch.manual_seed(seed)
            draws.append(model(b).logits)
    assert torch.equal(draws[0], draws[1])  # the same draws, the same predictions
    assert not torch.equal(draws[0], draws[2])  # the levels are sampled in training


def test_discounted_returns_match_a_loop_over_valid_steps():
    g = torch.Generator().manual_seed(0)
    reward = torch.rand(3, 9, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 9, generator=g) > 0.3
    got = discounted_returns(reward, mask, 0.9)
    for b in range(3):
        valid = [t for t in range(9) if mask[b, t]]
        for i, t in enumerate(valid):
            want = sum(0.9**j * float(reward[b, s]) for j, s in enumerate(valid[i:]))
            assert abs(float(got[b, t]) - want) < 1e-12, (b, t)


def _pad(x: torch.Tensor, fill: int, side: str) -> torch.Tensor:
    p = torch.full((x.shape[0], 4), fill, dtype=x.dtype)
    return torch.cat([p, x] if side == "left" else [x, p], 1)


def test_padding_on_either_side_moves_no_prediction():
    model = _model().eval()
    b = random_batch(NUM_C, B=3, L=12, num_pid=NUM_PID, seed=6, ragged=False)
    with torch.no_grad():
        want = model(b).logits
        for side in ("left", "right"):
            mask = _pad(b.mask, False, side)
            q, r, pid = (_pad(x, 1, side) for x in (b.q, b.r, b.pid))
            got = model(Batch(q=q, r=r, mask=mask, pid=pid)).logits[mask].view(3, 12)
            assert torch.allclose(got, want, atol=1e-12), side
