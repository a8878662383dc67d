"""The native CPU kernels (kt_lib.nn.native): built, cached, and equal to torch's path.

DTransformer's Block 4 runs its elementwise chain in C for float32 on CPU
(kt_lib/nn/native/slot_chain.c). Its reference is the torch chain in kt_lib.nn.slots, itself
tested against `reference.slot` in float64 (tests/test_attention.py); here the two chains run
on the same float32 inputs, outputs and every gradient, so a wrong C line fails.
"""

from __future__ import annotations

import platform
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

import kt_lib.nn.slots as slots
from kt_lib.models.dtransformer import sample_key_drop
from kt_lib.nn import causal_mask, native
from kt_lib.nn.reference import slot as slot_reference


def _toolchain_works() -> bool:
    """Whether this machine's compiler builds a trivial shared library that includes <math.h>
    (a machine without one, or without libc headers, keeps the torch paths: skipped here)."""
    cc = native._compiler()
    if cc is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.c"
        src.write_text("#include <math.h>\nfloat f(float x) { return expf(x); }\n")
        cmd = [cc, *native.FLAGS, "-o", str(Path(tmp) / "t.so"), str(src), "-lm"]
        return subprocess.run(cmd, capture_output=True).returncode == 0


needs_cc = pytest.mark.skipif(not _toolchain_works(), reason="no working C toolchain here")


def _inputs(B=3, K=2, H=2, S=13, Dh=4, seed=1, hide=0.3):
    g = torch.Generator().manual_seed(seed)
    r = 3 * torch.randn(B, K, H, 1, S, generator=g)
    v = torch.randn(B, 1, H, S, Dh, generator=g)
    gamma = torch.tensor([-1.0, 3.0])[:H] if H <= 2 else torch.randn(H, generator=g)
    torch.manual_seed(seed)
    keep = ~sample_key_drop(torch.ones(B, S, dtype=torch.bool), hide)
    keep[-1] = False  # a row whose every key is hidden
    return r, v, gamma, keep


def _run(chain: bool, fn, leaves, *args, **kw):
    leaves = [t.clone().requires_grad_() for t in leaves]
    with native.use(chain):
        out, w = fn(*leaves, *args, **kw)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
        grads = torch.autograd.grad(out, leaves, g)
    return out, w, grads


def _same(a, b, names):
    out_a, w_a, g_a = a
    out_b, w_b, g_b = b
    # float32 on both sides; the C takes exp(x) - 1 where torch takes expm1, and sums in
    # another order: a few ulps, amplified where AKT's sqrt(mass after j) is near 0
    torch.testing.assert_close(out_a, out_b, rtol=1e-4, atol=2e-5)
    if w_a is not None:
        torch.testing.assert_close(w_a, w_b, rtol=1e-4, atol=2e-5)
    for name, x, y in zip(names.split(), g_a, g_b, strict=True):
        assert torch.isfinite(x).all(), name
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, msg=name)


@needs_cc
def test_slot_chain_builds_here():
    """Where a working toolchain exists the chains must build: a failed build (an error in our C)
    would silently leave every DTransformer and AKT on the slower torch chains."""
    for lib in ("slot_chain", "akt_chain"):
        assert native.load(lib) is not None, native.why_not(lib)
    r, *_ = _inputs()
    assert slots._native(r) is not None
    assert slots._native(r.double()) is None  # float64 keeps the torch chain (exact tests)
    with native.use(False):
        assert slots._native(r) is None


@needs_cc
@pytest.mark.parametrize("budget", [1, 700, 1 << 30])
@pytest.mark.parametrize("strict", [True, False])
def test_native_slot_chain_equals_torch_chain(budget, strict):
    """Weights, outputs and the gradients of r, v and gamma, chunked from 1 byte (one row and
    one step a chunk) to one chunk, strict and inclusive masks, key hiding, an all-hidden row."""
    leaves = _inputs()
    keep = leaves[-1]
    args = (keep, strict)
    kw = {"need_weights": True, "budget": budget}
    fast = _run(True, slots.slot, leaves[:3], *args, **kw)
    plain = _run(False, slots.slot, leaves[:3], *args, **kw)
    _same(fast, plain, "r v gamma")
    assert (fast[0][-1] == 0).all() and (fast[2][0][-1] == 0).all()  # all-hidden row


@needs_cc
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_native_projected_chain_equals_torch_chain(dropout):
    """The model's path (projection, dropout, residual) at a DTransformer-like size: gradients of
    r, v, gamma, the projection and the slot queries."""
    B, K, H, S, Dh = 4, 5, 4, 37, 8
    r, v, _, keep = _inputs(B, K, H, S, Dh, seed=3, hide=0.2)
    gamma = torch.tensor([-2.0, 0.0, 1.0, 4.0])
    D = H * Dh
    g = torch.Generator().manual_seed(4)
    weight, bias, base = torch.randn(D, D, generator=g) / 6, torch.randn(D), torch.randn(K, D)
    drop_keep = torch.rand(B, S, K, D, generator=g) > dropout if dropout else None
    args = (keep, drop_keep, 1 / (1 - dropout))
    leaves = (r, v, gamma, weight, bias, base)
    fast = _run(True, slots.slot_project, leaves, *args, budget=3000)
    plain = _run(False, slots.slot_project, leaves, *args, budget=3000)
    _same(fast, plain, "r v gamma weight bias base")


@needs_cc
@pytest.mark.parametrize("wanted", ["v", "r", "gamma", "v gamma"])
def test_native_backward_gives_what_the_torch_chain_does_for_any_subset_of_inputs(wanted):
    """The native backward takes dL/dw and recomputes the weights in one pass when r or gamma
    needs a gradient, and only the weights when v alone does: either way the gradients asked
    for are the torch chain's."""
    r, v, gamma, keep = _inputs(B=3, K=2, H=2, S=17, Dh=4, seed=6)
    names = ("r", "v", "gamma")
    grads = []
    for chain in (True, False):
        inputs = zip(names, (r, v, gamma), strict=True)
        leaves = [t.clone().requires_grad_(n in wanted.split()) for n, t in inputs]
        with native.use(chain):
            out, _ = slots.slot(*leaves, keep, budget=500)
            g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
            asked = [t for t in leaves if t.requires_grad]
            grads.append(torch.autograd.grad(out, asked, g))
    for name, x, y in zip(wanted.split(), *grads, strict=True):
        assert torch.isfinite(x).all() and x.abs().sum() > 0, name
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, msg=name)


@needs_cc
@pytest.mark.parametrize("wanted", ["weight", "v weight", "r bias base", "gamma weight"])
def test_native_projected_backward_for_any_subset_of_inputs(wanted):
    """The same with the projection, dropout and residual (DTransformer's path): whichever of
    r, v, gamma, the projection, its bias and the slot queries need a gradient."""
    B, K, H, S, Dh = 3, 4, 2, 23, 4
    r, v, _, keep = _inputs(B, K, H, S, Dh, seed=8, hide=0.2)
    g = torch.Generator().manual_seed(9)
    gamma, D = torch.tensor([-1.0, 2.0]), H * Dh
    weight, bias, base = torch.randn(D, D, generator=g) / 4, torch.randn(D), torch.randn(K, D)
    drop_keep = torch.rand(B, S, K, D, generator=g) > 0.3
    names = ("r", "v", "gamma", "weight", "bias", "base")
    grads = []
    for chain in (True, False):
        inputs = zip(names, (r, v, gamma, weight, bias, base), strict=True)
        leaves = [t.clone().requires_grad_(n in wanted.split()) for n, t in inputs]
        with native.use(chain):
            out, _ = slots.slot_project(*leaves, keep, drop_keep, 1 / 0.7, budget=900)
            gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
            grads.append(torch.autograd.grad(out, [t for t in leaves if t.requires_grad], gout))
    for name, x, y in zip(wanted.split(), *grads, strict=True):
        assert torch.isfinite(x).all() and x.abs().sum() > 0, name
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, msg=name)


@needs_cc
def test_native_chain_is_the_same_on_any_number_of_threads():
    """The (row, head) pairs split between threads write disjoint outputs: bitwise the same."""
    leaves = _inputs(B=5, K=3, H=2, S=30, Dh=4, seed=5)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(True, slots.slot, leaves[:3], leaves[3], budget=1 << 30)
        torch.set_num_threads(2)
        two = _run(True, slots.slot, leaves[:3], leaves[3], budget=1 << 30)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], two[0])
    assert all(torch.equal(a, b) for a, b in zip(one[2], two[2], strict=True))


@needs_cc
def test_native_chain_keeps_huge_hidden_values_out():
    """Hidden keys with huge scores and values, and a row whose every key is hidden: the chain
    is built with -ffast-math, so nothing infinite may reach it; outputs and gradients stay
    finite, hidden keys get weight exactly 0 and the all-hidden row passes nothing."""
    r, v, gamma, keep = _inputs(B=3, K=2, H=2, S=10, Dh=3, seed=6)
    r = r.masked_fill(~keep.view(3, 1, 1, 1, 10), 1e30)
    v[-1] = 1e30
    out, w, grads = _run(True, slots.slot, (r, v, gamma), keep, need_weights=True)
    assert torch.isfinite(out).all() and (out[-1] == 0).all()
    assert (w.masked_select(~keep.view(3, 1, 1, 1, 10).expand_as(w)) == 0).all()  # exactly
    assert all(torch.isfinite(x).all() for x in grads)
    assert (grads[1][-1] == 0).all()


@needs_cc
def test_library_is_cached_by_source_and_cpu(tmp_path, monkeypatch):
    """A fresh cache builds the library once (one file, no temporary left); a second process
    (here: a cleared in-memory table) loads the cached file instead of compiling again."""
    monkeypatch.setenv("KT_LIB_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_LIBS", {})
    assert native.load("slot_chain") is not None
    files = list((tmp_path / "native").iterdir())
    assert len(files) == 1 and files[0].suffix == ".so"
    stamp = files[0].stat().st_mtime_ns
    monkeypatch.setattr(native, "_LIBS", {})
    assert native.load("slot_chain") is not None
    assert [f.stat().st_mtime_ns for f in (tmp_path / "native").iterdir()] == [stamp]


@needs_cc
@pytest.mark.skipif(  # KERNEL_FLAGS (the define below goes through them) are x86-64's only
    platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 kernel flags"
)
def test_the_vectorised_slot_chain_computes_what_its_scalar_loops_did(tmp_path, monkeypatch):
    """slot_chain's distance loop vectorises (2026-11-29: 2.6-3.6x the kernel's speed) with an
    exact vector sqrt (`KERNEL_FLAGS`), so weights, outputs and gradients equal those of the
    scalar loop it replaced (built with -DKT_SCALAR_DISTANCE), to the bit: runs made before and
    after it agree. With -ffast-math's reciprocal sqrt estimate instead, they would not."""
    leaves = _inputs(B=3, K=2, H=2, S=70)
    kw = {"need_weights": True, "budget": 1 << 30}

    def chain(flags: list[str], cache: str):
        monkeypatch.setenv("KT_LIB_CACHE", str(tmp_path / cache))
        monkeypatch.setattr(native, "_LIBS", {})
        monkeypatch.setattr(native, "KERNEL_FLAGS", {"slot_chain": flags})
        return _run(True, slots.slot, leaves[:3], leaves[-1], True, **kw)

    shipped = native.KERNEL_FLAGS["slot_chain"]
    fast, scalar = chain(shipped, "a"), chain([*shipped, "-DKT_SCALAR_DISTANCE"], "b")
    for x, y in zip([fast[0], fast[1], *fast[2]], [scalar[0], scalar[1], *scalar[2]], strict=True):
        assert torch.equal(x, y)


def test_a_failed_build_falls_back_and_says_why(tmp_path, monkeypatch):
    """Without a working compiler `load` returns None with the reason, and Block 4 takes the
    torch chain: the same numbers."""
    monkeypatch.setenv("KT_LIB_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_LIBS", {})
    monkeypatch.setattr(native, "_WHY", {})
    monkeypatch.setattr(native, "_compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match="torch path runs instead"):
        assert native.load("slot_chain") is None
    assert "no C compiler" in native.why_not("slot_chain")
    r, v, gamma, keep = _inputs()
    assert slots._native(r) is None
    out, _ = slots.slot(r, v, gamma, keep)
    with native.use(False):
        plain, _ = slots.slot(r, v, gamma, keep)
    assert torch.equal(out, plain)


@needs_cc
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_native_chain_is_as_accurate_as_torch_chain(seed):
    """Against the reference in float64, the native chain's float32 error is within twice the
    torch chain's (both are float32; AKT's sqrt(mass after j) amplifies rounding near 0)."""
    r, v, gamma, keep = _inputs(B=3, K=3, H=2, S=40, Dh=4, seed=seed)
    B, S = keep.shape
    mask = causal_mask(S, strict=True) & keep.view(B, 1, 1, 1, S)
    ref, _ = slot_reference(r.double(), v.double(), gamma.double(), mask)
    err = {}
    for chain in (True, False):
        with native.use(chain):
            out, _ = slots.slot(r, v, gamma, keep, budget=2000)
        err[chain] = (out.double() - ref).abs().max().item()
    assert err[True] <= 2 * err[False] + 1e-6, err


@needs_cc
def test_native_chain_steep_scores_take_the_direct_ratios():
    """Scores rising by 40 a step up to step 10, then level: within a query block C_t grows past
    e^80 C_A while the level keys keep ratios near 1, so those rows must take exp(lp_j - lc_t)
    directly instead of ph_j exp(A - lc_t) (which would overflow); the
    result still equals the torch chain, and both equal the reference (the torch chain's gamma
    gradient was nan here: expm1 at keys a query does not read overflowed, and 0 * inf)."""
    B, K, H, S, Dh = 2, 2, 2, 30, 3
    ramp = 40.0 * torch.arange(S, dtype=torch.float32).clamp(max=10)
    r = ramp.expand(B, K, H, 1, S).contiguous()
    r = r + torch.randn(B, K, H, 1, S, generator=torch.Generator().manual_seed(0))
    v = torch.randn(B, 1, H, S, Dh, generator=torch.Generator().manual_seed(1))
    # slow decay: level scores near 400 differ by O(1) after it, so distances matter
    gamma, keep = torch.tensor([-8.0, -6.0]), torch.ones(1, S, dtype=torch.bool)
    fast = _run(True, slots.slot, (r, v, gamma), keep, budget=1 << 30)
    plain = _run(False, slots.slot, (r, v, gamma), keep, budget=1 << 30)
    _same(fast, plain, "r v gamma")
    leaves = [t.double().requires_grad_() for t in (r, v, gamma)]
    ref, _ = slot_reference(*leaves, causal_mask(S, strict=True) & keep.view(1, 1, 1, 1, S))
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7)).double()  # as _run
    want = torch.autograd.grad(ref, leaves, g)
    for name, got, w in zip("r v gamma".split(), fast[2], want, strict=True):
        torch.testing.assert_close(got.double(), w, rtol=1e-3, atol=1e-3, msg=name)  # scale ~10


def _ranges(threads: int) -> list[tuple[int, int]]:
    got = []
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        native.run_split(lambda p0, p1: got.append((p0, p1)), (), 10, ())
    finally:
        torch.set_num_threads(before)
    return sorted(got)


def _ranges_in_child(queue):
    queue.put(_ranges(2))


def test_rows_split_between_threads_and_a_forked_child_makes_its_own():
    """`run_split` covers [0, n) once in torch.get_num_threads() ranges, and a child forked
    after the parent made its thread pool (which it inherits without the threads) still
    finishes (`run_split` makes each process its own pool)."""
    import multiprocessing

    assert _ranges(1) == [(0, 10)]
    assert _ranges(2) == [(0, 5), (5, 10)]  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_ranges_in_child, args=(queue,))
    child.start()
    child.join(30)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0
    assert queue.get(timeout=5) == [(0, 5), (5, 10)]


# ---------------------------------------------------------------- AKT's monotonic attention


def _monotonic_masks(B: int, H: int, L: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    lens = torch.randint(1, L + 1, (B,), generator=g)
    valid = torch.arange(L) < lens.unsqueeze(1)
    ragged = causal_mask(L, strict=True) & valid[:, None, None, :] & valid[:, None, :, None]
    per_head = causal_mask(L) & (torch.rand(B, H, L, L, generator=g) > 0.3)
    return {
        "none": torch.ones(1, 1, L, L, dtype=torch.bool),
        "causal": causal_mask(L)[None, None],
        "strict": causal_mask(L, strict=True)[None, None],  # row 0 reads nothing
        "ragged": ragged,
        "per_head": per_head,
    }


@needs_cc
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("mask_name", ["none", "causal", "strict", "ragged", "per_head"])
def test_native_akt_chain_equals_torch_chain(dropout, mask_name):
    """AKT's attention on the `cpu` backend with the C chain and with torch's (the one tested
    against the reference in float64): outputs and the gradients of q, k, v and theta, with the
    same dropout draws, across query blocks (L = 150 > 64) and masks that broadcast over the
    batch, the heads, or neither."""
    import kt_lib.nn.cpu as cpu_kernels

    B, H, L, Dh = 3, 2, 150, 5
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g) for _ in range(3))
    theta = torch.tensor([0.3, 1.7])
    mask = _monotonic_masks(B, H, L)[mask_name]
    res = []
    for chain in (True, False):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, theta)]
        torch.manual_seed(5)  # the same keep draws on both paths
        with native.use(chain):
            out, _, _ = cpu_kernels.monotonic(*leaves, mask, dropout, False)
            gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            res.append((out, torch.autograd.grad(out, leaves, gout)))
    (out_a, g_a), (out_b, g_b) = res
    torch.testing.assert_close(out_a, out_b, rtol=1e-5, atol=1e-5)
    for name, x, y in zip("q k v theta".split(), g_a, g_b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)


@needs_cc
def test_native_akt_chain_applies_where_it_should():
    """float32 CPU chunks take the C chain; float64 and `need_weights` keep torch's (the
    weights come from there); the switch turns it off."""
    from kt_lib.nn.native.akt import forward_chain

    assert native.load("akt_chain") is not None, native.why_not("akt_chain")
    a = torch.zeros(1, 1, 2, 3)
    bias, neg_pos = torch.zeros(1, 1, 2, 3), torch.zeros(1, 2, 3)
    bufs = [torch.empty(1, 1, 2, 3) for _ in range(3)]
    assert forward_chain(a, bias, neg_pos, None, 1.0, *bufs)
    assert torch.allclose(bufs[0], torch.full_like(a, 1 / 3))  # uniform scores: uniform W
    assert not forward_chain(a.double(), bias.double(), neg_pos.double(), None, 1.0, *bufs)
    with native.use(False):
        assert not forward_chain(a, bias, neg_pos, None, 1.0, *bufs)


@needs_cc
def test_native_akt_chain_clamps_the_decay_as_torch():
    """A fast-decaying head (theta 60) with large scores: far keys' decay is clamped at 1e-5
    and their scaled scores (x * 1e-5, x ~ 100) still move the weights; the theta gradient
    skips them. The C chain must clamp exactly where torch's does."""
    import kt_lib.nn.cpu as cpu_kernels

    B, H, L, Dh = 2, 2, 40, 4
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g) for _ in range(3))
    q = 100 * q
    theta = torch.tensor([60.0, 0.5])
    res = []
    for chain in (True, False):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, theta)]
        with native.use(chain):
            out, _, _ = cpu_kernels.monotonic(*leaves, causal_mask(L)[None, None], 0.0, False)
            res.append((out, torch.autograd.grad(out.sum(), leaves)))
    (out_a, g_a), (out_b, g_b) = res
    torch.testing.assert_close(out_a, out_b, rtol=1e-5, atol=1e-6)
    for name, x, y in zip("q k v theta".split(), g_a, g_b, strict=True):  # scale ~3
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)


@needs_cc
def test_an_unusable_cache_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    """A cache folder that cannot be made (here: under a file; a read-only home on some CI
    runners) must not turn the chains off: the library is built under the system's temporary
    directory instead."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KT_LIB_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(native, "_LIBS", {})
    assert native.cache_dir().parent == Path(tempfile.gettempdir())
    assert native.load("slot_chain") is not None, native.why_not("slot_chain")


@needs_cc
def test_track_names_the_kernels_a_computation_used():
    """A run's provenance: `track` collects the kernels that ran inside it, and none where the
    torch paths ran (float64, or the switch off)."""
    from kt_lib.audit import random_batch
    from kt_lib.models import build_model

    model = build_model("dtransformer", preset="tiny", num_c=5).train()
    batch = random_batch(5, B=2, L=12, seed=0)
    with native.track() as used:
        model(batch)
    assert native.named(used) == "akt_chain,slot_chain"
    with native.track() as used, native.use(False):
        model(batch)
    assert native.named(used) is None
    with native.track() as used:
        model.double()(batch)
    assert used == set()


@needs_cc
@pytest.mark.parametrize("radius", [0.5, 3.0])  # small: most pairs out of the cone; large: in
@pytest.mark.parametrize("mask_name", ["none", "strict", "ragged"])
def test_native_penumbral_lca_equals_torch_chain(radius, mask_name):
    """stableKT's penumbral heads on the `cpu` backend with the lca height in C (penumbral.c)
    and in torch (tested against the reference in float64, tests/test_stablekt.py): outputs and
    the gradients of q, k, v with the same dropout draws, across query blocks (L = 150), with
    ties (a key equal to a query: z_q = z_k and delta at its clamp; two equal keys)."""
    from kt_lib.nn.penumbral import penumbral_attention
    from kt_lib.nn.reference import alibi_slopes, linear_bias

    assert native.load("penumbral") is not None, native.why_not("penumbral")
    B, H, L, Dh = 3, 2, 150, 5
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(B, H, L, Dh, generator=g) for _ in range(3))
    k[:, :, 40] = q[:, :, 90]
    k[:, :, 41] = k[:, :, 42]
    valid = torch.arange(L) < torch.tensor([L, 97, 3])[:, None]
    strict = causal_mask(L, strict=True)
    mask = {"none": None, "strict": strict, "ragged": strict & valid[:, None, None, :]}[mask_name]
    extra = linear_bias(alibi_slopes(2 * H)[H:], L, L)
    res = []
    for chain in (True, False):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        torch.manual_seed(5)  # the same keep draws on both paths
        with native.use(chain), native.track() as used:
            out = penumbral_attention(*leaves, radius, 0.7, mask, 0.2, extra)
            gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            res.append((out, torch.autograd.grad(out, leaves, gout)))
        assert ("penumbral" in used) == chain
    (out_a, g_a), (out_b, g_b) = res
    torch.testing.assert_close(out_a, out_b, rtol=1e-5, atol=1e-5)
    for name, x, y in zip("q k v".split(), g_a, g_b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4, msg=name)
