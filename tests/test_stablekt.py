"""stableKT: the penumbral score and the biased attention against plain loops, ALiBi slopes,
gradients on repeated vectors, any length, the paper preset's size."""

from __future__ import annotations

import math

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model
from kt_lib.nn.attention import causal_mask
from kt_lib.nn.reference import PENUMBRAL_EPS, alibi_slopes, penumbral_scores, stable_attention

R, GAMMA = 0.5, 0.7


def _sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _penumbral(qv: list[float], kv: list[float]) -> float:
    """The authors' penumbral score for two vectors, scalar by scalar."""
    eps = PENUMBRAL_EPS
    zq, zk = R * _sig(qv[-1]), R * _sig(kv[-1])
    uq, uk = [x * zq for x in qv[:-1]], [x * zk for x in kv[:-1]]
    delta = math.sqrt(sum((a - b) ** 2 for a, b in zip(uq, uk, strict=True)))
    rq, rk = math.sqrt(R**2 - zq**2 + eps), math.sqrt(R**2 - zk**2 + eps)
    if delta <= rq or (delta - rq) ** 2 + zk**2 <= R**2:
        lca = max(zq**2, zk**2, R**2 - ((rq + rk - delta) / 2) ** 2)
    else:
        lca = ((delta**2 + zk**2 - zq**2) / (2 * delta + eps)) ** 2 + zq**2
    return -GAMMA * lca


def test_penumbral_scores_match_a_loop_in_and_out_of_the_cone():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 4, generator=g, dtype=torch.float64) * 3  # far apart: out of cone too
    k = torch.randn(2, 6, 4, generator=g, dtype=torch.float64) * 3
    got = penumbral_scores(q, k, R, GAMMA)
    for b in range(2):
        for i in range(5):
            for j in range(6):
                want = _penumbral(q[b, i].tolist(), k[b, j].tolist())
                assert got[b, i, j].item() == pytest.approx(want, abs=1e-9), (b, i, j)


def test_stable_attention_matches_a_loop():
    g = torch.Generator().manual_seed(1)
    B, H, L, Dh = 2, 4, 6, 3
    q, k, v = (torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    slopes = alibi_slopes(H).double()
    mask = causal_mask(L, strict=True)
    out, w = stable_attention(q, k, v, slopes, R, GAMMA, mask)
    for b in range(B):
        for h in range(H):
            for i in range(L):
                if i == 0:  # no readable key: zero weights and output
                    assert w[b, h, 0].abs().max() == 0 and out[b, h, 0].abs().max() == 0
                    continue
                s = []
                for j in range(i):
                    qi, kj = q[b, h, i].tolist(), k[b, h, j].tolist()
                    raw = (
                        sum(a * c for a, c in zip(qi, kj, strict=True))
                        if h < H // 2
                        else _penumbral(qi, kj)
                    )
                    s.append(raw / math.sqrt(Dh) - slopes[h].item() * (i - j))
                top = max(s)
                e = [math.exp(x - top) for x in s]
                ws = [x / sum(e) for x in e]
                assert w[b, h, i, :i].tolist() == pytest.approx(ws, abs=1e-9)
                o = [sum(ws[j] * v[b, h, j, d].item() for j in range(i)) for d in range(Dh)]
                assert out[b, h, i].tolist() == pytest.approx(o, abs=1e-9)


def test_repeated_vectors_give_finite_gradients():
    q = torch.randn(1, 2, 5, 4, dtype=torch.float64)
    q[:, :, 3] = q[:, :, 1]  # the same question twice: delta = 0 between them
    q.requires_grad_(True)
    out, _ = stable_attention(
        q, q, q, alibi_slopes(2).double(), R, GAMMA, causal_mask(5, strict=True)
    )
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_alibi_slopes():
    assert alibi_slopes(8).tolist() == [2.0 ** -(h + 1) for h in range(8)]
    assert alibi_slopes(4).tolist() == [2.0 ** -(2 * (h + 1)) for h in range(4)]
    six = alibi_slopes(6).tolist()  # 4 heads' slopes, then every other one of 8 heads'
    assert six == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def test_runs_past_any_position_table_and_never_reads_padded_keys():
    torch.manual_seed(0)
    model = build_model("stablekt", preset="tiny", num_c=5).eval()
    with torch.no_grad():
        assert torch.isfinite(model(random_batch(5, B=1, L=1100, ragged=False)).logits).all()
        batch = random_batch(5, B=2, L=8, ragged=False, seed=2)
        batch.mask[:, 2:4] = False  # a gap: those keys are never read by later queries
        base = model(batch).logits
        batch.q[:, 2:4], batch.r[:, 2:4] = 4, 1 - batch.r[:, 2:4]
        assert torch.equal(model(batch).logits[:, 4:], base[:, 4:])


def test_paper_preset_size():
    model = build_model("stablekt", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.final_fc_dim, c.radius, c.gamma) == (
        256,
        8,
        4,
        256,
        256,
        0.5,
        0.7,
    )
    n = sum(p.numel() for p in model.parameters())
    # embeddings 100 x 256 + 2 x 256; 4 blocks of (3 x 256^2 + 3 x 256 attention, 2 LayerNorms,
    # FFN 256-256-256); MLP 512-256-256-1
    block = 3 * (256 * 256 + 256) + 2 * 512 + 2 * (256 * 256 + 256)
    mlp = 512 * 256 + 256 + 256 * 256 + 256 + 257
    assert n == 100 * 256 + 2 * 256 + 4 * block + mlp
    pid = build_model("stablekt", preset="pykt", num_c=100, num_pid=1000)
    assert pid.embed.mu.weight.shape == (1000, 256)


def test_checkpointed_attention_gives_the_same_gradients():
    grads = []
    batch = random_batch(6, B=3, L=10, seed=4)
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = build_model("stablekt", preset="tiny", num_c=6, checkpoint=ckpt).train()
        torch.manual_seed(1)  # the same dropout draws
        model.loss(model(batch), batch)["total"].backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_checkpoint_by_default_on_a_gpu_only(monkeypatch):
    """checkpoint None (the default) recomputes the attention on CUDA tensors only; True and False
    are obeyed on any device."""
    import kt_lib.models.stablekt as stablekt

    calls = []
    monkeypatch.setattr(stablekt, "checkpoint", lambda f, *a, **k: calls.append(1) or f(*a))
    batch = random_batch(6, B=2, L=5, seed=0)
    for setting, want in ((None, 0), (False, 0), (True, 1)):
        calls.clear()
        model = build_model("stablekt", preset="tiny", num_c=6, checkpoint=setting).train()
        assert model.config.checkpoint is setting
        model.loss(model(batch), batch)["total"].backward()
        assert len(calls) == want * model.config.n_blocks, setting


def test_hand_written_penumbral_backward_equals_the_reference():
    """kt_lib.nn.penumbral: values and gradients of the reference's chain, in and out of the cone,
    with ties (repeated vectors give z_q = z_k and delta = 0, where `maximum` splits its
    gradient), and torch's gradcheck."""
    from kt_lib.nn import penumbral

    torch.manual_seed(3)
    q = torch.randn(2, 3, 8, 5, dtype=torch.float64)
    k = torch.randn(2, 3, 9, 5, dtype=torch.float64)
    k[:, :, 4] = q[:, :, 2]  # a key equal to a query: ties and a zero distance
    k[:, :, 5] = k[:, :, 6]  # two equal keys
    for radius, gamma in ((0.5, 0.7), (1.0, 0.1), (3.0, 1.0)):
        qa, ka = q.clone().requires_grad_(), k.clone().requires_grad_()
        qb, kb = q.clone().requires_grad_(), k.clone().requires_grad_()
        want = penumbral_scores(qa, ka, radius, gamma)
        got = penumbral.penumbral_scores(qb, kb, radius, gamma)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        g = torch.randn_like(want)
        for a, b in zip(
            torch.autograd.grad((want * g).sum(), (qa, ka)),
            torch.autograd.grad((got * g).sum(), (qb, kb)),
            strict=True,
        ):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-10)
    qs = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    ks = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b: penumbral.penumbral_scores(a, b, 0.5, 0.7), (qs, ks)
    )


def _pen_reference(q, k, v, slopes, mask, p=0.0, keep=None):
    """The penumbral heads alone, by the reference: softmax(P / sqrt(Dh) - m |i - j|) @ v."""
    from kt_lib.nn.reference import dropped, linear_bias, masked_softmax

    scores = penumbral_scores(q, k, R, GAMMA) / q.shape[-1] ** 0.5
    w = masked_softmax(scores + linear_bias(slopes, q.shape[-2], k.shape[-2]), mask)
    return dropped(w, p, keep) @ v, w


@pytest.mark.parametrize("chunk_rows", [None, 1])
@pytest.mark.parametrize("mask_kind", ["strict", "ragged", "none"])
def test_cpu_penumbral_kernel_equals_the_reference(
    mask_kind, chunk_rows, monkeypatch, poisoned_buffers
):
    """kt_lib.nn.penumbral.penumbral_attention (query blocks, batch chunks, recomputed backward)
    against the reference in float64: values and gradients, with ties (a key equal to a query,
    two equal keys), rows that read nothing, and padded keys."""
    import kt_lib.nn.cpu as cpu_kernels
    from kt_lib.nn.penumbral import penumbral_attention
    from kt_lib.nn.reference import linear_bias

    B, H, L, Dh = 3, 2, 150, 5  # 150 steps: three query blocks of 64 rows, early ones short
    if chunk_rows is not None:
        monkeypatch.setattr(cpu_kernels, "CHUNK_ELEMS", chunk_rows * H * 64 * L)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    k[:, :, 40] = q[:, :, 90]
    k[:, :, 41] = k[:, :, 42]
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    lens = torch.tensor([L, 97, 3])
    valid = torch.arange(L) < lens[:, None]
    mask = {
        "strict": causal_mask(L, strict=True),
        "ragged": causal_mask(L, strict=True) & valid[:, None, None, :],
        "none": None,
    }[mask_kind]
    slopes = alibi_slopes(2 * H).double()[H:]
    out = penumbral_attention(q, k, v, R, GAMMA, mask, 0.0, linear_bias(slopes, L, L))
    ref, _ = _pen_reference(q, k, v, slopes, mask)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-12)
    if mask is not None:
        assert (out[:, :, 0] == 0).all()  # row 0 reads no key
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for name, a, b in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-11, msg=name)


def test_cpu_penumbral_dropout_equals_the_reference_with_the_same_draws(
    kernel_draws, poisoned_buffers
):
    from kt_lib.nn import cpu as cpu_kernels
    from kt_lib.nn import dropout as drop
    from kt_lib.nn.penumbral import penumbral_attention
    from kt_lib.nn.reference import linear_bias

    B, H, L, Dh, p = 2, 2, 130, 4, 0.3
    g = torch.Generator().manual_seed(8)
    q, k, v = (
        torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64).requires_grad_()
        for _ in range(3)
    )
    mask = causal_mask(L, strict=True)
    slopes = alibi_slopes(2 * H).double()[H:]
    out = penumbral_attention(q, k, v, R, GAMMA, mask, p, linear_bias(slopes, L, L))
    blocks = cpu_kernels._query_blocks(mask[None, None])
    assert len(kernel_draws) == len(blocks) == 3
    keep = torch.zeros(B, H, L, L, dtype=torch.float64)
    for (l0, l1, s1), drawn in zip(blocks, kernel_draws, strict=True):
        keep[:, :, l0:l1, :s1] = drawn
    p_used = round(p * drop.DROP_LEVELS) / drop.DROP_LEVELS
    ref, w = _pen_reference(q, k, v, slopes, mask, p_used, keep)
    assert 0.5 < keep[(w > 0).expand_as(keep)].mean() < 0.9
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-12)
    grad = torch.randn_like(ref)
    for a, b in zip(
        torch.autograd.grad(out, (q, k, v), grad),
        torch.autograd.grad(ref, (q, k, v), grad),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-11)


def test_cpu_backend_model_equals_the_reference_backend():
    """The whole model on the `cpu` backend (heads split by kind, two blocked kernels) gives the
    reference backend's logits and gradients without dropout, in float64; with dropout both
    train (the draws differ by design)."""
    from kt_lib.nn import use_backend

    batch = random_batch(7, B=3, L=140, seed=5)
    results = []
    for backend in ("reference", "cpu"):
        torch.manual_seed(0)
        model = build_model("stablekt", preset="tiny", num_c=7, dropout=0.0).double().train()
        with use_backend(backend):
            out = model(batch)
            model.loss(out, batch)["total"].backward()
        results.append((out.logits.detach(), [p.grad for p in model.parameters()]))
    (ref, ref_g), (got, got_g) = results
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-10)
    for a, b in zip(got_g, ref_g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)
