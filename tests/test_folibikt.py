"""FoLiBiKT: the FoLiBi attention against a plain loop, ALiBi slopes, and FoLiBiKT as AKT with
its attention swapped (zero slopes give AKT's logits on AKT's weights)."""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.models import akt as akt_module
from kt_lib.models import build_model
from kt_lib.models.folibikt import folibi_attention
from kt_lib.nn import reference
from kt_lib.nn.attention import causal_mask
from kt_lib.nn.backend import use_backend

NUM_C, NUM_PID = 12, 36


def loop_folibi(q, k, v, gamma, slopes, mask):
    """Plain Python over (b, h, i): biased scores, AKT's distance and decay, softmax, sum."""
    B, H, L, Dh = q.shape
    S = k.shape[2]
    w = torch.zeros(B, H, L, S, dtype=q.dtype)
    m = mask.expand(B, H, L, S)
    for b, h, i in itertools.product(range(B), range(H), range(L)):
        js = [j for j in range(S) if m[b, h, i, j]]
        if not js:
            continue
        s = {
            j: float(q[b, h, i] @ k[b, h, j]) / math.sqrt(Dh) - float(slopes[h]) * abs(i - j)
            for j in js
        }
        z = sum(math.exp(s[j]) for j in js)
        a = {j: math.exp(s[j]) / z for j in js}
        theta = math.log1p(math.exp(float(gamma[h])))  # softplus
        dec = {}
        for j in js:
            after = sum(a[jj] for jj in js if jj > j)
            dist = math.sqrt(max(abs(i - j) * after, 0.0))
            dec[j] = s[j] * min(max(math.exp(-theta * dist), 1e-5), 1e5)
        z = sum(math.exp(dec[j]) for j in js)
        for j in js:
            w[b, h, i, j] = math.exp(dec[j]) / z
    return w @ v, w


def _heads(seed=0, B=2, H=4, L=7, Dh=3):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    gamma = torch.randn(H, generator=g, dtype=torch.float64)
    return q, k, v, gamma


def test_folibi_attention_matches_a_loop():
    q, k, v, gamma = _heads()
    slopes = reference.alibi_slopes(4).double()
    for strict in (False, True):
        mask = causal_mask(7, strict=strict)
        out, w, u = reference.folibi(q, k, v, gamma, slopes, mask)
        want_out, want_w = loop_folibi(q, k, v, gamma, slopes, mask)
        torch.testing.assert_close(w, want_w)
        torch.testing.assert_close(out, want_out)
        if strict:  # t = 0 reads no key
            assert (w[..., 0, :] == 0).all() and (out[..., 0, :] == 0).all()
    # the undecayed map is the plain softmax of the biased scores
    s = q @ k.transpose(-2, -1) / 3**0.5 + reference.linear_bias(slopes, 7, 7)
    torch.testing.assert_close(u, reference.masked_softmax(s, mask))


def test_folibi_without_bias_is_akt_attention_and_the_bias_favours_recent_keys():
    q, k, v, gamma = _heads(seed=1)
    mask = causal_mask(7)
    out0, w0, _ = reference.folibi(q, k, v, gamma, torch.zeros(4, dtype=torch.float64), mask)
    out_akt, w_akt, _ = reference.monotonic(q, k, v, gamma, mask)
    torch.testing.assert_close(out0, out_akt)
    torch.testing.assert_close(w0, w_akt)
    # identical keys: only the bias tells them apart, the nearest step gets the most weight
    same = torch.ones(1, 4, 7, 3, dtype=torch.float64)
    _, _, u = reference.folibi(same, same, same, gamma, reference.alibi_slopes(4).double(), mask)
    last = u[0, :, 6]  # [H, S] the weights of the last query
    assert (last[:, 1:] > last[:, :-1]).all()


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_fast_backends_match_the_reference_outputs_and_gradients(backend):
    """AKT's fused kernel with the linear bias in its score bias (here on CPU tensors; the
    `cuda` backend is its one-block form) against reference.folibi, float64."""
    q, k, v, gamma = _heads(seed=4, L=70)  # more than one query block of the cpu kernel
    slopes = reference.alibi_slopes(4).double()
    g = torch.Generator().manual_seed(9)
    g_out = torch.randn(2, 4, 70, 3, generator=g, dtype=torch.float64)
    for strict in (False, True):
        mask = causal_mask(70, strict=strict)
        results = []
        for name in ("reference", backend):
            ins = [t.clone().requires_grad_() for t in (q, k, v, gamma)]
            with use_backend(name):
                out, w, u = folibi_attention(*ins[:4], slopes, mask, need_weights=True)
            grads = torch.autograd.grad((out * g_out).sum(), ins)
            results.append((out, w, u, *grads))
        for got, want in zip(results[1], results[0], strict=True):
            # not to the last bit: under a strict mask the reference's mass after the nearest
            # key is sum - cumsum, a rounding residue whose sqrt (~1e-8) the kernel avoids
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_alibi_slopes():
    assert reference.alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    assert reference.alibi_slopes(4).tolist() == [2.0**-i for i in (2, 4, 6, 8)]
    # not a power of two: 4's slopes, then every other slope of 8's
    assert reference.alibi_slopes(6).tolist() == [0.25, 2**-4, 2**-6, 2**-8, 0.5, 0.125]
    bias = reference.linear_bias(torch.tensor([0.5]), 3, 3)
    assert bias[0].tolist() == [[0.0, -0.5, -1.0], [-0.5, 0.0, -0.5], [-1.0, -0.5, 0.0]]


def test_folibikt_is_akt_with_another_attention():
    assert "folibi" not in inspect.getsource(akt_module).lower()  # the parent names no child
    torch.manual_seed(0)
    # float64: AKT runs the cpu backend, FoLiBiKT the reference (float32 rounding differs)
    akt = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    fol = build_model("folibikt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    fol.load_state_dict(akt.state_dict())  # the same parameters, nothing more (slopes are fixed)
    batch = random_batch(NUM_C, B=3, L=12, num_pid=NUM_PID, seed=3)
    with torch.no_grad():
        assert not torch.allclose(fol(batch).logits, akt(batch).logits)
        for layer in (*fol.encoder, *fol.retriever):
            layer.attn.slopes.zero_()
        torch.testing.assert_close(fol(batch).logits, akt(batch).logits)
        maps = fol(batch, return_attention=True).attention
    assert set(maps) == {
        "encoder0",
        "encoder0/undecayed",
        "question0",
        "question0/undecayed",
        "retriever0",
        "retriever0/undecayed",
    }


def test_folibikt_presets_and_long_windows():
    paper = build_model("folibikt", preset="paper", num_c=100)
    c = paper.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.dropout) == (64, 8, 4, 64, 0.3)
    assert (c.final_fc_dim, c.final_fc_dim2) == (512, 256)
    assert len(paper.encoder) == 4 and len(paper.retriever) == 8
    # on 100 skills without problem ids; the bias adds no weight (AKT at these sizes: as many)
    assert sum(p.numel() for p in paper.parameters()) == 423_137
    tiny = build_model("folibikt", preset="tiny", num_c=NUM_C).eval()
    long = random_batch(NUM_C, B=1, L=1100, seed=0)  # pyKT's precomputed bias stops at 1000
    with torch.no_grad():
        assert torch.isfinite(tiny(long).logits).all()


def test_folibikt_causal_over_every_step_in_float64():
    torch.manual_seed(0)
    model = build_model("folibikt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double()
    batch = random_batch(NUM_C, B=4, L=16, num_pid=NUM_PID, seed=2)
    assert audit_causality(model, batch, steps=list(range(16)), trials=1, atol=1e-10)
