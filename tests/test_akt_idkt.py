"""AKT and iDKT: monotonic attention, Rasch embeddings, causality, BKT reference, equivalence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kt_lib.nn.monotonic as mono
from kt_lib.audit import audit_causality, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.data import load_bundle, simulate
from kt_lib.data.dataset import StudentSeq, Window, collate
from kt_lib.data.splits import split_students
from kt_lib.models import build_model
from kt_lib.models.akt import mlp_head
from kt_lib.nn.attention import causal_mask
from kt_lib.nn.embeddings import RaschEmbedding
from kt_lib.reference import build_reference
from kt_lib.reference.bkt import BKTReference
from kt_lib.train import evaluate, fit
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


# ---------------------------------------------------------------- monotonic attention


def akt_formula(q, k, v, gamma, mask):
    """AKT's attention written plainly (its released code, -1e32 fill, dropout off)."""
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


def _qkv(B=3, H=4, L=9, Dh=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g, dtype=dtype).requires_grad_()  # noqa: E731
    return make(B, H, L, Dh), make(B, H, L, Dh), make(B, H, L, Dh), make(H)


def _assert_same_grads(out, ref, inputs, names="q k v gamma"):
    """Gradients of `out` and `ref` w.r.t. `inputs` agree for one random upstream gradient."""
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, g)
    want = torch.autograd.grad(ref, inputs, g)
    for name, a, b in zip(names.split(), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("chunk_rows, query_block", [(None, None), (1, 4), (2, 1), (None, 3)])
def test_monotonic_matches_akt_formula_and_gradients(strict, chunk_rows, query_block, monkeypatch):
    q, k, v, gamma = _qkv()
    if chunk_rows is not None:  # exercise the batch-chunked path
        monkeypatch.setattr(mono, "CHUNK_ELEMS", chunk_rows * 4 * 9 * 9)
    if query_block is not None:  # several query blocks (1: the strict first row has no key)
        monkeypatch.setattr(mono, "QUERY_BLOCK", query_block)
    mask = causal_mask(9, strict=strict)
    ref_out, ref_w = akt_formula(q, k, v, gamma, mask)
    out, w = mono.monotonic_attention(q, k, v, gamma, mask, need_weights=True)
    # AKT's row total (a sum) and running sum (a cumsum) round differently; the square root
    # turns a 1e-16 remainder into 1e-8, so compare at 1e-6
    torch.testing.assert_close(out, ref_out, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(w.decayed, ref_w, rtol=1e-6, atol=1e-7)
    _assert_same_grads(out, ref_out, (q, k, v, gamma))


def test_masked_keys_have_exactly_zero_weight_and_rows_sum_to_one():
    q, k, v, gamma = _qkv(dtype=torch.float32)
    for strict in (False, True):
        mask = causal_mask(9, strict=strict)
        out, w = mono.monotonic_attention(q, k, v, gamma, mask, need_weights=True)
        for weights in (w.decayed, w.undecayed):
            assert torch.isfinite(weights).all()
            assert (weights[..., ~mask] == 0).all()  # a dropped mask would leave mass there
            sums = weights.sum(-1)
            rows = mask.any(-1)
            torch.testing.assert_close(sums[..., rows], torch.ones_like(sums[..., rows]))
        if strict:  # AKT's zero-padded first row: no key, zero weights, zero output, no NaN
            assert (w.decayed[:, :, 0] == 0).all() and (out[:, :, 0] == 0).all()
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v, gamma))
        for t in (q, k, v, gamma):
            t.grad = None


def test_batch_dependent_mask_and_empty_rows():
    q, k, v, gamma = _qkv()
    mask = causal_mask(9).expand(3, 1, 9, 9).clone()
    mask[1, :, 4:, :] = False  # rows of one student with no key at all
    out, w = mono.monotonic_attention(q, k, v, gamma, mask, need_weights=True)
    ref_out, _ = akt_formula(q, k, v, gamma, mask)
    torch.testing.assert_close(out, ref_out)
    assert (out[1, :, 4:] == 0).all() and torch.isfinite(out).all()


def test_decay_factor_is_clamped():
    dist = torch.tensor([0.0, 1.0, 10.0, 1e6]).view(1, 1, 1, 4)
    big = mono.decay_factor(dist, torch.tensor([50.0]))
    assert big.min() == pytest.approx(mono.DECAY_MIN) and big.max() <= 1
    tiny = mono.decay_factor(dist, torch.tensor([-50.0]))
    assert tiny.max() <= mono.DECAY_MAX and tiny.min() > 0.99
    # a very large rate clamps every distant key: attention stays finite and the clamped
    # entries pass no gradient to gamma
    q, k, v, _ = _qkv(dtype=torch.float32)
    gamma = torch.full((4,), 1e4, requires_grad=True)
    out, _ = mono.monotonic_attention(q, k, v, gamma, causal_mask(9))
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(gamma.grad).all()
    ref_gamma = gamma.detach().clone().requires_grad_()
    akt_formula(q.detach(), k.detach(), v.detach(), ref_gamma, causal_mask(9))[0].sum().backward()
    torch.testing.assert_close(gamma.grad, ref_gamma.grad)


def test_dropout_forward_and_gradients_match_akt_formula():
    q, k, v, gamma = _qkv()
    mask, p = causal_mask(9, strict=True), 0.3
    torch.manual_seed(3)
    out = mono.monotonic_attention(q, k, v, gamma, mask, dropout=p)[0]
    torch.manual_seed(3)  # one block, one chunk: the same draw over the visible keys (the
    # strict mask hides the last key from every query)
    keep = torch.empty(3, 4, 9, 8, dtype=q.dtype)
    scale = mono.draw_keep(keep, p)  # 1 keep, 0 drop
    _, w = akt_formula(q, k, v, gamma, mask)
    ref = (w * F.pad(keep, (0, 1)) * scale) @ v
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
    assert (out[:, :, 0] == 0).all()
    _assert_same_grads(out, ref, (q, k, v, gamma))


def test_fast_dropout_rate_scale_and_gradients():
    keep = torch.empty(200_000, dtype=torch.bool)
    torch.manual_seed(0)
    scale = mono.draw_keep(keep, 0.05)
    assert abs(scale - 1 / 0.95) < 1e-4 and abs(keep.float().mean().item() - 0.95) < 0.003
    torch.manual_seed(0)
    as_float = torch.empty(200_000)
    mono.draw_keep(as_float, 0.05)  # the same draw, as 0./1. floats
    assert torch.equal(as_float, keep.float())
    assert mono.draw_keep(keep, 0.0) == 1.0 and keep.all()
    x = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    for module in (mono.Dropout(0.3), mono.ReLUDropout(0.3), mono.ReLUDropout(0.0)):
        module.train()

        def f(t, module=module):
            torch.manual_seed(1)  # the same mask on every call
            return module(t.clone())  # ReLUDropout works in place on a fresh Linear output

        out = f(x)
        kept = out != 0
        base = torch.relu(x) if isinstance(module, mono.ReLUDropout) else x
        t = round(module.p * mono.DROP_LEVELS)  # p is rounded to 1 / 65536
        scale = mono.DROP_LEVELS / (mono.DROP_LEVELS - t)
        torch.testing.assert_close(out[kept], (base * scale)[kept])
        assert torch.autograd.gradcheck(f, (x,))
        module.eval()
        assert torch.equal(module(x), base) and torch.equal(module(x * 1), base)


def test_fused_relu_dropout_matches_standard_modules_without_dropout():
    torch.manual_seed(0)
    head = mlp_head(8, (16, 4), 0.0).double()
    plain = torch.nn.Sequential(head[0], torch.nn.ReLU(), head[2], torch.nn.ReLU(), head[4])
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    got = torch.autograd.grad(head(x).sum(), [x, *head.parameters()])
    want = torch.autograd.grad(plain(x).sum(), [x, *head.parameters()])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_kq_same_shares_the_query_key_projection():
    shared = mono.MonotonicMultiHeadAttention(16, 4, kq_same=True)
    separate = mono.MonotonicMultiHeadAttention(16, 4, kq_same=False)
    assert shared.q_proj is None and separate.q_proj is not None
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(separate) - n(shared) == 16 * 16 + 16
    x = torch.randn(2, 7, 16)
    out, w = shared(x, x, x, causal_mask(7), need_weights=True)
    assert out.shape == (2, 7, 16) and w.decayed.shape == (2, 4, 7, 7)
    assert shared.decay_rates().shape == (4,) and (shared.decay_rates() > 0).all()


# ---------------------------------------------------------------- Rasch embeddings


def test_rasch_embedding_formula_and_penalty():
    emb = RaschEmbedding(num_c=5, d=8, num_pid=7, K=3)
    assert emb.g.weight.shape == (3, 8) and emb.f.weight.shape == (3, 8)
    assert (emb.mu.weight == 0).all()  # AKT starts every problem at its concept
    with torch.no_grad():
        emb.mu.weight.normal_()
    q, r, pid = torch.tensor([[1, 4]]), torch.tensor([[2, 0]]), torch.tensor([[6, 0]])
    out = emb(q, r, pid)
    mu = emb.mu.weight[pid.squeeze(0), 0].view(1, 2, 1)
    c, dq = emb.c(q), emb.d_q(q)
    torch.testing.assert_close(out.x, c + mu * dq)
    torch.testing.assert_close(out.y, c + emb.g(r) + mu * (emb.f(r) + dq))
    mask = torch.tensor([[True, False]])
    pen = RaschEmbedding.l2_penalty(out.mu, mask, 1e-5)
    torch.testing.assert_close(pen, 1e-5 * mu[0, 0, 0] ** 2)
    plain = RaschEmbedding(num_c=5, d=8)
    out = plain(q, torch.tensor([[1, 0]]))
    assert out.mu is None and RaschEmbedding.l2_penalty(out.mu, mask, 1e-5) is None
    torch.testing.assert_close(out.y - out.x, plain.g(torch.tensor([[1, 0]])))


# ---------------------------------------------------------------- AKT


def test_presets_match_the_papers():
    paper = build_model("akt", preset="paper", num_c=10)
    assert (paper.config.d, paper.config.n_heads, paper.config.n_blocks) == (256, 8, 1)
    assert len(paper.encoder) == 1 and len(paper.retriever) == 2
    assert paper.retriever[0].ffn is None and paper.retriever[1].ffn is not None
    dims = [(m.in_features, m.out_features) for m in paper.out if isinstance(m, torch.nn.Linear)]
    assert dims == [(512, 512), (512, 256), (256, 1)]
    big = build_model("idkt", preset="idkt_paper", num_c=10)
    assert big.config.n_blocks == 4 and len(big.encoder) == 4 and len(big.retriever) == 8
    assert set(paper.decay_rates()) == {"encoder0", "question0", "retriever0"}


@pytest.mark.parametrize("name", ["akt", "idkt"])
@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_causality_audit_every_step(name, num_pid):
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=NUM_C, num_pid=num_pid)
    model.prepare(make_tiny_dataset(NUM_C, num_pid))
    batch = random_batch(NUM_C, B=4, L=16, num_pid=num_pid, seed=2)
    result = audit_causality(model, batch, steps=list(range(16)), trials=3)
    assert result, str(result)


@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_first_prediction_depends_on_first_question_only(num_pid):
    torch.manual_seed(0)
    model = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=num_pid).eval()
    batch = random_batch(NUM_C, B=4, L=12, num_pid=num_pid, seed=4, ragged=False)
    base = model(batch).logits[:, 0]
    assert torch.isfinite(model(batch).logits).all()
    g = torch.Generator().manual_seed(5)
    other = batch.clone()
    other.r = torch.randint(0, 2, other.r.shape, generator=g)  # r_0 included
    other.q[:, 1:] = torch.randint(0, NUM_C, (4, 11), generator=g)
    if num_pid:
        other.pid[:, 1:] = torch.randint(0, NUM_PID, (4, 11), generator=g)
    with torch.no_grad():
        assert torch.equal(model(other).logits[:, 0], base)
        other.q[:, 0] = (batch.q[:, 0] + 1) % NUM_C
        assert not torch.equal(model(other).logits[:, 0], base)


def test_bf16_mixed_precision_is_close_causal_and_trains():
    torch.manual_seed(0)
    exact = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).eval()
    mixed = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, bf16=True).eval()
    mixed.load_state_dict(exact.state_dict())
    batch = random_batch(NUM_C, B=4, L=16, num_pid=NUM_PID, seed=2)
    with torch.no_grad():
        a, b = exact(batch).logits, mixed(batch).logits
    assert b.dtype == torch.float32 and (a - b).abs().max() < 0.1
    assert audit_causality(mixed, batch, steps=[0, 1, 7, 15])
    mixed.train()
    mixed.loss(mixed(batch), batch)["total"].backward()
    assert all(torch.isfinite(p.grad).all() for p in mixed.parameters() if p.grad is not None)


def test_attention_maps_decayed_and_undecayed():
    torch.manual_seed(0)
    model = build_model("akt", preset="tiny", num_c=NUM_C).eval()
    batch = random_batch(NUM_C, B=2, L=10, seed=1)
    maps = model(batch, return_attention=True).attention
    assert set(maps) == {f"{n}{s}" for n in model.layer_names() for s in ("", "/undecayed")}
    strict = causal_mask(10, strict=True)
    assert (maps["retriever0"][..., ~strict] == 0).all()
    assert (maps["retriever0"][:, :, 0] == 0).all()
    assert (maps["encoder0"][..., ~causal_mask(10)] == 0).all()


# ---------------------------------------------------------------- iDKT


def _twins(lambdas: float = 0.0):
    torch.manual_seed(0)
    akt = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID)
    idkt = build_model(
        "idkt",
        preset="tiny",
        num_c=NUM_C,
        num_pid=NUM_PID,
        lambda_ref=lambdas,
        lambda_L0=lambdas,
        lambda_T=lambdas,
    )
    missing, unexpected = idkt.load_state_dict(akt.state_dict(), strict=False)
    assert (
        not unexpected
        and missing
        and all(k.split(".")[0] in ("l0_head", "t_head") for k in missing)
    )
    idkt.prepare(make_tiny_dataset(NUM_C, NUM_PID))
    return akt, idkt


def test_idkt_with_zero_lambdas_equals_akt():
    akt, idkt = _twins(0.0)
    batch = random_batch(NUM_C, B=4, L=15, num_pid=NUM_PID, seed=3)
    akt.eval(), idkt.eval()
    with torch.no_grad():
        assert torch.equal(akt(batch).logits, idkt(batch).logits)
    akt.train(), idkt.train()  # same dropout draws too
    torch.manual_seed(9)
    a = akt.loss(akt(batch), batch)
    torch.manual_seed(9)
    out = idkt(batch)
    b = idkt.loss(out, batch)
    assert torch.equal(a["total"], b["total"]) and set(a) == set(b)
    for name in ("L0", "T", "p"):
        assert out.extras[name].shape == (4, 15)
        assert ((out.extras[name] > 0) & (out.extras[name] < 1)).all()


def test_idkt_alignment_terms():
    _, idkt = _twins(0.5)
    batch = random_batch(NUM_C, B=4, L=15, num_pid=NUM_PID, seed=3)
    out = idkt(batch)
    terms = idkt.loss(out, batch)
    assert {"pred", "rasch_l2", "align_ref", "align_L0", "align_T", "total"} <= set(terms)
    parts = sum(v for k, v in terms.items() if k != "total")
    torch.testing.assert_close(terms["total"], parts)
    terms["total"].backward()
    assert idkt.l0_head[0].weight.grad.abs().sum() > 0
    fresh = build_model("idkt", preset="tiny", num_c=NUM_C)
    with pytest.raises(RuntimeError, match="prepare"):
        fresh.loss(fresh(batch), batch)


def test_idkt_checkpoint_round_trips_the_reference(tmp_path):
    _, idkt = _twins(0.1)
    save_model(tmp_path / "m", idkt)
    loaded, _, _ = load_model(tmp_path / "m")
    assert loaded.reference.fitted
    for k, v in idkt.reference.state_dict().items():
        assert torch.equal(v, loaded.reference.state_dict()[k]), k


def test_reference_is_fitted_on_training_students_only():
    bundle = load_bundle(
        None, "synthetic", seed=1, num_students=120, seq_len=30, num_c=6, emission="bkt"
    )
    changed = load_bundle(
        None, "synthetic", seed=1, num_students=120, seq_len=30, num_c=6, emission="bkt"
    )
    for s in changed.test.students:  # a test student's responses must not move the reference
        s.r = 1 - s.r
    states = []
    for b in (bundle, changed):
        torch.manual_seed(0)
        model = build_model("idkt", preset="tiny", dataset=b.train)
        fit(model, b.train, b.valid, epochs=1, progress=False)
        evaluate(model, b.test)
        states.append(model.reference.state_dict())
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k
    train_only = BKTReference().fit(bundle.train).state_dict()
    assert all(torch.equal(train_only[k], states[0][k]) for k in train_only)


# ---------------------------------------------------------------- BKT reference


def test_bkt_recovers_simulated_parameters():
    res = simulate(1000, 100, 10, emission="bkt", num_archetypes=1, seed=0)
    ref = build_reference("bkt").fit(res.data)
    table = ref.frame()
    enough = table["n_obs"] >= 2000
    assert enough.sum() >= 8
    for name in ("L0", "T", "guess", "slip"):
        mae = np.abs(table.loc[enough, name] - getattr(res.truth, name)[enough]).mean()
        assert mae <= 0.05, (name, mae)
    assert (table.guess < 0.5).all() and (table.slip < 0.5).all()
    assert np.all(np.diff(ref.history) > -1e-6 * np.abs(ref.history[1:]))  # EM never goes down


def _naive_filter(ref: BKTReference, q, r):
    """One student, one step at a time, plain Python."""
    p = {k: v.numpy() for k, v in ref.params.items()}
    state = dict(enumerate(p["L0"]))
    out = []
    for c, y in zip(q, r, strict=True):
        m = state[c]
        out.append(m * (1 - p["slip"][c]) + (1 - m) * p["guess"][c])
        like1 = 1 - p["slip"][c] if y else p["slip"][c]
        like0 = p["guess"][c] if y else 1 - p["guess"][c]
        post = m * like1 / (m * like1 + (1 - m) * like0)
        state[c] = post + (1 - post) * p["T"][c]
    return np.array(out)


def test_bkt_filter_is_causal_per_skill_and_matches_a_plain_loop():
    data = make_tiny_dataset(NUM_C, 0, n=60, L=25)
    ref = BKTReference().fit(data)
    batch = collate(data, [Window(i, 0, len(s)) for i, s in enumerate(data.students[:5])])
    tg = ref.targets(batch)
    for b in range(5):
        n = int(batch.mask[b].sum())
        want = _naive_filter(ref, batch.q[b, :n].tolist(), batch.r[b, :n].tolist())
        np.testing.assert_allclose(tg["p"][b, :n].numpy(), want, rtol=1e-5)
        assert (tg["p"][b, n:] == 0).all()
    torch.testing.assert_close(tg["L0"][batch.mask], ref.params["L0"].float()[batch.q[batch.mask]])
    # a response at t (or on another skill) never moves p at t for this skill
    s = StudentSeq(0, np.array([0, 1, 0, 1, 0]), np.array([1, 0, 0, 1, 1]))
    probe = make_tiny_dataset(NUM_C, 0, n=1)
    probe.students = [s]
    base = ref.targets(collate(probe, [Window(0, 0, 5)]))["p"][0]
    s.r = np.array([1, 1, 0, 0, 0])  # changes r_1, r_3 (skill 1) and r_4 (the last step)
    moved = ref.targets(collate(probe, [Window(0, 0, 5)]))["p"][0]
    assert torch.equal(base[[0, 2, 4]], moved[[0, 2, 4]]) and not torch.equal(base[3], moved[3])


def test_bkt_rejects_ordinal_data():
    with pytest.raises(ValueError, match="binary"):
        BKTReference().fit(make_tiny_dataset(NUM_C, 0, K=3))
    with pytest.raises(RuntimeError, match="not fitted"):
        BKTReference().targets(random_batch(NUM_C))


def test_buffer_pool_survives_eviction_with_changing_shapes():
    """Regression: batches of varying length (length bucketing) left an empty stack at the
    front of the pool, and eviction then popped from it (IndexError in AKT's backward)."""
    from kt_lib.nn.monotonic import BufferPool

    like = torch.zeros(1)
    pool = BufferPool(max_bytes=3 * 4 * 100)
    a = pool.take((10, 10), like)
    pool.give(a)
    assert pool.take((10, 10), like) is a and pool.bytes == 0  # reused, its stack removed
    pool.give(*(torch.empty(20, 10) for _ in range(2)))  # over budget: evicts the oldest
    assert 0 < pool.bytes <= pool.max_bytes
    assert all(stack for stack in pool.free.values())


def test_idkt_diagnostics_are_head_reference_correlations():
    """`diagnostics` (reported by experiment runs) = Pearson r of each head with BKT's target;
    training on the alignment pulls the L0/T heads toward the reference."""
    from kt_lib.experiment import run_experiment
    from kt_lib.train import TrainConfig

    sim = simulate(num_students=150, seq_len=40, num_c=6, emission="bkt", seed=0)
    parts = split_students(sim.data, (0.7, 0.1, 0.2), seed=0)
    cfg = TrainConfig(epochs=6, progress=False, lr=3e-3)
    res = run_experiment(
        "idkt", *parts, preset="tiny", train_config=cfg, lambda_L0=5.0, lambda_T=5.0
    )
    diag = res.diagnostics
    df = res.model.interpretable_params(parts[2])
    assert diag["r_L0"] == pytest.approx(np.corrcoef(df["L0"], df["L0_bkt"])[0, 1])
    assert {"r_T", "r_p", "r_L0_skill", "r_T_skill"} <= set(diag)
    assert diag["r_L0_skill"] > 0.5, diag  # (T_bkt barely varies over 6 skills: r_T is noisy)
    assert res.row()["diag_r_T"] == diag["r_T"]
