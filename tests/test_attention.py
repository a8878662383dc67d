"""The attention core (kt_lib.nn): every backend equals the reference, outputs and gradients.

The `cuda` backend's programs run on any device, so they are checked here on CPU against the
reference; tests marked `cuda` repeat the checks on a GPU and skip without one.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kt_lib.nn.cpu as cpu_kernels
import kt_lib.nn.dropout as drop
import kt_lib.nn.slots as slots
from kt_lib.audit import audit_causality, random_batch
from kt_lib.models import MODELS, build_model, list_models
from kt_lib.models.dtransformer import sample_key_drop
from kt_lib.nn import (
    MultiHeadAttention,
    attend,
    causal_mask,
    monotonic_attention,
    reference,
    slot_attention,
    use_backend,
)
from kt_lib.nn.backend import choose
from kt_lib.nn.reference import slot as slot_reference
from kt_lib.runtime import precision_context

FAST = ["cpu", "cuda"]  # the backends compared with `reference`
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
cuda_only = pytest.mark.cuda


def _leaves(*shapes, dtype=torch.float64, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).to(device).requires_grad_() for s in shapes]


def _masks(B: int, L: int, device="cpu") -> dict[str, torch.Tensor | None]:
    """No mask, inclusive causal, strict past (row 0 empty), and a ragged batch: each row has
    its own length and the rows past it read nothing."""
    g = torch.Generator().manual_seed(1)
    lens = torch.randint(1, L + 1, (B,), generator=g)
    valid = torch.arange(L) < lens.unsqueeze(1)  # [B, L]
    ragged = causal_mask(L, strict=True) & valid[:, None, None, :] & valid[:, None, :, None]
    return {
        "none": None,
        "causal": causal_mask(L, device),
        "strict": causal_mask(L, device, strict=True),
        "ragged": ragged.to(device),
    }


def _assert_same(out, ref, inputs, names, tol=1e-7):
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=tol)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, g, allow_unused=True)
    want = torch.autograd.grad(ref, inputs, g, allow_unused=True)
    for name, a, b in zip(names.split(), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=tol * 10, msg=name)


# ---------------------------------------------------------------- masks and backend choice


def test_masks():
    inc, strict = causal_mask(4), causal_mask(4, strict=True)
    assert inc.tolist()[1] == [True, True, False, False]
    assert strict.tolist()[1] == [True, False, False, False]
    assert not strict[0].any()


def test_backend_follows_the_device_and_can_be_forced():
    x = torch.zeros(1)
    assert choose(x) == "cpu"
    with use_backend("reference"):
        assert choose(x) == "reference"
        with use_backend(None):
            assert choose(x) == "cpu"
    assert choose(x) == "cpu"
    with pytest.raises(ValueError, match="unknown attention backend 'gpu'"):
        with use_backend("gpu"):
            pass


# ---------------------------------------------------------------- plain attention


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "strict", "ragged"])
@pytest.mark.parametrize("L", [1, 7, 70])
def test_attend_backends_equal_reference(backend, mask_kind, L, poisoned_buffers):
    B, H, Dh = 3, 2, 4
    q, k, v = _leaves((B, H, L, Dh), (B, H, L, Dh), (B, H, L, Dh))
    mask = _masks(B, L)[mask_kind]
    with use_backend("reference"):
        ref, w = attend(q, k, v, mask, need_weights=True)
    with use_backend(backend):
        out, _ = attend(q, k, v, mask)
    _assert_same(out, ref, (q, k, v), "q k v")
    if mask is not None:  # masked keys carry no weight; rows without keys output zeros
        assert (w[..., ~mask.expand_as(w)] == 0).all()
        empty = ~mask.any(-1)
        assert (ref.detach()[empty.expand(B, H, L)] == 0).all()


@pytest.mark.parametrize("mask_kind", ["none", "strict", "ragged", "long", "one-row blocks"])
def test_cpu_dropout_kernel_equals_reference_with_the_same_draws(
    mask_kind, monkeypatch, kernel_draws, poisoned_buffers
):
    """The query-blocked, batch-chunked CPU kernel draws one keep mask per query block: record
    them, and the reference with those draws gives the same outputs and gradients."""
    torch.manual_seed(0)  # the keep-rate bound below holds for these draws, not for every draw
    draws = kernel_draws
    B, H, L, Dh, p = 3, 2, 7, 4, 0.3
    if mask_kind == "long":  # several query blocks and several batch chunks per block
        B, L = 5, 150
        monkeypatch.setattr(cpu_kernels, "_chunks", lambda n, per: (2, [(0, 2), (2, 4), (4, 5)]))
    if mask_kind == "one-row blocks":  # the first block reads no key, the widest is not last
        monkeypatch.setattr(cpu_kernels, "QUERY_BLOCK", 1)
    q, k, v = _leaves((B, H, L, Dh), (B, H, L, Dh), (B, H, L, Dh))
    strict = mask_kind in ("long", "one-row blocks")
    mask = _masks(B, L)["strict" if strict else mask_kind]
    with use_backend("cpu"):
        out, _ = attend(q, k, v, mask, dropout=p)
    blocks = [(0, L, L)] if mask is None else cpu_kernels._query_blocks(mask.reshape(-1, L, L))
    if mask_kind == "long":
        assert len(blocks) == 3 and blocks[0][2] < L  # early blocks skip late keys
    if mask_kind == "one-row blocks":
        assert blocks[0][2] == 0 and len(blocks) == L
    blocks = [b for b in blocks if b[2] > 0]  # a block that reads no key draws nothing
    keep = torch.zeros(B, H, L, L, dtype=torch.float64)
    for (l0, l1, s1), drawn in zip(blocks, draws, strict=True):
        keep[:, :, l0:l1, :s1] = drawn
    p_used = round(p * drop.DROP_LEVELS) / drop.DROP_LEVELS  # the rate draw_keep applies
    ref, w = reference.attention(q, k, v, mask, p_used, keep)
    visible = (w > 0).expand_as(keep)
    assert 0.5 < keep[visible].mean() < 0.9
    _assert_same(out, ref, (q, k, v), "q k v")


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_dropout_is_unbiased_and_keeps_empty_rows_zero(device):
    """The cuda backend's dropout is SDPA's own (no draws to share): its mean over many draws
    is the dropout-free output, its draws differ, and rows without keys stay zero."""
    B, H, L, Dh, p = 2, 2, 6, 4, 0.3
    q, k, v = (
        t.detach() for t in _leaves((B, H, L, Dh), (B, H, L, Dh), (B, H, L, Dh), device=device)
    )
    mask = causal_mask(L, device, strict=True)
    with use_backend("cuda"):
        clean, _ = attend(q, k, v, mask)
        runs = torch.stack([attend(q, k, v, mask, dropout=p)[0] for _ in range(4000)])
    assert not torch.equal(runs[0], runs[1])
    assert (runs[:, :, :, 0] == 0).all()
    torch.testing.assert_close(runs.mean(0), clean, atol=0.05, rtol=0.05)


def test_multihead_paths_agree():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 6, 8)
    a, _ = mha(x, x, x, causal_mask(6), need_weights=False)
    b, w = mha(x, x, x, causal_mask(6), need_weights=True)
    assert torch.allclose(a, b, atol=1e-6) and w.shape == (3, 2, 6, 6)


# ---------------------------------------------------------------- AKT's monotonic attention


def akt_formula(q, k, v, gamma, mask):
    """AKT's attention as its released code writes it (-1e32 fill, dropout off): an
    independent check of the library's reference."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    L, S = scores.shape[-2:]
    with torch.no_grad():
        w0 = scores.masked_fill(~mask, -1e32).softmax(-1) * mask
        cum, total = w0.cumsum(-1), w0.sum(-1, keepdim=True)
        pos = (torch.arange(L)[:, None] - torch.arange(S)[None, :]).abs().to(q.dtype)
        dist = ((total - cum) * pos).clamp(min=0).sqrt()
    effect = (dist * -F.softplus(gamma).view(1, -1, 1, 1)).exp().clamp(1e-5, 1e5)
    w = (scores * effect).masked_fill(~mask, -1e32).softmax(-1) * mask.any(-1, keepdim=True)
    return w @ v, w


@pytest.mark.parametrize("strict", [False, True])
def test_reference_is_akts_formula(strict):
    q, k, v, gamma = _leaves((3, 4, 9, 5), (3, 4, 9, 5), (3, 4, 9, 5), (4,))
    mask = causal_mask(9, strict=strict)
    out, w, _ = reference.monotonic(q, k, v, gamma, mask)
    ref_out, ref_w = akt_formula(q, k, v, gamma, mask)
    torch.testing.assert_close(w, ref_w)
    _assert_same(out, ref_out, (q, k, v, gamma), "q k v gamma")


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("mask_kind", ["causal", "strict", "ragged"])
@pytest.mark.parametrize(
    "L, chunk_rows, query_block", [(9, None, None), (9, 1, 4), (9, 2, 1), (70, None, 16)]
)
def test_monotonic_backends_equal_reference(
    backend, mask_kind, L, chunk_rows, query_block, monkeypatch, poisoned_buffers
):
    if chunk_rows is not None:  # exercise the batch-chunked path of the CPU kernel
        monkeypatch.setattr(cpu_kernels, "CHUNK_ELEMS", chunk_rows * 4 * L * L)
    if query_block is not None:  # several query blocks (1: the strict first row has no key)
        monkeypatch.setattr(cpu_kernels, "QUERY_BLOCK", query_block)
    B, H, Dh = 3, 4, 5
    q, k, v, gamma = _leaves((B, H, L, Dh), (B, H, L, Dh), (B, H, L, Dh), (H,))
    mask = _masks(B, L)[mask_kind]
    with use_backend("reference"):
        ref, ref_w = monotonic_attention(q, k, v, gamma, mask, need_weights=True)
    with use_backend(backend):
        out, w = monotonic_attention(q, k, v, gamma, mask, need_weights=True)
    # a row's total (a sum) and running sum (a cumsum) round differently; the square root
    # turns a 1e-16 remainder into 1e-8, so compare at 1e-6
    torch.testing.assert_close(w.decayed, ref_w.decayed, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(w.undecayed, ref_w.undecayed, rtol=1e-6, atol=1e-7)
    _assert_same(out, ref, (q, k, v, gamma), "q k v gamma")
    readable = mask.expand_as(w.decayed)
    assert (w.decayed[~readable] == 0).all() and (w.undecayed[~readable] == 0).all()


@pytest.mark.parametrize("backend", FAST)
def test_monotonic_dropout_equals_reference_with_the_same_draws(
    backend, monkeypatch, kernel_draws, poisoned_buffers
):
    draws = kernel_draws
    monkeypatch.setattr(cpu_kernels, "QUERY_BLOCK", 4)  # cpu: 3 blocks of query rows
    B, H, L, Dh, p = 3, 4, 9, 5, 0.3
    q, k, v, gamma = _leaves((B, H, L, Dh), (B, H, L, Dh), (B, H, L, Dh), (H,))
    mask = causal_mask(L, strict=True)
    with use_backend(backend):
        out, _ = monotonic_attention(q, k, v, gamma, mask, dropout=p)
    blocks = cpu_kernels._query_blocks(mask[None]) if backend == "cpu" else [(0, L, L)]
    keep = torch.zeros(B, H, L, L, dtype=q.dtype)
    for (l0, l1, s1), drawn in zip(blocks, draws, strict=True):
        keep[:, :, l0:l1, :s1] = drawn
    p_used = round(p * drop.DROP_LEVELS) / drop.DROP_LEVELS
    ref, _, _ = reference.monotonic(q, k, v, gamma, mask, p_used, keep)
    assert (out[:, :, 0] == 0).all()
    _assert_same(out, ref, (q, k, v, gamma), "q k v gamma")


def test_decay_factor_is_clamped_and_the_clamp_passes_no_gradient():
    dist = torch.tensor([0.0, 1.0, 10.0, 1e6]).view(1, 1, 1, 4)
    big = reference.decay_factor(dist, torch.tensor([50.0]))
    assert big.min() == pytest.approx(reference.DECAY_MIN) and big.max() <= 1
    tiny = reference.decay_factor(dist, torch.tensor([-50.0]))
    assert tiny.max() <= reference.DECAY_MAX and tiny.min() > 0.99
    q, k, v = (t.detach().float() for t in _leaves((3, 4, 9, 5), (3, 4, 9, 5), (3, 4, 9, 5)))
    grads = {}
    for backend in ["reference", *FAST]:
        gamma = torch.full((4,), 1e4, requires_grad=True)
        with use_backend(backend):
            out, _ = monotonic_attention(q, k, v, gamma, causal_mask(9))
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(gamma.grad).all()
        grads[backend] = gamma.grad
    for backend in FAST:
        torch.testing.assert_close(grads[backend], grads["reference"])


# ---------------------------------------------------------------- DTransformer's slot attention


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("hide", [0.0, 0.3])
@pytest.mark.parametrize("S", [11, 40])
def test_slot_backends_equal_reference(backend, hide, S):
    torch.manual_seed(0)
    B, K, H, Dh = 3, 4, 2, 5
    r = (3 * torch.randn(B, K, H, 1, S, dtype=torch.float64)).requires_grad_()
    v = torch.randn(B, 1, H, S, Dh, dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor([-1.0, 2.0], dtype=torch.float64, requires_grad=True)
    keep = ~sample_key_drop(torch.ones(B, S, dtype=torch.bool), hide) if hide else torch.ones(1, S)
    keep = keep.bool()
    with use_backend("reference"):
        ref, ref_w = slot_attention(r, v, gamma, keep, need_weights=True)
    with use_backend(backend):
        out, w = slot_attention(r, v, gamma, keep, need_weights=True)
    # 1e-7: both compute sqrt(mass after j) where that mass is 0 up to rounding (sqrt(1e-16))
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)
    top = w.amax(-1)[..., 1:]  # max-out: a row's largest weight becomes 1 (at most x5)
    assert (out[:, :, :, 0] == 0).all() and (top <= 1 + 1e-12).all() and (top > 1 - 1e-12).any()
    _assert_same(out, ref, (r, v, gamma), "r v gamma", tol=1e-7)


@pytest.mark.parametrize("budget", [1, 700, 1 << 30])
@pytest.mark.parametrize("strict", [True, False])
def test_slot_chunks_equal_reference(budget, strict):
    """Block 4 chunked from a memory budget (1 byte: one batch row and one query step per chunk;
    700: several rows and query blocks; 1 GiB: one chunk) equals the reference, outputs and
    gradients, with per-row key hiding (ragged batches), an all-hidden row and the empty row
    t = 0; strict=False (j <= t) too, the setting the causality audit must catch."""
    torch.manual_seed(1)
    B, K, H, S, Dh = 3, 2, 2, 13, 4
    r = (3 * torch.randn(B, K, H, 1, S, dtype=torch.float64)).requires_grad_()
    v = torch.randn(B, 1, H, S, Dh, dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor([-1.0, 3.0], dtype=torch.float64, requires_grad=True)
    keep = ~sample_key_drop(torch.ones(B, S, dtype=torch.bool), 0.3)
    keep[2] = False  # a row whose every key is hidden outputs zeros
    past = causal_mask(S, strict=strict)
    ref, ref_w = slot_reference(r, v, gamma, past & keep.view(B, 1, 1, 1, S))
    out, w = slots.slot(r, v, gamma, keep, strict, need_weights=True, budget=budget)
    assert len(slots.plan(B, K, H, S, budget, strict, 8)) >= (B * S // 2 if budget == 1 else 1)
    torch.testing.assert_close(w, ref_w, rtol=1e-6, atol=1e-7)
    assert (out[2] == 0).all()
    _assert_same(out, ref, (r, v, gamma), "r v gamma", tol=1e-7)
    with pytest.raises(ValueError, match="budget"):
        slots.slot(r, v, gamma, keep, strict, budget=0)


@pytest.mark.parametrize("budget", [1, 700, 1 << 30])
def test_slot_backward_takes_a_contiguous_gradient_and_empty_rows_stay_finite(budget):
    """Block 4's output is a step-major view: a gradient laid out [B, K, H, L, Dh] (contiguous,
    not `randn_like(out)`) must go back through it, equal to the reference's. A row without a
    readable key (t = 0, an all-hidden row) outputs exact zeros and passes no gradient, even
    where the values at its hidden keys are huge (the kernel zeroes those rows' outputs, not
    their weights: 0 * inf must not turn into nan)."""
    torch.manual_seed(3)
    B, K, H, S, Dh = 3, 2, 2, 10, 3
    r = (2 * torch.randn(B, K, H, 1, S, dtype=torch.float64)).requires_grad_()
    v = torch.randn(B, 1, H, S, Dh, dtype=torch.float64)
    v[2] = 1e308  # row 2 hides every key: its uniform weights over these must not leak
    v.requires_grad_()
    gamma = torch.tensor([0.4, 1.2], dtype=torch.float64, requires_grad=True)
    keep = ~sample_key_drop(torch.ones(B, S, dtype=torch.bool), 0.3)
    keep[2] = False
    out, _ = slots.slot(r, v, gamma, keep, budget=budget)
    ref, _ = slot_reference(r, v, gamma, causal_mask(S, strict=True) & keep.view(B, 1, 1, 1, S))
    assert (out[2] == 0).all() and (out[:, :, :, 0] == 0).all()
    g = torch.randn(B, K, H, S, Dh, dtype=torch.float64)  # contiguous, unlike out
    got = torch.autograd.grad(out, (r, v, gamma), g)
    want = torch.autograd.grad(ref, (r, v, gamma), g)
    for name, a, b in zip("r v gamma".split(), got, want, strict=True):
        assert torch.isfinite(a).all(), name
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=name)
    assert (got[1][2] == 0).all() and (got[0][2] == 0).all()


@pytest.mark.parametrize("budget", [1, 900, None])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_slot_projected_equals_plain_composition(budget, dropout):
    """Block 4 fused with its output projection, dropout and residual (the model's path) equals
    the plain composition base + Dropout(Linear(merge_heads(reference slot))), outputs and
    gradients of r, v, gamma, the projection and the slot queries, in float64, with the same
    dropout draws (chunked: 1 byte and 900 bytes per chunk; None: the default budget)."""
    torch.manual_seed(2)
    B, K, H, S, Dh = 2, 3, 2, 9, 3
    D = H * Dh
    r = (2 * torch.randn(B, K, H, 1, S, dtype=torch.float64)).requires_grad_()
    v = torch.randn(B, 1, H, S, Dh, dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor([0.3, 2.0], dtype=torch.float64, requires_grad=True)
    proj = torch.nn.Linear(D, D).double()
    base = torch.randn(K, D, dtype=torch.float64, requires_grad=True)
    keep = ~sample_key_drop(torch.ones(B, S, dtype=torch.bool), 0.3)
    drop_keep = torch.rand(B, S, K, D) > dropout if dropout else None
    scale = 1 / (1 - dropout)
    out, _ = slots.slot_project(
        r, v, gamma, proj.weight, proj.bias, base, keep, drop_keep, scale, budget=budget
    )
    plain, _ = slot_reference(r, v, gamma, causal_mask(S, strict=True) & keep.view(B, 1, 1, 1, S))
    ref = proj(plain.permute(0, 3, 1, 2, 4).reshape(B, S, K, D))
    ref = base + (ref * drop_keep * scale if dropout else ref)
    inputs = (r, v, gamma, proj.weight, proj.bias, base)
    _assert_same(out, ref, inputs, "r v gamma weight bias base", tol=1e-7)


@pytest.mark.parametrize("backend", ["reference", *FAST])
def test_slot_normaliser_reads_no_future_key(backend):
    """GUIDE section 9: a large future score must not move an earlier query's output (the
    fused distance once took a stabilising max over every key, future ones included)."""
    B, K, H, S, Dh = 1, 2, 2, 12, 3
    r, v = (t.detach().float() for t in _leaves((B, K, H, 1, S), (B, 1, H, S, Dh)))
    gamma = torch.tensor([0.5, 1.5])
    keep = torch.ones(1, S, dtype=torch.bool)
    with use_backend(backend):
        base, _ = slot_attention(r, v, gamma, keep)
        for t in range(1, S):
            bumped = r.clone()
            bumped[..., t:] += 60.0  # keys >= t: unreadable for queries <= t
            out, _ = slot_attention(bumped, v, gamma, keep)
            assert torch.equal(out[..., : t + 1, :], base[..., : t + 1, :]), t


# ---------------------------------------------------------------- every model, every backend

NUM_C, NUM_PID = 12, 30


def _tiny(name: str):
    K = 3 if MODELS[name].ordinal else 2
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=NUM_C, num_pid=NUM_PID, K=K)
    from tests.conftest import make_tiny_dataset

    model.prepare(make_tiny_dataset(NUM_C, NUM_PID, K=K))
    return model, random_batch(NUM_C, B=3, L=12, num_pid=NUM_PID, K=K, seed=1)


@pytest.mark.parametrize("backend", ["reference", *FAST])
@pytest.mark.parametrize("name", list_models())
def test_causality_audit_on_every_backend(name, backend):
    model, batch = _tiny(name)
    with use_backend(backend):
        for mode in ("eval", "train"):  # train: dropout and key hiding on, fixed draws
            result = audit_causality(model, batch, steps=[0, 1, 5, 11], mode=mode, atol=1e-6)
            assert result, f"{mode}: {result}"


@pytest.mark.parametrize("name", list_models())
def test_backends_give_the_same_model_outputs(name):
    model, batch = _tiny(name)
    model = model.double().eval()
    with torch.no_grad():
        outs = {}
        for backend in ["reference", *FAST]:
            with use_backend(backend):
                outs[backend] = model(batch).logits
    for backend in FAST:
        torch.testing.assert_close(outs[backend], outs["reference"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list_models())
def test_bf16_trains_and_evaluates_every_model(name):
    model, batch = _tiny(name)
    with torch.no_grad():
        exact = model.eval()(batch).logits
    with precision_context("bf16", "cpu"):
        with torch.no_grad():
            mixed = model(batch).logits.float()
        model.train()
        terms = model.loss(model(batch), batch)
        terms["total"].backward()
    assert torch.isfinite(mixed).all()
    assert (mixed - exact).abs().max() < 0.25  # bfloat16 keeps ~3 significant digits
    assert torch.isfinite(terms["total"])
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@cuda_only
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("name", list_models())
def test_cuda_audit_and_agreement_with_cpu(name):
    model, batch = _tiny(name)
    model = model.double().eval()
    with torch.no_grad():
        on_cpu = model(batch).logits
        model.cuda()
        on_gpu = model(batch.to("cuda")).logits.cpu()
    torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-6, atol=1e-6)
    assert audit_causality(model, batch.to("cuda"), steps=[0, 1, 5, 11])
    with precision_context("bf16", "cuda"):
        model.float().train()
        gb = batch.to("cuda")
        model.loss(model(gb), gb)["total"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
