"""DTransformer and SimAKT: approach none is DTransformer, causality with banks and
self-exclusion, presets, registry errors, custom heads, influence weights."""

from __future__ import annotations

import warnings

import pytest
import torch

from kt_lib.audit import audit_causality, perturb_future, random_batch
from kt_lib.heads.inter import BaseSimilarityHead
from kt_lib.heads.simakt_config import parse_head
from kt_lib.memory import FoldAssignment
from kt_lib.models import build_model
from kt_lib.models.simakt import bank_rebuilder
from tests.simakt_support import (
    NUM_C,
    NUM_PID,
    OTHER_HEADS,
    SIZES,
    L,
    batch_of,
    dual,
    one_fold_batch,
    simakt,
    students,
)

# -- DTransformer / approach none ------------------------------------------------------------


@pytest.mark.parametrize("similarity", [None, "none", {"approach": "none"}])
@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_approach_none_is_dtransformer_exactly(similarity, num_pid):
    torch.manual_seed(0)
    dt = build_model("dtransformer", num_c=NUM_C, num_pid=num_pid, **SIZES)
    sim = build_model("simakt", num_c=NUM_C, num_pid=num_pid, similarity=similarity, **SIZES)
    assert list(sim.state_dict()) == list(dt.state_dict())
    sim.load_state_dict(dt.state_dict())  # strict
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(sim) == count(dt)
    batch = random_batch(NUM_C, B=5, L=L, num_pid=num_pid, seed=3)
    sim.prepare(students(num_pid=num_pid))  # nothing to build: still identical
    dt.eval(), sim.eval()
    with torch.no_grad():
        assert torch.equal(sim(batch).logits, dt(batch).logits)
        a, b = sim(batch, return_attention=True), dt(batch, return_attention=True)
        assert all(torch.equal(a.attention[k], b.attention[k]) for k in b.attention)
    dt.train(), sim.train()  # key hiding and dropout draw the same random numbers
    torch.manual_seed(7)
    out_dt = dt(batch)
    torch.manual_seed(7)
    out_sim = sim(batch)
    assert torch.equal(out_dt.logits, out_sim.logits)


def test_same_seed_same_initialisation_as_dtransformer():
    torch.manual_seed(4)
    dt = build_model("dtransformer", num_c=NUM_C, num_pid=NUM_PID, **SIZES)
    torch.manual_seed(4)
    sim = build_model("simakt", num_c=NUM_C, num_pid=NUM_PID, similarity="none", **SIZES)
    assert all(
        torch.equal(a, b)
        for a, b in zip(dt.state_dict().values(), sim.state_dict().values(), strict=True)
    )


def test_block4_strict_mask_is_what_keeps_it_causal(monkeypatch):
    """Audit power: an inclusive Block 4 lets r_t reach the prediction at t, and is caught."""
    torch.manual_seed(0)
    model = build_model("dtransformer", num_c=NUM_C, num_pid=NUM_PID, **SIZES).eval()
    batch = random_batch(NUM_C, B=4, L=L, num_pid=NUM_PID, seed=1)
    assert audit_causality(model, batch)
    monkeypatch.setattr(model.block4, "strict_slots", False)
    assert not audit_causality(model, batch)


def test_contrastive_loss_is_causal():
    """Per-step contrastive terms at steps <= t ignore r[t:], q[t+1:] (fixed augmentation)."""
    torch.manual_seed(0)
    model = build_model(
        "dtransformer", num_c=NUM_C, num_pid=NUM_PID, contrastive=True, **SIZES
    ).eval()
    batch = random_batch(NUM_C, B=6, L=L, num_pid=NUM_PID, seed=2)
    base, keep = model.contrastive_terms(batch, generator=torch.Generator().manual_seed(5))
    assert keep.any() and torch.isfinite(base).all()
    g = torch.Generator().manual_seed(9)
    for t in (0, 2, 5, 9, base.shape[1] - 1):
        pert = perturb_future(batch, t, NUM_C, NUM_PID, 2, g)
        out, _ = model.contrastive_terms(pert, generator=torch.Generator().manual_seed(5))
        diff = (out - base)[:, : t + 1][keep[:, : t + 1]]
        assert diff.abs().max() <= 1e-5, t
    model.train()
    terms = model.loss(model(batch), batch)
    assert "cl" in terms and torch.isfinite(terms["total"])
    terms["total"].backward()


def test_contrastive_checkpointing_gives_the_plain_gradients(monkeypatch):
    """The augmented views' encoders are recomputed in backward (activation checkpointing): in
    train mode, with dropout and key hiding drawn from the global RNG, loss and gradients equal
    those of keeping their activations (same seed), and the RNG ends in the same state."""

    def run(plain: bool):
        torch.manual_seed(0)
        model = build_model(
            "dtransformer", num_c=NUM_C, num_pid=NUM_PID, contrastive=True, **SIZES
        ).train()
        if plain:
            monkeypatch.setattr(model, "_knowledge", lambda b: model.encode(b).z)
        batch = random_batch(NUM_C, B=6, L=L, num_pid=NUM_PID, seed=2)
        torch.manual_seed(3)
        terms = model.loss(model(batch), batch)
        terms["total"].backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return terms["cl"].detach(), grads, torch.rand(3)

    cl, grads, after = run(plain=False)
    cl_ref, grads_ref, after_ref = run(plain=True)
    torch.testing.assert_close(cl, cl_ref)
    assert len(grads) == len(grads_ref)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert torch.equal(after, after_ref)


# -- causality with banks and self-exclusion --------------------------------------------------


@pytest.mark.parametrize(
    "similarity",
    [dual(0.0), dual(1.0), dual(strategy="content"), "tiny", dual(0.5, encoder="block2")],
)
def test_causality_audit_with_banks(similarity):
    from kt_lib.models.simakt import TINY_SIMILARITY

    train = students()
    model = simakt(TINY_SIMILARITY if similarity == "tiny" else similarity, train)
    outsiders = random_batch(NUM_C, B=4, L=L, num_pid=NUM_PID, seed=5)
    outsiders.uid = torch.arange(1000, 1004)
    for batch in (batch_of(train, range(6)), outsiders):
        result = audit_causality(model, batch, steps=[0, 4, 9, 15])
        assert result, str(result)


@pytest.mark.parametrize(
    "similarity",
    [dual(1.0), dual(0.0), dual(strategy="content"), dual(0.5, encoder="block2"), OTHER_HEADS],
)
def test_self_exclusion_rebuilt_bank(similarity):
    """A training student's future changes, the banks are rebuilt: its past predictions hold."""
    train = students()
    model = simakt(similarity, train)
    rebuild = bank_rebuilder(train)
    for fold in range(model.folds.n_folds):
        batch = one_fold_batch(model, train, fold=fold)
        result = audit_causality(model, batch, steps=[1, 6, 12], trials=1, rebuild=rebuild)
        assert result, str(result)


def test_reading_own_fold_bank_is_caught(monkeypatch):
    """Audit power: a student reading the bank built with its own log fails the rebuild audit."""
    train = students()
    model = simakt(dual(1.0), train)
    batch = one_fold_batch(model, train)
    rebuild = bank_rebuilder(train)

    def own_fold(uid):  # the bank that contains the student (2 folds: the other index)
        folds = FoldAssignment.fold_of(model.folds, uid)
        return 1 - folds

    def rebuild_reading_own_fold(m, b):  # rebuilding makes a new FoldAssignment: patch it
        rebuild(m, b)
        monkeypatch.setattr(m.folds, "fold_of", own_fold)

    assert audit_causality(model, batch, steps=[2, 6, 10], trials=1, rebuild=rebuild)
    assert not audit_causality(
        model, batch, steps=[2, 6, 10], trials=1, rebuild=rebuild_reading_own_fold
    )


def test_banks_hold_other_folds_only():
    train = students(n=40)
    model = simakt(dual(0.3), train)
    folds = model.folds
    for head in model.inter.heads:
        for f, bank in enumerate(head.banks):
            member_folds = folds.fold_of(bank.uids)
            assert (member_folds != f).all()  # no student of fold f in bank f
    knn = model.inter.heads[1].banks
    assert all(len(b.uids) == 8 for b in knn)
    own = folds.fold_of(torch.as_tensor(train.uids))
    assert torch.bincount(own).tolist() == [20, 20]  # balanced
    outsiders = torch.tensor([1000, 1001, 1002])
    assert folds.fold_of(outsiders).tolist() == [0, 1, 0]  # uid % F


# -- presets, configs, registry errors --------------------------------------------------------


def test_k_larger_than_the_bank_at_build_time():
    knn = {"type": "knn", "memory_size": 30, "k_neighbors": 5}
    model = simakt({"intra_heads": 7, "inter_heads": [knn]})
    train = students(n=41)
    with pytest.warns(UserWarning, match="memory_size=30 but only 2. training students"):
        model.prepare(train)  # folds of 21 and 20: each bank keeps everyone, padded to 21
    assert sorted(len(b.uids) for b in model.inter.heads[0].banks) == [20, 21]
    assert audit_causality(model, batch_of(train, range(4)), steps=[3, 9])
    model = simakt({"intra_heads": 7, "inter_heads": [{**knn, "k_neighbors": 25}]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(
            ValueError,
            match="k_neighbors=25 is larger than the bank: head 'knn'"
            " has a fold bank of 20 entries",
        ):
            model.prepare(students(n=40))
    model = simakt({"intra_heads": 7, "inter_heads": [{"type": "cluster", "n_clusters": 25}]})
    with pytest.raises(ValueError, match="n_clusters=25 is larger than the bank"):
        model.prepare(students(n=40))


def test_unbuilt_bank_is_a_clear_error():
    model = simakt(dual())
    batch = random_batch(NUM_C, B=2, L=L, num_pid=NUM_PID)
    with pytest.raises(RuntimeError, match="has no memory bank: call model.prepare"):
        model(batch)


class ScaledQueryHead(BaseSimilarityHead):
    """A custom head for the tests: returns 2 * query (no bank)."""

    def forward(self, query, ctx):
        return 2 * query


def test_custom_heads_by_module_path():
    model = simakt(
        {
            "intra_heads": 6,
            "inter_heads": [
                {"type": "custom", "module_path": "tests.test_simakt.ScaledQueryHead"},
                {
                    "type": "custom",
                    "module_path": "kt_lib.heads.inter.DeepSetSimilarity",
                    "params": {"set_size": 5, "invariant_layers": 2},
                },
            ],
        },
        students(),
    )
    assert type(model.inter.heads[0]).__name__ == "ScaledQueryHead"
    assert model.inter.heads[1].banks[0].encodings.shape == (5, 32)
    out = model(random_batch(NUM_C, B=2, L=L, num_pid=NUM_PID))
    assert torch.isfinite(out.logits).all()
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['set_size'\] for a custom head"):
        parse_head(
            {
                "type": "custom",
                "set_size": 3,
                "module_path": "kt_lib.heads.inter.DeepSetSimilarity",
            }
        )


def test_influence_weight_scales_and_zero_disables():
    train = students()
    batch = batch_of(train, range(4))
    outputs = {}
    for w in (0.0, 1.0, 2.5):
        cfg = {
            "intra_heads": 7,
            "memory": {"kmeans_n_init": 1},
            "inter_heads": [{"type": "cluster", "n_clusters": 4, "influence_weight": w}],
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = simakt(cfg, train)
        captured = {}
        model.inter.register_forward_hook(lambda m, i, o, c=captured: c.update(out=o[0]))
        model(batch)
        outputs[w] = captured["out"]
        if w == 0:
            assert not model.inter.heads[0].has_banks  # an off head gets no bank
    assert torch.equal(outputs[0.0], torch.zeros_like(outputs[0.0]))
    assert torch.allclose(outputs[2.5], 2.5 * outputs[1.0], atol=1e-6)


def test_bank_sizes_shrink_to_the_banks_that_short_logs_leave(recwarn):
    """Logs shorter than memory.min_length stay out of the banks, so the sizes shrink to what the
    smallest fold's bank really holds (they shrank to the fold's student count and `prepare`
    then failed), and the notice names only the sizes of heads that are on."""
    import dataclasses

    from tests.conftest import make_tiny_dataset

    data = make_tiny_dataset(NUM_C, 0, n=20)
    short = [dataclasses.replace(s, q=s.q[:3], r=s.r[:3]) for s in data.students[:8]]
    data = dataclasses.replace(data, students=short + list(data.students[8:]))
    model = build_model("simakt", preset="cluster_only", dataset=data)
    model.prepare(data)  # the banks build
    (notice,) = [w for w in recwarn if "shrink to fit" in str(w.message)]
    assert "n_clusters -> " in str(notice.message) and "memory_size" not in str(notice.message)
    assert model.banks() and all(len(bl) == 2 for bl in model.banks().values())  # one per fold


def test_contrastive_settings_with_the_loss_off_are_refused():
    """`--set lambda_cl=0.5` on a run without the contrastive loss trained the plain model under
    a new run key, as if it were another configuration (a review)."""
    for field, value in (("lambda_cl", 0.5), ("cl_temperature", 0.1), ("hard_neg", False)):
        with pytest.raises(ValueError, match=f"{field}=.*contrastive loss, which is off"):
            build_model("dtransformer", num_c=NUM_C, **SIZES, **{field: value})
        build_model("dtransformer", num_c=NUM_C, **SIZES, contrastive=True, **{field: value})
