"""SKVMN: identity vectors, hop sources, the Hop-LSTM and the whole forward against plain loops."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.skvmn import HopLSTM, SKVMNConfig, hop_sources, identity_vectors


def test_identity_vectors_follow_the_triangle_and_the_two_levels():
    c = SKVMNConfig(num_c=3)
    w = torch.tensor([0.0, 0.07, 0.08, 0.085, 0.088, 0.3, 0.5, 0.7, 0.95, 1.0]).view(1, 1, -1)
    got = identity_vectors(w, c).flatten().tolist()
    want = []
    for x in w.flatten().tolist():
        m = max(min((x - 0.075) / (0.088 - 0.075), (1.0 - x) / (1.0 - 0.088)), 0.0)
        want.append(0.0 if m < 0.1 else 1.0 if m < 0.6 else 2.0)
    assert got == want
    assert set(want) == {0.0, 1.0, 2.0}  # the example covers every level


def _loop_sources(u, mask):
    B, L, _ = u.shape
    out = torch.empty(B, L, dtype=torch.long)
    for b in range(B):
        for t in range(L):
            out[b, t] = t - 1
            for j in range(t - 1, -1, -1):
                if mask[b, j] and torch.equal(u[b, j], u[b, t]):
                    out[b, t] = j
                    break
    return out


def test_hop_sources_match_a_plain_search():
    g = torch.Generator().manual_seed(0)
    u = torch.randint(0, 3, (4, 15, 2), generator=g).float()  # few patterns: many hops
    mask = torch.rand(4, 15, generator=g) > 0.2
    got = hop_sources(u, mask)
    assert torch.equal(got, _loop_sources(u, mask))
    assert (got < torch.arange(15)).all()  # strictly earlier: -1 is the initial state
    assert (got != torch.arange(15) - 1).any()  # the example hops


def _loop_hop_lstm(m: HopLSTM, x, source):
    """Per student, per step, with nn.LSTMCell and Python lists."""
    out = []
    for b in range(x.shape[0]):
        hs, cs = [m.h0[0]], [m.c0[0]]  # index j + 1: the output of step j
        for t in range(x.shape[1]):
            s = int(source[b, t]) + 1
            h, c = m.cell(x[b, t].unsqueeze(0), (hs[s].unsqueeze(0), cs[s].unsqueeze(0)))
            hs.append(h[0])
            cs.append(c[0])
        out.append(torch.stack(hs[1:]))
    return torch.stack(out)


def _assert_same_outputs_and_gradients(fast, slow, params):
    assert torch.allclose(fast, slow, atol=1e-12)
    g = torch.randn_like(fast)
    for gf, gs in zip(
        torch.autograd.grad((fast * g).sum(), params),
        torch.autograd.grad((slow * g).sum(), params),
        strict=True,
    ):
        assert torch.allclose(gf, gs, atol=1e-10)


def test_hop_lstm_matches_a_per_student_loop_outputs_and_gradients():
    torch.manual_seed(1)
    B, L, d_in, H = 3, 9, 4, 5
    m = HopLSTM(d_in, H).double()
    x = torch.randn(B, L, d_in, dtype=torch.float64, requires_grad=True)
    source = torch.tensor(
        [[-1, 0, 1, 2, 3, 4, 5, 6, 7], [-1, 0, 0, 2, 1, 4, 3, 3, 7], [-1, -1, 1, 0, 3, 0, 2, 6, 1]]
    )
    fast = m(x, source)
    slow = _loop_hop_lstm(m, x, source)
    _assert_same_outputs_and_gradients(fast, slow, [x, *m.parameters()])
    # without hops it is a plain LSTM from the learned initial state
    lstm = nn.LSTM(d_in, H, batch_first=True).double()
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(lstm, f"{name}_l0").data.copy_(getattr(m.cell, name))
    chain = torch.arange(L).expand(B, L) - 1
    init = (m.h0.expand(B, H).unsqueeze(0), m.c0.expand(B, H).unsqueeze(0))
    assert torch.allclose(m(x, chain), lstm(x, tuple(t.contiguous() for t in init))[0])


def _pykt_hop_lstm(m: HopLSTM, x, source):
    """pyKT's Hop-LSTM loop as pyKT writes it (skvmn.py 460-472): one hx for the batch, written
    in place where a step hops; hx is the very tensor stored for the step before."""
    B, L, _ = x.shape
    hx, cx = m.h0.repeat(B, 1), m.c0.repeat(B, 1)
    hidden, cells = [], []
    for i in range(L):
        for j in range(B):
            s = int(source[j, i])
            if 0 <= s < i:  # pyKT lists every earlier match (s = i - 1 writes hx onto itself)
                hx[j, :] = hidden[s][j]
                cx = cx.clone()
                cx[j, :] = cells[s][j]
        hx, cx = m.cell(x[:, i], (hx, cx))
        hidden.append(hx)
        cells.append(cx)
    return torch.stack(hidden, dim=1)


def test_hop_lstm_overwrite_is_pykts_in_place_write():
    """`overwrite=True` (the `hidden_overwrite` diagnostic) equals pyKT's loop, outputs and
    gradients, where hops reach back past the step before, chains of them included; without
    it, only the steps before a long hop differ."""
    torch.manual_seed(4)
    B, L, d_in, H = 3, 9, 4, 5
    m = HopLSTM(d_in, H).double()
    x = torch.randn(B, L, d_in, dtype=torch.float64, requires_grad=True)
    source = torch.tensor(
        [[-1, 0, 1, 2, 3, 4, 5, 6, 7], [-1, 0, 0, 2, 1, 4, 3, 3, 7], [-1, 0, 1, 0, 3, 0, 2, 6, 1]]
    )
    fast = m(x, source, overwrite=True)
    slow = _pykt_hop_lstm(m, x, source)
    _assert_same_outputs_and_gradients(fast, slow, [x, *m.parameters()])
    plain = m(x, source)
    differs = (plain - fast).abs().amax(-1) > 1e-12  # [B, L]
    before_long_hop = torch.zeros(B, L, dtype=torch.bool)
    before_long_hop[:, :-1] = source[:, 1:] < torch.arange(L - 1)
    assert torch.equal(differs[0], torch.zeros(L, dtype=torch.bool))  # never hops back
    assert differs[before_long_hop].all()


def test_hidden_overwrite_reads_the_next_question_and_the_audit_says_so():
    torch.manual_seed(5)
    b = Batch(
        q=torch.tensor([[0, 1, 2, 1, 3, 0, 4]]),
        r=torch.tensor([[1, 0, 1, 1, 0, 0, 1]]),
        mask=torch.ones(1, 7, dtype=torch.bool),
    )
    for overwrite, causal in ((False, True), (True, False)):
        torch.manual_seed(5)
        model = build_model("skvmn", preset="tiny", num_c=6, hidden_overwrite=overwrite).eval()
        assert audit_causality(model, b, steps=list(range(7)), trials=4).passed is causal


def test_hop_lstm_gradcheck():
    torch.manual_seed(2)
    m = HopLSTM(2, 3).double()
    x = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    source = torch.tensor([[-1, 0, 0, 1, 2], [-1, -1, 1, 2, 0]])
    assert torch.autograd.gradcheck(lambda x, h0: m(x, source) + 0 * h0.sum(), (x, m.h0))


def _skvmn_loop(model, q, r):
    """SKVMN for one student, step by step, with the model's weights."""
    c, mem = model.config, model.memory
    mv = mem.init_value.clone()
    fs, us = [], []
    for t in range(len(q)):
        k = model.key_emb.weight[q[t]]
        w = torch.softmax(mem.keys @ k, 0)
        f = torch.tanh(model.summary(torch.cat([w @ mv, k])))
        y = model.value_emb.weight[q[t] + c.num_c * r[t]]
        v = model.write_in(torch.cat([f, y]))
        e, a = torch.sigmoid(mem.erase(v)), torch.tanh(mem.add(v))
        mv = mv * (1 - torch.outer(w, e)) + torch.outer(w, a)
        fs.append(f)
        us.append(identity_vectors(w.view(1, 1, -1), c).flatten())
    u = torch.stack(us).unsqueeze(0)
    source = _loop_sources(u, torch.ones(1, len(q), dtype=torch.bool))
    h = _loop_hop_lstm(model.hop_lstm, torch.stack(fs).unsqueeze(0), source)[0]
    return model.out(h).squeeze(-1), source[0]


def test_skvmn_matches_a_step_by_step_loop_and_hops():
    torch.manual_seed(3)
    # a wide triangle and few slots so that different skills share identity vectors too
    model = build_model("skvmn", preset="tiny", num_c=5, tri_a=0.05, tri_b=0.3).double().eval()
    b = random_batch(5, B=3, L=12, seed=4)
    with torch.no_grad():
        out = model(b)
        for i in range(3):
            n = int(b.mask[i].sum())
            logits, source = _skvmn_loop(model, b.q[i, :n], b.r[i, :n])
            assert torch.allclose(out.logits[i, :n], logits, atol=1e-12)
            assert torch.equal(out.extras["hop_source"][i, :n], source)
    hopped = out.extras["hop_source"][b.mask] != (torch.arange(12).expand(3, 12) - 1)[b.mask]
    assert hopped.any()
    maps = model(b, return_attention=True).attention
    assert maps["hop/h0"].shape == (3, 1, 12, 12) and maps["memory/read"].shape == (3, 12, 4)
    assert torch.equal(maps["hop/h0"][:, 0].argmax(-1)[:, 1:], out.extras["hop_source"][:, 1:])


def test_a_repeated_question_hops_to_its_last_attempt():
    torch.manual_seed(5)
    model = build_model("skvmn", preset="tiny", num_c=6).eval()
    q = torch.tensor([[0, 1, 2, 1, 3, 0, 4]])
    r = torch.tensor([[1, 0, 1, 1, 0, 0, 1]])
    b = Batch(q=q, r=r, mask=torch.ones_like(q, dtype=torch.bool))
    source = model(b).extras["hop_source"][0]
    assert source[3] == 1 and source[5] == 0  # same skill, same weights, same identity
    assert audit_causality(model, b, steps=list(range(7)))


@pytest.mark.parametrize("preset", ["paper", "pykt"])
def test_presets_build_with_their_sizes(preset):
    model = build_model("skvmn", preset=preset, num_c=100)
    c = model.config
    assert (c.d_key, c.d_value, c.d_summary, c.n_slots, c.d_hidden) == (200, 200, 200, 50, 200)
    # DKVMN pykt (240,801) + write_in 400*200+200 + LSTMCell 2*(4*200*200+800) + h0, c0 400
    # - DKVMN's output 201 + 201
    n = sum(p.numel() for p in model.parameters())
    assert n == 240_801 + 80_200 + 321_600 + 400, n


def test_config_refuses_a_bad_triangle():
    with pytest.raises(ValueError, match="tri_a < tri_b < tri_c"):
        build_model("skvmn", num_c=5, tri_a=0.2, tri_b=0.1)
    with pytest.raises(ValueError, match="level_low < level_high"):
        build_model("skvmn", num_c=5, level_low=0.7)


@pytest.mark.parametrize(("option", "value"), [("key_fc", 8), ("init_std", 0.01)])
def test_dkvmn_options_skvmn_does_not_read_are_refused(option, value):
    """SKVMN inherits DKVMN's config: key_fc (its summary splits [read, raw key]) and init_std
    (its write input and Hop-LSTM come after DKVMN's initializer) would be dropped silently."""
    with pytest.raises(ValueError, match=f"{option}={value}: .*leave it"):
        build_model("skvmn", preset="tiny", num_c=9, **{option: value})
    build_model("dkvmn", preset="tiny", num_c=9, **{option: value})  # DKVMN reads both
