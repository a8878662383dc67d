"""ATKT: the causal state attention against a loop, the authors' leak, the adversarial term."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kt_lib.audit import audit_causality, random_batch
from kt_lib.models import atkt as atkt_module
from kt_lib.models import build_model
from kt_lib.models.atkt import causal_state_context

NUM_C = 9


def _model(**kw):
    torch.manual_seed(0)
    return build_model("atkt", preset="tiny", num_c=NUM_C, **kw)


def test_causal_context_matches_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    B, L, H = 3, 7, 4
    h, score = torch.randn(B, L, H, generator=g), torch.randn(B, L, generator=g)
    valid = torch.arange(L) < torch.tensor([7, 5, 2]).unsqueeze(1)
    ctx, a = causal_state_context(h, score, valid)
    for b in range(B):
        rows = []
        for s in range(L):
            keys = [j for j in range(s + 1) if valid[b, j]]
            w = torch.softmax(score[b, keys], 0) if keys else torch.zeros(0)
            rows.append(sum((w[i] * h[b, j] for i, j in enumerate(keys)), torch.zeros(H)))
            if keys:
                assert torch.allclose(a[b, s, keys], w, atol=1e-6)
        for s in range(L):
            want = sum((rows[u] for u in range(s) if valid[b, u]), torch.zeros(H))
            assert torch.allclose(ctx[b, s], want, atol=1e-5), (b, s)


def _authors_context(h, score, valid, mean=False):
    """The authors' attention: one softmax over the whole sequence, then the cumsum."""
    a = torch.softmax(score, 1).unsqueeze(-1)  # [B, L, 1]
    row = a * h
    return row.cumsum(1) - row, a.squeeze(-1).unsqueeze(1).expand(-1, h.shape[1], -1)


def test_mean_context_is_the_sum_over_the_valid_steps_before_and_stays_causal():
    """The diagnostic `context="mean"`: each step's context is the running sum divided by the
    number of valid steps before it (at least 1: step 0's is 0, as the sum's); the model under
    it passes the causality audit in train and eval mode."""
    g = torch.Generator().manual_seed(1)
    B, L, H = 3, 7, 4
    h, score = torch.randn(B, L, H, generator=g), torch.randn(B, L, generator=g)
    valid = torch.arange(L) < torch.tensor([7, 5, 2]).unsqueeze(1)
    total, a = causal_state_context(h, score, valid)
    mean, a_mean = causal_state_context(h, score, valid, mean=True)
    assert torch.equal(a, a_mean)
    for b in range(B):
        for s in range(L):
            n = max(1, int(valid[b, :s].sum()))
            assert torch.allclose(mean[b, s], total[b, s] / n, atol=1e-6), (b, s)
    assert not torch.allclose(mean[0, 3:], total[0, 3:])  # it does rescale
    model, b = _model(context="mean"), random_batch(NUM_C, B=4, L=15, seed=2)
    for mode in ("eval", "train"):
        report = audit_causality(model, b, steps=list(range(15)), mode=mode)
        assert report, report
    with pytest.raises(ValueError, match="context must be 'sum' or 'mean', got 'max'"):
        _model(context="max")


def test_the_authors_whole_sequence_softmax_leaks_and_ours_does_not(monkeypatch):
    model = _model().eval()
    b = random_batch(NUM_C, B=4, L=15, seed=2)
    assert audit_causality(model, b, steps=list(range(15)))
    monkeypatch.setattr(atkt_module, "causal_state_context", _authors_context)
    assert not audit_causality(model, b, steps=list(range(15)))


def test_interaction_embedding_order_encodes_the_response():
    model = _model()
    b = random_batch(NUM_C, B=2, L=6, seed=3, ragged=False)
    x = model.embed(b)
    s, a = model.skill(b.q), model.answer(b.r)
    Ds = model.config.skill_dim
    Da = model.config.answer_dim
    right = b.r == 1
    assert torch.equal(x[right][:, :Ds], s[right]) and torch.equal(x[right][:, Ds:], a[right])
    assert torch.equal(x[~right][:, :Da], a[~right]) and torch.equal(x[~right][:, Da:], s[~right])


def test_step_zero_reads_only_q0():
    model = _model().eval()
    b = random_batch(NUM_C, B=4, L=5, seed=4)
    with torch.no_grad():
        logits = model(b).logits
    assert torch.allclose(logits[:, 0], model.out.bias[b.q[:, 0]])


def test_adversarial_term_in_training_changes_the_gradient():
    model = _model(epsilon=2.0, beta=0.5).train()
    b = random_batch(NUM_C, B=4, L=10, seed=5)
    out = model(b)
    terms = model.loss(out, b)
    assert set(terms) == {"pred", "adv", "total"}
    assert torch.allclose(terms["total"], terms["pred"] + terms["adv"])
    # the term is beta * BCE of the forward on x + delta, delta = epsilon * g / ||g|| per student
    x = out.extras["embeddings"]
    (g,) = torch.autograd.grad(terms["pred"], x, retain_graph=True)
    delta = 2.0 * g / g.flatten(1).norm(dim=1).view(-1, 1, 1)
    assert torch.allclose(delta.flatten(1).norm(dim=1), torch.full((4,), 2.0), atol=1e-4)
    adv_logits, _ = model.predict(model.embed(b) + delta, b)
    m = b.mask
    bce = F.binary_cross_entropy_with_logits(adv_logits[m], b.r[m].float())
    assert torch.allclose(terms["adv"], 0.5 * bce, atol=1e-6)
    # the gradient of the total differs from that of the prediction loss alone
    params = [p for p in model.parameters() if p.requires_grad]
    g_pred = torch.autograd.grad(terms["pred"], params, retain_graph=True, allow_unused=True)
    g_tot = torch.autograd.grad(terms["total"], params, allow_unused=True)
    diff = sum(
        float((a - b_).abs().sum()) for a, b_ in zip(g_pred, g_tot, strict=True) if a is not None
    )
    assert diff > 1e-6


@pytest.mark.parametrize("how", ["eval", "no_grad", "beta0"])
def test_no_adversarial_term_outside_training(how):
    model = _model(beta=0.0) if how == "beta0" else _model()
    model.train(how != "eval")
    b = random_batch(NUM_C, B=3, L=8, seed=6)
    with torch.set_grad_enabled(how != "no_grad"):
        terms = model.loss(model(b), b)
    assert set(terms) == {"pred", "total"}
    assert torch.equal(terms["total"], terms["pred"])


def test_training_with_the_adversarial_term_lowers_the_loss():
    model = _model().train()
    b = random_batch(NUM_C, B=4, L=10, seed=7)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(30):
        terms = model.loss(model(b), b)
        opt.zero_grad()
        terms["total"].backward()
        opt.step()
        losses.append(terms["pred"].item())
    assert losses[-1] < losses[0]


def test_presets_and_parameter_counts():
    paper = build_model("atkt", preset="paper", num_c=100)
    c = paper.config
    assert (c.skill_dim, c.answer_dim, c.hidden_dim, c.attention_dim) == (256, 96, 80, 80)
    assert (c.epsilon, c.beta, c.dropout) == (10.0, 0.2, 0.0)
    # skill 100 x 256, answer 2 x 96, LSTM 352 -> 80 (4 * 80 * 432 + 640), score MLP 6480 + 80,
    # output 160 x 100 + 100
    assert sum(p.numel() for p in paper.parameters()) == 187_332
    pykt = build_model("atkt", preset="pykt", num_c=100)
    assert (pykt.config.skill_dim, pykt.config.answer_dim, pykt.config.dropout) == (80, 80, 0.2)
    assert sum(p.numel() for p in pykt.parameters()) == 108_260
    with pytest.raises(ValueError, match="epsilon must be >= 0"):
        build_model("atkt", preset="tiny", num_c=5, epsilon=-1.0)
