"""simpleKT and sparseKT: the model against a plain loop, k-sparse selection against a loop,
ties, readable keys only, gradients, presets, and sparseKT as a swap of simpleKT's attention."""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch

from kt_lib.audit import audit_alignment, audit_causality, random_batch
from kt_lib.models import build_model
from kt_lib.models import simplekt as simplekt_module
from kt_lib.nn import cpu as cpu_kernels
from kt_lib.nn import dropout as drop
from kt_lib.nn import reference
from kt_lib.nn.attention import causal_mask
from kt_lib.nn.backend import use_backend
from kt_lib.nn.sparse import sparse_attend

NUM_C, NUM_PID = 12, 36


# ---------------------------------------------------------------- k-sparse selection (reference)


def loop_sparse_weights(a: torch.Tensor, mask: torch.Tensor, selection: str, k: int, ratio: float):
    """Plain Python: per row, rank the readable keys by (-a, index), keep, renormalise."""
    w = torch.zeros_like(a)
    for idx in itertools.product(*(range(n) for n in a.shape[:-1])):
        row, m = a[idx].tolist(), mask[idx].tolist()
        ranked = sorted((j for j in range(len(row)) if m[j]), key=lambda j: (-row[j], j))
        if selection == "topk":
            kept = ranked[:k]
        else:
            kept, total = [], 0.0
            for j in ranked:
                if total >= ratio:
                    break
                kept.append(j)
                total += row[j]
        s = sum(row[j] for j in kept)
        for j in kept:
            w[idx + (j,)] = row[j] / s
    return w


def _heads(B=2, H=3, L=9, Dh=4, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    # strict past and some keys hidden at random: selection must read the readable ones only
    hide = torch.rand(B, 1, L, L, generator=g) < 0.2
    mask = causal_mask(L, strict=True) & ~hide
    return q * scale, k, v, mask


@pytest.mark.parametrize(
    "selection, k, ratio", [("topk", 1, 0.0), ("topk", 3, 0.0), ("soft", 0, 0.5), ("soft", 0, 0.8)]
)
def test_sparse_attention_matches_a_loop(selection, k, ratio):
    q, kk, v, mask = _heads()
    out, w = reference.sparse_attention(q, kk, v, mask, selection, k, ratio)
    a = reference.masked_softmax(q @ kk.transpose(-2, -1) / 2.0, mask.expand(2, 3, 9, 9))
    want = loop_sparse_weights(a, mask.expand_as(a), selection, k, ratio)
    torch.testing.assert_close(w, want)
    torch.testing.assert_close(out, want @ v)
    assert (w[..., 0, :] == 0).all() and (out[..., 0, :] == 0).all()  # t = 0 reads no key
    kept = (w > 0).sum(-1)
    readable = mask.expand_as(a).sum(-1)
    if selection == "topk":
        assert torch.equal(kept, readable.clamp(max=k))
    else:
        assert ((w > 0) <= mask).all() and (kept <= readable).all()
        assert ((a * (w > 0)).sum(-1) >= ratio - 1e-12)[readable > 0].all()


@pytest.mark.parametrize("selection, k, ratio", [("topk", 3, 0.0), ("soft", 0, 0.6)])
def test_pykt_reweighting_is_a_second_softmax_over_the_kept_probabilities(selection, k, ratio):
    """reweight "softmax" (pyKT's sparsekt.py): exp(a) / sum exp(a) over the kept keys, in the
    rows where the selection drops keys (top-k: more than k readable keys; soft: every row)."""
    q, kk, v, mask = _heads()
    out, w = reference.sparse_attention(q, kk, v, mask, selection, k, ratio, reweight="softmax")
    plain, _ = reference.sparse_attention(q, kk, v, mask, selection, k, ratio)
    a = reference.masked_softmax(q @ kk.transpose(-2, -1) / 2.0, mask.expand(2, 3, 9, 9))
    kept = loop_sparse_weights(a, mask.expand_as(a), selection, k, ratio) > 0
    readable = mask.expand_as(a).sum(-1)
    for idx in torch.nonzero(readable > 0).tolist():
        row, keep = a[tuple(idx)], kept[tuple(idx)]
        want = torch.zeros_like(row)
        if selection == "topk" and readable[tuple(idx)] <= k:
            want[keep] = row[keep] / row[keep].sum()  # nothing dropped: pyKT keeps the softmax
        else:
            want[keep] = row[keep].exp() / row[keep].exp().sum()
        torch.testing.assert_close(w[tuple(idx)], want)
    torch.testing.assert_close(out, w @ v)
    flat = readable > (k if selection == "topk" else 1)
    spread = lambda x: (x.amax(-1) - x.masked_fill(x == 0, 2).amin(-1))[flat]  # noqa: E731
    assert (spread(w) <= spread(plain) + 1e-12).all()  # the second softmax flattens
    with pytest.raises(ValueError, match="reweight must be"):
        reference.sparse_attention(q, kk, v, mask, selection, k, ratio, reweight="max")


def test_sparse_selection_ties_are_deterministic():
    a = torch.full((1, 6), 0.25)
    mask = torch.tensor([[True, False, True, True, True, False]])
    assert reference.topk_keep(a, mask, 2).tolist() == [[True, False, True, False, False, False]]
    # ratio 0.5 over equal weights 0.25: exactly two keys (the two earliest) reach it
    keep = reference.threshold_keep(a, mask, 0.5)
    assert keep.tolist() == [[True, False, True, False, False, False]]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 12])
def test_topk_keep_is_the_stable_sort_rank_below_k(k):
    """`topk_keep` (topk, no sort) keeps exactly the keys of stable-sort rank < k, ties and short
    rows included: weights drawn from four values so that ties are everywhere."""
    g = torch.Generator().manual_seed(k)
    a = torch.randint(0, 4, (3, 5, 10, 10), generator=g).double() / 4
    mask = torch.rand(3, 1, 10, 10, generator=g) < 0.7
    mask[0, 0, 3] = False  # a row with no readable key
    mask = mask.expand_as(a)
    want = mask & (reference.sparse_rank(a, mask) < k)
    assert torch.equal(reference.topk_keep(a, mask, k), want)
    assert (reference.topk_keep(a, mask, k).sum(-1) == mask.sum(-1).clamp(max=k)).all()


def test_topk_keep_counts_ties_past_255_keys():
    """Rows of 300 equal weights: the running count of ties must not wrap (uint8 below 256)."""
    a = torch.full((2, 300), 0.5)
    mask = torch.ones(2, 300, dtype=torch.bool)
    keep = reference.topk_keep(a, mask, 3)
    assert keep.sum(-1).tolist() == [3, 3] and keep[:, :3].all()


def test_sparse_selection_never_reads_unreadable_keys():
    q, k, v, mask = _heads(seed=3)
    base_out, base_w = reference.sparse_attention(q, k, v, mask, "topk", 2, 0.0)
    k2, v2 = k.clone(), v.clone()
    hidden = ~mask.expand(2, 3, 9, 9)[..., 0, :].any(-2)  # keys no query may read: the last one
    assert hidden[..., -1].all()
    k2[..., -1, :], v2[..., -1, :] = 1e3, 1e3  # a huge score at a key nobody may read
    for sel in ("topk", "soft"):
        a = reference.sparse_attention(q, k, v, mask, sel, 2, 0.7)
        b = reference.sparse_attention(q, k2, v2, mask, sel, 2, 0.7)
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    assert base_w.shape == (2, 3, 9, 9) and base_out.shape == (2, 3, 9, 4)


def test_sparse_attention_gradients_are_the_renormalised_weights():
    q, k, v, mask = _heads(seed=5)
    for sel, kk, ratio in (("topk", 2, 0.0), ("soft", 0, 0.6)):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        out, _ = reference.sparse_attention(*ins, mask, sel, kk, ratio)
        g_ref = torch.autograd.grad(out.square().sum(), ins)
        ins2 = [t.clone().requires_grad_() for t in (q, k, v)]
        s = ins2[0] @ ins2[1].transpose(-2, -1) / q.shape[-1] ** 0.5
        a = reference.masked_softmax(s, mask.expand_as(s))
        kept = loop_sparse_weights(a.detach(), mask.expand_as(a), sel, kk, ratio) > 0
        ka = a * kept
        w = ka / ka.sum(-1, keepdim=True).clamp(min=1e-300)
        g_want = torch.autograd.grad((w @ ins2[2]).square().sum(), ins2)
        for got, want in zip(g_ref, g_want, strict=True):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("L", [9, 150])  # one query block; several (and several batch chunks)
@pytest.mark.parametrize(
    "selection, k, ratio", [("topk", 3, 0.0), ("topk", 1, 0.0), ("soft", 0, 0.6)]
)
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_cpu_sparse_kernel_equals_the_reference(
    selection, k, ratio, p, L, monkeypatch, kernel_draws, poisoned_buffers
):
    """The fused CPU kernel (query blocks, batch chunks, the selection per chunk, fast dropout)
    against reference.sparse_attention with the kernel's own dropout draws: outputs and
    gradients; also with every key readable (mask None)."""
    draws = kernel_draws
    monkeypatch.setattr(cpu_kernels, "CHUNK_ELEMS", 2 * 3 * 60 * 150)  # two rows a chunk
    B = 5
    q, kk, v, mask = _heads(B=B, L=L, seed=3)
    for m in (mask, None):
        draws.clear()
        ins = [t.clone().requires_grad_() for t in (q, kk, v)]
        with use_backend("cpu"):
            out, _ = sparse_attend(*ins, m, selection, k, ratio, dropout=p)
        keep = None
        if p > 0:
            full = torch.ones(L, L, dtype=torch.bool) if m is None else m
            blocks = cpu_kernels._query_blocks(full.reshape(-1, L, L))
            keep = torch.zeros(B, 3, L, L, dtype=torch.float64)
            for (l0, l1, s1), drawn in zip(blocks, draws, strict=True):
                keep[:, :, l0:l1, :s1] = drawn
            p = round(p * drop.DROP_LEVELS) / drop.DROP_LEVELS  # the rate draw_keep applies
        refs = [t.clone().requires_grad_() for t in (q, kk, v)]
        ref, _ = reference.sparse_attention(*refs, m, selection, k, ratio, p, keep)
        torch.testing.assert_close(out, ref)
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, ins, g)
        for a, b in zip(got, torch.autograd.grad(ref, refs, g), strict=True):
            torch.testing.assert_close(a, b)
        assert not draws if p == 0 else len(draws) == len(blocks)


def test_sparse_attend_refuses_an_unknown_selection():
    q, k, v, mask = _heads()
    for backend in ("cpu", "reference"):
        with use_backend(backend), pytest.raises(ValueError, match="selection must be one of"):
            sparse_attend(q, k, v, mask, "top", 3, 0.0)


def test_sparse_attention_without_sparsity_is_plain_attention():
    q, k, v, mask = _heads(seed=7)
    dense, w = reference.attention(q, k, v, mask)
    for sel, kk, ratio in (("topk", 9, 0.0), ("soft", 0, 1.0)):
        out, ws = sparse_attend(q, k, v, mask, sel, kk, ratio, need_weights=True)
        torch.testing.assert_close(out, dense)
        torch.testing.assert_close(ws, w)


# ---------------------------------------------------------------- simpleKT


def loop_simplekt(model, batch) -> torch.Tensor:
    """simpleKT's forward, the attention as a loop over steps t and keys j < t."""
    c = model.config
    e = model.embed
    x = e.c(batch.q)
    if batch.pid is not None and e.mu is not None:
        x = x + e.mu(batch.pid) * e.d_q(batch.q)
    y = e.c(batch.q) + e.g(batch.r)
    L, D, H = x.shape[1], c.d, c.n_heads
    Dh = D // H
    pos = torch.zeros(L, D)
    for t in range(L):
        for i in range(0, D, 2):
            pos[t, i] = torch.sin(torch.tensor(t / 10000 ** (i / D)))
            pos[t, i + 1] = torch.cos(torch.tensor(t / 10000 ** (i / D)))
    h, v = x + pos, y + pos
    for layer in model.blocks:
        at = layer.attn
        kq, vv = at.k_proj(h), at.v_proj(v)  # [B, L, D]: queries and keys share one projection
        heads = torch.zeros_like(h)
        for t in range(1, L):  # t = 0 reads no interaction: zero output
            for hd in range(H):
                sl = slice(hd * Dh, (hd + 1) * Dh)
                s = (kq[:, t : t + 1, sl] * kq[:, :t, sl]).sum(-1) / Dh**0.5  # [B, t]
                heads[:, t, sl] = (s.softmax(-1).unsqueeze(-1) * vv[:, :t, sl]).sum(1)
        h = layer.ln1(h + at.out_proj(heads))
        h = layer.ln2(h + layer.ffn(h))
    return model.out(torch.cat([h, x], -1)).squeeze(-1)


@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_simplekt_matches_a_loop(num_pid):
    torch.manual_seed(0)
    model = build_model("simplekt", preset="tiny", num_c=NUM_C, num_pid=num_pid, n_blocks=2).eval()
    if num_pid:
        with torch.no_grad():
            model.embed.mu.weight.normal_()  # away from the zero start, so the term shows
    batch = random_batch(NUM_C, B=3, L=8, num_pid=num_pid, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(
            model(batch).logits, loop_simplekt(model, batch), atol=1e-5, rtol=1e-5
        )


def test_simplekt_embeddings_scalar_and_vector_difficulty():
    scalar = build_model("simplekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID)
    vector = build_model("simplekt", preset="pykt", num_c=NUM_C, num_pid=NUM_PID)
    assert scalar.embed.mu.weight.shape == (NUM_PID, 1) and (scalar.embed.mu.weight == 0).all()
    assert vector.embed.mu.weight.shape == (NUM_PID, 256)
    e = scalar.embed
    with torch.no_grad():
        e.mu.weight.normal_()
    q, r, pid = torch.tensor([[1, 4]]), torch.tensor([[1, 0]]), torch.tensor([[6, 0]])
    x, y = e(q, r, pid)
    torch.testing.assert_close(x, e.c(q) + e.mu(pid) * e.d_q(q))
    torch.testing.assert_close(y, e.c(q) + e.g(r))  # the problem term enters x only
    plain = build_model("simplekt", preset="tiny", num_c=NUM_C).embed
    assert plain.mu is None


def test_simplekt_presets_and_parameter_count():
    paper = build_model("simplekt", preset="paper", num_c=100)
    c = paper.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.dropout) == (256, 4, 2, 256, 0.1)
    assert (c.final_fc_dim, c.final_fc_dim2, c.vector_difficulty) == (256, 256, False)
    n = sum(p.numel() for p in paper.parameters())
    # 2 blocks x (3 projections + FFN + 2 LN) = 659,968; MLP 197,377; embeddings 26,112
    assert n == 883_457
    assert build_model("simplekt", preset="pykt", num_c=100).config.vector_difficulty


def test_simplekt_config_checks():
    with pytest.raises(ValueError, match="d_ff must be > 0"):
        build_model("simplekt", preset="tiny", num_c=5, d_ff=0)
    with pytest.raises(ValueError, match="not divisible"):
        build_model("simplekt", preset="tiny", num_c=5, d=10, n_heads=4)


# ---------------------------------------------------------------- sparseKT


def test_sparsekt_is_simplekt_with_another_attention():
    assert "sparse" not in inspect.getsource(simplekt_module).lower()  # the parent names no child
    torch.manual_seed(0)
    dense = build_model("simplekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).eval()
    batch = random_batch(NUM_C, B=3, L=10, num_pid=NUM_PID, seed=4)
    for kw in ({"selection": "topk", "k": 10}, {"selection": "soft", "ratio": 1.0}):
        sparse = build_model("sparsekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw).eval()
        sparse.load_state_dict(dense.state_dict())  # same parameters, nothing more
        with torch.no_grad():
            torch.testing.assert_close(sparse(batch).logits, dense(batch).logits)
    sparse = build_model("sparsekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, k=1).eval()
    sparse.load_state_dict(dense.state_dict())
    with torch.no_grad():
        out = sparse(batch, return_attention=True)
        assert not torch.allclose(out.logits, dense(batch).logits)
    for w in out.attention.values():  # one kept key per query after t = 0
        assert torch.equal(
            (w > 0).sum(-1)[..., 1:], torch.ones_like(w[..., 1:, 0], dtype=torch.long)
        )


@pytest.mark.parametrize(
    "kw",
    [
        {"selection": "soft", "ratio": 0.6},
        {"selection": "topk", "k": 3},
        {"selection": "topk", "k": 3, "reweight": "softmax"},
        {"selection": "soft", "ratio": 0.6, "reweight": "softmax"},
    ],
)
def test_sparsekt_causal_and_aligned(kw):
    torch.manual_seed(0)
    model = build_model("sparsekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw)
    batch = random_batch(NUM_C, B=4, L=20, num_pid=NUM_PID, seed=1)
    assert audit_causality(model, batch, steps=list(range(20)), trials=2)
    assert audit_causality(model, batch, steps=[0, 3, 11, 19], trials=1, mode="train")
    assert audit_causality(model.double(), batch, steps=[0, 5, 19], trials=1, atol=1e-10)
    assert audit_alignment(model.float(), batch)


def test_sparsekt_presets_and_checks():
    paper = build_model("sparsekt", preset="paper", num_c=100)
    c = paper.config
    assert (c.selection, c.k, c.d, c.n_heads, c.n_blocks) == ("topk", 5, 256, 4, 2)
    assert sum(p.numel() for p in paper.parameters()) == 883_457  # selection adds no weights
    soft = build_model("sparsekt", preset="soft", num_c=100).config
    assert (soft.selection, soft.ratio) == ("soft", 0.8)
    assert (c.reweight, build_model("sparsekt", preset="pykt", num_c=9).config.reweight) == (
        "renormalise",
        "softmax",
    )
    for kw, msg in (
        ({"selection": "max"}, "selection must be one of"),
        ({"reweight": "sum"}, "reweight must be one of"),
        ({"k": 0}, "k must be >= 1"),
        ({"ratio": 0.0}, r"ratio must be in \(0, 1\]"),
        ({"ratio": 1.5}, r"ratio must be in \(0, 1\]"),
    ):
        with pytest.raises(ValueError, match=msg):
            build_model("sparsekt", preset="tiny", num_c=5, **kw)
