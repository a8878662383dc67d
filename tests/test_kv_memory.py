"""The key-value memory block, DKVMN and Deep-IRT against plain per-sample loops."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model
from kt_lib.nn.memory import KeyValueMemory


def _loop_reads(mem: KeyValueMemory, w, e, a, mask):
    """One student and one step at a time, the paper's equations written out slot by slot."""
    B, L, M = w.shape
    out = []
    for b in range(B):
        mv = [mem.init_value[i].clone() for i in range(M)]  # M rows of [Dv]
        rows = []
        for t in range(L):
            rows.append(sum(w[b, t, i] * mv[i] for i in range(M)))
            if mask[b, t]:
                mv = [mv[i] * (1 - w[b, t, i] * e[b, t]) + w[b, t, i] * a[b, t] for i in range(M)]
        out.append(torch.stack(rows))
    return torch.stack(out)


def _matches_the_loop(mem: KeyValueMemory, k, v, mask):
    """`read_write` against `_loop_reads`: outputs at 1e-12, gradients of every parameter at
    1e-10 (an unused one, v's when L = 1 writes nothing, as zero on both sides). -> (reads, w)."""
    w = mem.address(k)
    e, a = mem.signals(v)
    fast = mem.read_write(w, e, a, mask)
    slow = _loop_reads(mem, w, e, a, mask)
    assert torch.allclose(fast, slow, atol=1e-12)
    g = torch.randn_like(fast)
    params = [k, v, mem.keys, mem.init_value, mem.erase.weight, mem.add.weight]
    grad = dict(allow_unused=True, materialize_grads=True)
    grads_fast = torch.autograd.grad((fast * g).sum(), params, retain_graph=True, **grad)
    grads_slow = torch.autograd.grad((slow * g).sum(), params, **grad)
    for gf, gs in zip(grads_fast, grads_slow, strict=True):
        assert torch.allclose(gf, gs, atol=1e-10)
    return fast, w


def test_read_write_matches_a_plain_loop_outputs_and_gradients():
    torch.manual_seed(0)
    B, L, M, dk, dv = 3, 7, 4, 5, 6
    mem = KeyValueMemory(M, dk, dv).double()
    k = torch.randn(B, L, dk, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, L, dv, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2] = False  # a hole in the middle: that step must not write
    fast, w = _matches_the_loop(mem, k, v, mask)
    # the read at t is taken before step t's write: r_0 is M^v_0 read by w_0 for every row
    assert torch.allclose(fast[:, 0], w[:, 0] @ mem.init_value, atol=1e-12)


@pytest.mark.parametrize("L,chunk", [(1, 4), (4, 4), (5, 4), (11, 4), (9, 32)])
def test_read_write_backward_across_chunk_boundaries(monkeypatch, L, chunk):
    """The backward's batched passes cover chunks of steps: any L against any chunk size gives
    the plain loop's gradients (one step, a whole chunk, one step over, several chunks)."""
    import kt_lib.nn.memory as memory

    monkeypatch.setattr(memory, "CHUNK", chunk)
    torch.manual_seed(L)
    B, M, dk, dv = 2, 3, 4, 5
    mem = KeyValueMemory(M, dk, dv).double()
    k = torch.randn(B, L, dk, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, L, dv, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, L // 2 :] = False
    _matches_the_loop(mem, k, v, mask)


def test_read_write_gradcheck():
    torch.manual_seed(6)
    mem = KeyValueMemory(3, 2, 4).double()
    w = torch.softmax(torch.randn(2, 5, 3, dtype=torch.float64), -1).requires_grad_()
    e = torch.rand(2, 5, 4, dtype=torch.float64, requires_grad=True)
    a = torch.rand(2, 5, 4, dtype=torch.float64, requires_grad=True) * 2 - 1
    mask = torch.tensor([[True] * 5, [True, True, False, True, False]])
    assert torch.autograd.gradcheck(
        lambda w, e, a, m0: mem.read_write(w, e, a, mask) + 0 * m0.sum(),
        (w, e, a, mem.init_value),
    )


def test_single_write_matches_the_formula_and_gradcheck():
    torch.manual_seed(7)
    B, M, dv = 2, 3, 4
    mv = torch.randn(B, M, dv, dtype=torch.float64, requires_grad=True)
    w = torch.softmax(torch.randn(B, M, dtype=torch.float64), -1).requires_grad_()
    e = torch.rand(B, dv, dtype=torch.float64, requires_grad=True)
    a = torch.rand(B, dv, dtype=torch.float64, requires_grad=True)
    want = torch.stack(
        [mv[b] * (1 - torch.outer(w[b], e[b])) + torch.outer(w[b], a[b]) for b in range(B)]
    )
    assert torch.allclose(KeyValueMemory.write(mv, w, e, a), want, atol=1e-14)
    assert torch.autograd.gradcheck(KeyValueMemory.write, (mv, w, e, a))


def test_weights_are_a_softmax_over_slots_and_signals_are_bounded():
    torch.manual_seed(1)
    mem = KeyValueMemory(5, 3, 4)
    w = mem.address(torch.randn(2, 6, 3))
    assert w.shape == (2, 6, 5) and torch.allclose(w.sum(-1), torch.ones(2, 6))
    e, a = mem.signals(torch.randn(2, 6, 4))
    assert (e > 0).all() and (e < 1).all() and (a.abs() < 1).all()


def _dkvmn_loop(model, q, r):
    """DKVMN for one student, step by step, with the model's weights."""
    c, mem = model.config, model.memory
    mv = mem.init_value.clone()  # [M, Dv]
    logits = []
    for t in range(len(q)):
        k = model.key_emb.weight[q[t]]
        w = torch.softmax(mem.keys @ k, 0)  # [M]
        f = torch.tanh(model.summary(torch.cat([w @ mv, k])))
        logits.append(model.out(f).squeeze())
        v = model.value_emb.weight[q[t] + c.num_c * r[t]]
        e, a = torch.sigmoid(mem.erase(v)), torch.tanh(mem.add(v))
        mv = mv * (1 - torch.outer(w, e)) + torch.outer(w, a)
    return torch.stack(logits)


def test_dkvmn_matches_a_step_by_step_loop():
    torch.manual_seed(2)
    model = build_model("dkvmn", preset="tiny", num_c=9).double().eval()
    b = random_batch(9, B=3, L=10, seed=3)
    with torch.no_grad():
        fast = model(b).logits
        for i in range(3):
            n = int(b.mask[i].sum())
            slow = _dkvmn_loop(model, b.q[i, :n], b.r[i, :n])
            assert torch.allclose(fast[i, :n], slow, atol=1e-12)


def test_deep_irt_logit_is_three_theta_minus_beta():
    torch.manual_seed(4)
    model = build_model("deep_irt", preset="tiny", num_c=9).double().eval()
    b = random_batch(9, B=3, L=10, seed=5)
    with torch.no_grad():
        out = model(b)
        theta, beta = out.extras["theta"], out.extras["beta"]
        assert torch.allclose(out.logits, 3.0 * theta - beta, atol=1e-14)
        assert (theta.abs() < 1).all() and (beta.abs() < 1).all()
        # beta depends on the question only: the same skill has the same difficulty everywhere
        same = b.q == b.q[0, 0]
        assert torch.allclose(beta[same], beta[0, 0].expand(int(same.sum())), atol=1e-14)
        # theta from the DKVMN summary, step by step
        c, mem = model.config, model.memory
        q, r = b.q[0], b.r[0]
        mv = mem.init_value.clone()
        for t in range(int(b.mask[0].sum())):
            k = model.key_emb.weight[q[t]]
            w = torch.softmax(mem.keys @ k, 0)
            f = torch.tanh(model.summary(torch.cat([w @ mv, k])))
            assert torch.allclose(theta[0, t], torch.tanh(model.out.ability(f)).squeeze())
            v = model.value_emb.weight[q[t] + c.num_c * r[t]]
            e, a = torch.sigmoid(mem.erase(v)), torch.tanh(mem.add(v))
            mv = mv * (1 - torch.outer(w, e)) + torch.outer(w, a)


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "name, preset, sizes, low, high",
    [
        # 100 skills: embeddings 100*50 + 200*200, memory 20*(50+200), erase/add 2*200*201,
        # summary 250*50+50, output 51: 143,001
        ("dkvmn", "paper", (50, 200, 50, 20), 140_000, 146_000),
        ("dkvmn", "pykt", (200, 200, 200, 50), 238_000, 243_000),  # 240,801
        ("deep_irt", "paper", (50, 100, 50, 50), 59_000, 62_000),  # 60,352
        ("deep_irt", "pykt", (200, 200, 200, 50), 238_000, 243_000),  # 241,002
    ],
)
def test_presets_build_with_their_sizes(name, preset, sizes, low, high):
    model = build_model(name, preset=preset, num_c=100)
    c = model.config
    assert (c.d_key, c.d_value, c.d_summary, c.n_slots) == sizes
    assert low <= _n_params(model) <= high, _n_params(model)


def test_config_refuses_empty_memory():
    with pytest.raises(ValueError, match="n_slots must be > 0"):
        build_model("dkvmn", num_c=5, n_slots=0)
    with pytest.raises(ValueError, match="binary"):
        build_model("deep_irt", num_c=5, K=3)


@pytest.mark.parametrize("name", ["dkvmn", "deep_irt"])
def test_init_std_draws_every_weight_as_the_authors_did(name):
    """init_std: every weight from N(0, std^2) and every bias zero (the authors' MXNet
    initializer); without it, pyKT's kaiming-normal memory and torch's defaults."""
    torch.manual_seed(0)
    plain = build_model(name, preset="paper", num_c=100)
    torch.manual_seed(0)
    authors = build_model(name, preset="paper", num_c=100, init_std=0.1)
    weights = [p for p in authors.parameters() if p.dim() > 1]
    assert all(abs(p.std().item() - 0.1) < 0.02 for p in weights if p.numel() > 500)
    assert all(torch.all(p == 0) for p in authors.parameters() if p.dim() == 1)
    assert plain.key_emb.weight.std().item() > 0.5  # torch's N(0, 1) embeddings
    with pytest.raises(ValueError, match="init_std must be None or > 0"):
        build_model(name, num_c=5, init_std=0.0)


@pytest.mark.parametrize("name", ["dkvmn", "deep_irt"])
def test_key_fc_summarises_the_key_through_a_tanh_layer_as_the_authors_code(name):
    """key_fc = 50: f_t = tanh(W_f [r_t, tanh(W_k k_t + b_k)]) (the authors' model.py), step by
    step against the memory written out; 0 keeps the paper's [r_t, k_t]; still causal."""
    from kt_lib.audit import assert_causal

    torch.manual_seed(6)
    model = build_model(name, preset="tiny", num_c=9, key_fc=5).double().eval()
    c, mem = model.config, model.memory
    assert model.summary.in_features == c.d_value + 5
    assert build_model(name, preset="tiny", num_c=9).key_fc is None
    b = random_batch(9, B=2, L=8, seed=7)
    with torch.no_grad():
        f = model.trunk(b).f
        q, r = b.q[1], b.r[1]
        mv = mem.init_value.clone()
        for t in range(int(b.mask[1].sum())):
            k = model.key_emb.weight[q[t]]
            w = torch.softmax(mem.keys @ k, 0)
            kf = torch.tanh(model.key_fc(k))
            assert torch.allclose(f[1, t], torch.tanh(model.summary(torch.cat([w @ mv, kf]))))
            v = model.value_emb.weight[q[t] + c.num_c * r[t]]
            e, a = torch.sigmoid(mem.erase(v)), torch.tanh(mem.add(v))
            mv = mv * (1 - torch.outer(w, e)) + torch.outer(w, a)
    assert_causal(model.float(), random_batch(9, B=3, L=12, seed=8))
    with pytest.raises(ValueError, match="key_fc must be >= 0"):
        build_model(name, num_c=5, key_fc=-1)
