"""extraKT: the linearly biased attention against a plain loop, the fast backends (a fixed score
bias in `attend`) against the reference, extraKT as AKT with its decay swapped for the bias, the
paper preset's size, long windows, and pyKT's extrakt.py on copied weights (optional)."""

from __future__ import annotations

import inspect
import itertools
import math

import pytest
import torch

import kt_lib.nn.cpu as cpu_kernels
import kt_lib.nn.dropout as drop
from kt_lib.audit import random_batch
from kt_lib.models import akt as akt_module
from kt_lib.models import build_model
from kt_lib.nn import attend, causal_mask, reference, use_backend
from tests.pykt_helpers import akt_layout_weights, pykt_repo_module, unused_in_ours

NUM_C, NUM_PID = 12, 36


def loop_alibi(q, k, v, slopes, mask):
    """Plain Python over (b, h, i): biased scores, softmax over the readable keys, weighted sum."""
    B, H, L, Dh = q.shape
    S = k.shape[2]
    w = torch.zeros(B, H, L, S, dtype=q.dtype)
    m = mask.expand(B, H, L, S)
    for b, h, i in itertools.product(range(B), range(H), range(L)):
        js = [j for j in range(S) if m[b, h, i, j]]
        s = {
            j: float(q[b, h, i] @ k[b, h, j]) / math.sqrt(Dh) - float(slopes[h]) * abs(i - j)
            for j in js
        }
        z = sum(math.exp(x) for x in s.values())
        for j in js:
            w[b, h, i, j] = math.exp(s[j]) / z
    return w @ v, w


def _heads(seed=0, B=2, H=4, L=7, Dh=3, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(B, H, L, Dh, generator=g, dtype=torch.float64).requires_grad_(grad)
        for _ in range(3)
    ]


def _masks(B: int, L: int) -> dict[str, torch.Tensor | None]:
    """No mask, inclusive, strict past (row 0 empty), and ragged rows (rows past a length read
    nothing)."""
    lens = torch.randint(1, L + 1, (B,), generator=torch.Generator().manual_seed(1))
    valid = torch.arange(L) < lens.unsqueeze(1)  # [B, L]
    ragged = causal_mask(L, strict=True) & valid[:, None, None, :] & valid[:, None, :, None]
    return {
        "none": None,
        "causal": causal_mask(L),
        "strict": causal_mask(L, strict=True),
        "ragged": ragged,
    }


def test_alibi_attention_matches_a_loop():
    q, k, v = _heads()
    slopes = reference.alibi_slopes(4).double()
    for strict in (False, True):
        mask = causal_mask(7, strict=strict)
        out, w = reference.alibi_attention(q, k, v, slopes, mask)
        want_out, want_w = loop_alibi(q, k, v, slopes, mask)
        torch.testing.assert_close(w, want_w)
        torch.testing.assert_close(out, want_out)
        if strict:  # t = 0 reads no key
            assert (w[..., 0, :] == 0).all() and (out[..., 0, :] == 0).all()


def test_alibi_without_slopes_is_plain_attention_and_the_bias_favours_recent_keys():
    q, k, v = _heads(seed=1)
    mask = causal_mask(7)
    out0, w0 = reference.alibi_attention(q, k, v, torch.zeros(4, dtype=torch.float64), mask)
    out, w = reference.attention(q, k, v, mask)
    torch.testing.assert_close(out0, out)
    torch.testing.assert_close(w0, w)
    # identical keys: only the bias tells them apart, the nearest step gets the most weight
    same = torch.ones(1, 4, 7, 3, dtype=torch.float64)
    _, u = reference.alibi_attention(same, same, same, reference.alibi_slopes(4).double(), mask)
    last = u[0, :, 6]  # [H, S] the weights of the last query
    assert (last[:, 1:] > last[:, :-1]).all()
    # and a steeper slope forgets faster: head 0 (slope 1/4) puts more on the last key than head 3
    assert last[0, -1] > last[3, -1]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "strict", "ragged"])
def test_fast_backends_with_a_score_bias_match_the_reference(backend, mask_kind):
    """`attend(..., bias=)` on the cpu (SDPA with a float mask) and cuda backends (here on CPU
    tensors) against reference.alibi_attention, outputs and gradients, float64; rows without a
    readable key output zeros."""
    B, L = 2, 70  # more than one query block of the cpu kernel
    q, k, v = _heads(seed=4, B=B, L=L, grad=True)
    slopes = reference.alibi_slopes(4).double()
    bias = reference.linear_bias(slopes, L, L)
    mask = _masks(B, L)[mask_kind]
    ref, _ = reference.alibi_attention(q, k, v, slopes, mask)
    with use_backend(backend):
        out, _ = attend(q, k, v, mask, bias=bias)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
    g = torch.randn_like(out)
    for a, b in zip(
        torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    if mask is not None:
        empty = ~mask.expand(B, 4, L, L).any(-1)
        assert (out.detach()[empty] == 0).all()


@pytest.mark.parametrize("L", [7, 150])  # one query block; several (the bias sliced per block)
@pytest.mark.parametrize("mask_kind", ["none", "strict", "ragged"])
def test_cpu_dropout_kernel_with_a_score_bias_equals_the_reference_with_the_same_draws(
    mask_kind, L, kernel_draws, poisoned_buffers
):
    """The training kernel (query blocks, dropout draws per block) with the bias added: record
    its draws, and reference.alibi_attention with them gives the same outputs and gradients."""
    draws = kernel_draws
    B, p = 3, 0.3
    q, k, v = _heads(seed=2, B=B, L=L, grad=True)
    slopes = reference.alibi_slopes(4).double()
    mask = _masks(B, L)[mask_kind]
    with use_backend("cpu"):
        out, _ = attend(q, k, v, mask, dropout=p, bias=reference.linear_bias(slopes, L, L))
    blocks = [(0, L, L)] if mask is None else cpu_kernels._query_blocks(mask.reshape(-1, L, L))
    keep = torch.zeros(B, 4, L, L, dtype=torch.float64)
    for (l0, l1, s1), drawn in zip(blocks, draws, strict=True):
        keep[:, :, l0:l1, :s1] = drawn
    p_used = round(p * drop.DROP_LEVELS) / drop.DROP_LEVELS  # the rate draw_keep applies
    ref, _ = reference.alibi_attention(q, k, v, slopes, mask, p_used, keep)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
    g = torch.randn_like(out)
    for a, b in zip(
        torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _akt_weights_for_extrakt(akt_state: dict) -> dict:
    """AKT's parameters under extraKT's names: the shared projection is k_proj in simpleKT's
    attention, q_proj in AKT's; extraKT has no decay rates."""
    return {
        k.replace(".attn.q_proj.", ".attn.k_proj."): v
        for k, v in akt_state.items()
        if not k.endswith(".attn.gamma")
    }


def test_extrakt_is_akt_with_the_decay_swapped_for_the_bias():
    """With every AKT decay rate at softplus(-1e4) = 0 (decay factor exactly 1) AKT's attention is
    plain attention; extraKT on the same weights with its slopes at zero gives AKT's logits, and
    with its slopes it does not."""
    assert "extrakt" not in inspect.getsource(akt_module).lower()  # the parent names no child
    torch.manual_seed(0)
    akt = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    ext = build_model("extrakt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    with torch.no_grad():
        for layer in (*akt.encoder, *akt.retriever):
            layer.attn.gamma.fill_(-1e4)
    ext.load_state_dict(_akt_weights_for_extrakt(akt.state_dict()))  # strict: nothing else
    batch = random_batch(NUM_C, B=3, L=12, num_pid=NUM_PID, seed=3)
    with torch.no_grad(), use_backend("reference"):
        want = akt(batch)
        biased = ext(batch).logits
        for layer in (*ext.encoder, *ext.retriever):
            layer.attn.slopes.zero_()
        got = ext(batch)
        maps = ext(batch, return_attention=True).attention
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.losses["rasch_l2"], want.losses["rasch_l2"])
    assert not torch.allclose(biased, want.logits, atol=1e-4)
    assert set(maps) == {"encoder0", "question0", "retriever0"}  # no undecayed twin: no decay
    assert ext.decay_rates() == {}


def test_paper_preset_size_long_windows_and_refused_settings():
    model = build_model("extrakt", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.dropout) == (256, 4, 4, 256, 0.05)
    assert (c.final_fc_dim, c.final_fc_dim2, c.kq_same) == (512, 256, True)
    assert len(model.encoder) == 4 and len(model.retriever) == 8
    # embeddings 100 x 256 + 2 x 256; each layer: shared q/k, v and output projections (3 x
    # (256^2 + 256)) and a LayerNorm, plus an FFN 256-256-256 and a second LayerNorm in the 4
    # encoder and 4 cross-attention layers (not in the 4 question layers); MLP 512-512-256-1
    attn = 3 * (256 * 256 + 256) + 512
    ffn = 2 * (256 * 256 + 256) + 512
    mlp = 512 * 512 + 512 + 512 * 256 + 256 + 257
    want = 100 * 256 + 2 * 256 + 12 * attn + 8 * ffn + mlp
    assert sum(p.numel() for p in model.parameters()) == want == 3_851_777
    tiny = build_model("extrakt", preset="tiny", num_c=NUM_C).eval()
    long = random_batch(NUM_C, B=1, L=1100, seed=0)  # pyKT's precomputed bias stops at 1000
    with torch.no_grad():
        assert torch.isfinite(tiny(long).logits).all()
    with pytest.raises(ValueError, match="kq_same=False is not implemented"):
        build_model("extrakt", preset="tiny", num_c=NUM_C, kq_same=False)


def test_matches_pykts_extrakt_on_copied_weights():
    """pyKT's extrakt.py (emb_type "qid"; $PYKT_SRC, einops installed) and ours on the same
    weights give the same predictions at every step, float64 (pyKT's .cuda() calls made no-ops
    on a CPU-only machine)."""
    mod = pykt_repo_module("extrakt")
    from peer_models import cuda_calls_in_place

    torch.manual_seed(0)
    ours = build_model("extrakt", preset="tiny", num_c=NUM_C, final_fc_dim2=256)
    c = ours.config
    with cuda_calls_in_place("extrakt"):
        theirs = mod.extraKT(
            NUM_C, 0, c.d, c.n_blocks, 0.1, d_ff=c.d_ff, final_fc_dim=c.final_fc_dim,
            num_attn_heads=c.n_heads,
        )  # fmt: skip
    ours.load_state_dict(akt_layout_weights(theirs, ours))  # strict: every tensor of ours
    # what pyKT has beyond ours: every layer's decay rates (unread under "qid") and the FFN of
    # each question layer (retriever layers 0, 2, ...: apply_pos=False, never run)
    unused = {
        *(f"model.blocks_{s}.{i}.masked_attn_head.gammas" for s, n in ((1, 1), (2, 2))
          for i in range(n)),
        *(f"model.blocks_2.0.{m}.{p}" for m in ("linear1", "linear2", "layer_norm2")
          for p in ("weight", "bias")),
    }  # fmt: skip
    assert unused_in_ours(theirs, ours) == unused
    assert sum(p.numel() for p in theirs.parameters()) - sum(
        p.numel() for n, p in theirs.named_parameters() if n in unused
    ) == sum(p.numel() for p in ours.parameters())
    ours, theirs = ours.double().eval(), theirs.double().eval()
    batch = random_batch(NUM_C, B=3, L=25, seed=5, ragged=False)
    with torch.no_grad():
        want, _ = theirs(batch.q, batch.r)
        got = torch.sigmoid(ours.predict_logits(ours.trunk(batch)))  # forward casts to float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_attend_refuses_a_score_bias_that_requires_grad():
    """The cpu training kernel gives the bias no gradient: a learned bias is refused on every
    backend, rather than learned everywhere but in CPU training."""
    q, k, v = _heads(seed=5, B=1, L=6, grad=False)
    bias = torch.zeros(4, 6, 6, dtype=torch.float64, requires_grad=True)
    for backend in ("reference", "cpu"):
        with use_backend(backend), pytest.raises(ValueError, match="requires grad"):
            attend(q, k, v, None, dropout=0.2, bias=bias)
    with use_backend("cpu"):
        out, _ = attend(q, k, v, None, bias=bias.detach())
    assert torch.isfinite(out).all()
