"""AKT and iDKT: monotonic attention, Rasch embeddings, causality, BKT reference, equivalence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.data import load_bundle, simulate
from kt_lib.data.dataset import StudentSeq, Window, collate
from kt_lib.data.splits import split_students
from kt_lib.models import build_model
from kt_lib.nn.attention import causal_mask
from kt_lib.nn.embeddings import RaschEmbedding
from kt_lib.reference_models import build_reference
from kt_lib.reference_models.bkt import BKTReference
from kt_lib.train import evaluate, fit
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


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
    big = build_model("idkt", preset="design", num_c=10)
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


def test_idkt_diagnostics_are_head_reference_correlations():
    """`diagnostics` (reported by experiment runs) = Pearson r of each head with BKT's target;
    training on the alignment pulls the L0/T heads toward the reference."""
    from kt_lib.runs.experiment import run_model as run_experiment
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


@pytest.mark.parametrize("name", ["akt", "idkt"])
def test_rasch_l2_without_problem_ids_is_refused(name):
    """l2 weighs the penalty on the problems' Rasch difficulties: on skill-only data it would be
    accepted and do nothing (a review); its default stays silent there."""
    with pytest.raises(ValueError, match="l2=0.5 weighs .* no problem ids"):
        build_model(name, preset="tiny", num_c=5, num_pid=0, l2=0.5)
    build_model(name, preset="tiny", num_c=5, num_pid=0)
    build_model(name, preset="tiny", num_c=5, num_pid=12, l2=0.5)
