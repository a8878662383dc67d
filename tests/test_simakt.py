"""DTransformer and SimAKT: equivalence, causality with banks, self-exclusion, presets, the typed
configuration (seed 000's examples, Step 1 approaches, settings), strategies, banks, the CLI."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kt_lib.audit import audit_causality, perturb_future, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.data.dataset import KTDataset, StudentSeq, Window, collate
from kt_lib.data.synthetic import simulate
from kt_lib.heads.inter import BaseSimilarityHead
from kt_lib.heads.simakt_config import (
    MemoryConfig,
    load_simakt_configs,
    parse_head,
)
from kt_lib.memory import (
    Bank,
    ClusterBank,
    EncodedSet,
    FoldAssignment,
    GraphBank,
    KNNBank,
    farthest_first,
    position_weighted_similarity,
    position_weights,
)
from kt_lib.memory.banks import random_sample
from kt_lib.memory.temporal import (
    TEMPORAL_STRATEGIES,
    build_strategy,
    prefix_aligned_similarity,
)
from kt_lib.models import build_model
from kt_lib.models.simakt import bank_rebuilder, load_simakt_config
from kt_lib.train import fit

NUM_C, NUM_PID, L = 8, 24, 16
DATA = Path(__file__).parent / "data"
SEED_EXAMPLES = sorted((DATA / "seed000").glob("*.json"))
SIZES = dict(d=32, n_heads=8, n_know=4, d_fc=32, max_len=L)
PRESETS = [
    "none",
    "position_weighted_dual",
    "strict_causal",
    "full_collaborative",
    "cluster_dominant",
    "knn_dominant",
    "adaptive_influence",
    "cluster_only",
    "knn_only",
    "no_inter_student",
    "minimal_modular",
    "dual_modular",
    "multi_similarity",
]


def dual(future_weight: float = 0.3, strategy: str = "position_weighted", **memory) -> dict:
    """Small Step 2 dual config (cluster + KNN) for tests."""
    temporal = {"strategy": strategy, "future_weight": future_weight}
    if strategy == "content":  # content scores read no temporal setting (one would be refused)
        temporal = {"strategy": strategy}
    return {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1, **memory},
        "inter_heads": [
            {"type": "cluster", "n_clusters": 4, "temporal_config": temporal},
            {"type": "knn", "memory_size": 8, "k_neighbors": 3, "temporal_config": temporal},
        ],
    }


def students(n: int = 60, seed: int = 0, num_pid: int = NUM_PID) -> KTDataset:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(L // 2, L + 1))
        pid = rng.integers(0, num_pid, m) if num_pid else None
        out.append(StudentSeq(i, rng.integers(0, NUM_C, m), rng.integers(0, 2, m), pid))
    return KTDataset(out, num_c=NUM_C, num_pid=num_pid, name="t")


def batch_of(train: KTDataset, index, pad_to: int | None = L) -> object:
    """Complete logs of training students as one batch (window = whole log)."""
    return collate(train, [Window(int(i), 0, len(train.students[int(i)])) for i in index], pad_to)


def simakt(similarity, train: KTDataset | None = None, seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = build_model(
        "simakt",
        similarity=similarity,
        num_c=NUM_C,
        num_pid=train.num_pid if train else NUM_PID,
        **{**SIZES, **kw},
    )
    if train is not None:
        model.prepare(train)
    return model.eval()


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


def one_fold_batch(model, train: KTDataset, n: int = 6, fold: int = 0):
    """Training students of one fold: their banks are built from the other folds only.

    (A batch mixing folds would let student A's bank change when student B's future changes:
    B's complete log is legitimate collaborative information for A. The audit's contract is per
    student, and students of one fold are independent of each other's banks.)
    """
    own = model.folds.fold_of(torch.as_tensor(train.uids))
    return batch_of(train, (own == fold).nonzero().squeeze(1)[:n].tolist())


OTHER_HEADS = {  # graph, cross-student prototypes and the custom DeepSet head (with a bank)
    "intra_heads": 5,
    "memory": {"kmeans_n_init": 1, "folds": 3},
    "inter_heads": [
        {"type": "graph", "graph_type": "transition"},
        {"type": "attention", "n_prototypes": 3},
        {
            "type": "custom",
            "module_path": "kt_lib.heads.inter.DeepSetSimilarity",
            "params": {"set_size": 5, "invariant_layers": 2},
        },
    ],
}


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


# -- banks ------------------------------------------------------------------------------------


def naive_farthest_first(x: torch.Tensor, k: int, first: int) -> list[int]:
    """The seed's loops (reference only)."""
    selected = [first]
    for _ in range(k - 1):
        best, best_d = -1, -1.0
        for i in range(len(x)):
            if i in selected:
                continue
            d = min(float(torch.norm(x[i] - x[j])) for j in selected)
            if d > best_d:
                best, best_d = i, d
        selected.append(best)
    return selected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_farthest_first_matches_naive_reference(seed):
    x = torch.randn(60, 5, generator=torch.Generator().manual_seed(seed))
    first = seed * 7
    assert farthest_first(x, 12, first=first).tolist() == naive_farthest_first(x, 12, first)
    assert farthest_first(x, 60, first=first).unique().numel() == 60
    with pytest.raises(ValueError, match="k must be in"):
        farthest_first(x, 61)


def naive_position_similarity(cur, mem, valid, decay, fw):
    """Seed 000's compute_weighted_similarity as loops (reference only)."""
    B, Lc, _ = cur.shape
    M, S, _ = mem.shape
    out = torch.zeros(B, Lc, M, dtype=torch.float64)
    for b in range(B):
        for t in range(Lc):
            pos = t + 1  # steps known at row t
            for m in range(M):
                num = den = 0.0
                for i in range(S):
                    if not valid[m, i]:
                        continue
                    if i < pos:
                        if i >= Lc:
                            continue
                        w = decay ** (pos - i - 1)
                        s = float(F.cosine_similarity(cur[b, i : i + 1], mem[m, i : i + 1]))
                    else:
                        w = fw * decay ** (i - pos)
                        if i == 0:
                            s = 0.5
                        elif not valid[m, i - 1]:
                            continue
                        else:
                            s = float(F.cosine_similarity(mem[m, i - 1 : i], mem[m, i : i + 1]))
                    num, den = num + w * s, den + w
                out[b, t, m] = num / den if den > 0 else 0.0
    return out


@pytest.mark.parametrize("S", [9, 4])
@pytest.mark.parametrize("fw", [0.0, 0.3, 1.0])
def test_position_weighted_similarity_matches_naive_loop(S, fw):
    g = torch.Generator().manual_seed(S)
    cur, mem = torch.randn(3, 6, 5, generator=g), torch.randn(4, S, 5, generator=g)
    valid = torch.rand(4, S, generator=g) > 0.2
    valid[0] = False  # an empty memory sequence gives 0
    fast = position_weighted_similarity(cur, mem, valid, 0.9, fw)
    slow = naive_position_similarity(cur, mem, valid, 0.9, fw)
    assert torch.allclose(fast.double(), slow, atol=1e-5)
    past, future = position_weights(6, S, 0.9, fw)
    assert past[3, :4].tolist() == pytest.approx([0.9**3, 0.9**2, 0.9, 1.0])
    assert (future[:, 0] == 0).all() and future[0, 1] == pytest.approx(fw)


def test_position_weighted_similarity_ignores_the_current_future():
    g = torch.Generator().manual_seed(0)
    cur, mem = torch.randn(2, 8, 4, generator=g), torch.randn(3, 8, 4, generator=g)
    base = position_weighted_similarity(cur, mem, None, 0.95, 1.0)
    cur2 = cur.clone()
    cur2[:, 5:] = torch.randn(2, 3, 4, generator=g)
    assert torch.equal(position_weighted_similarity(cur2, mem, None, 0.95, 1.0)[:, :5], base[:, :5])


def encoded(n: int = 30, d: int = 6) -> EncodedSet:
    data = students(n)
    torch.manual_seed(0)
    table_q, table_r = torch.randn(NUM_C, d), torch.randn(2, d)
    fn = lambda b: table_q[b.q] + table_r[b.r]  # noqa: E731
    from kt_lib.memory import encode_dataset

    return encode_dataset(fn, data, max_len=5, seq_len=L, batch_size=7)


def test_encodings_and_cluster_bank_are_exact_means():
    enc = encoded()
    s = enc.dataset.students[3]
    manual = (enc.states_fn(batch_of(enc.dataset, [3]))[0, : len(s)]).mean(0)
    assert torch.allclose(enc.encodings[3], manual, atol=1e-5)  # chunks of 5 pooled exactly
    bank = ClusterBank.build(enc, 4, seed=0, n_init=2)
    for c in range(4):
        members = (bank.labels == c).nonzero().squeeze(1)
        assert torch.allclose(bank.centroids[c], enc.encodings[members].mean(0), atol=1e-5)
        states, valid = enc.states(members)
        mean = (states * valid.unsqueeze(-1)).sum(0) / valid.sum(0).clamp(min=1).unsqueeze(-1)
        assert torch.allclose(bank.sequences[c], mean, atol=1e-5)
        assert torch.equal(bank.seq_counts[c], valid.sum(0).float())
    stats = bank.stats()
    assert stats["students"] == 30 and stats["clusters"] == 4
    assert stats["size_min"] >= 1 and stats["variance_mean"] > 0


def test_banks_save_load_round_trip(tmp_path):
    enc = encoded()
    banks = {
        "cluster": ClusterBank.build(enc, 3, seed=1, n_init=1),
        "knn": KNNBank.build(enc, 6, seed=1),
        "graph": GraphBank.build(enc),
    }
    for name, bank in banks.items():
        bank.save(tmp_path / name)
        loaded = Bank.load(tmp_path / name)
        assert type(loaded) is type(bank) and loaded.stats() == bank.stats()
        for key, value in bank.to_tensors().items():
            assert torch.equal(value, loaded.to_tensors()[key]), (name, key)
    assert KNNBank.build(enc, 6, seed=1).uids.tolist() == banks["knn"].uids.tolist()  # seeded


def test_model_banks_round_trip(tmp_path):
    train = students()
    model = simakt(dual(0.3), train)
    batch = batch_of(train, range(5))
    with torch.no_grad():
        expected = model(batch).logits
    model.save_banks(tmp_path / "banks")
    fresh = simakt(dual(0.3))
    fresh.load_state_dict(model.state_dict())
    fresh.load_banks(tmp_path / "banks")
    with torch.no_grad():
        assert torch.equal(fresh(batch).logits, expected)
    save_model(tmp_path / "ckpt", model)
    loaded, _, _ = load_model(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(loaded.eval()(batch).logits, expected)
    assert not model.bank_stats().empty


def test_block2_encoder_refreshes_banks():
    train = students()
    model = simakt(dual(0.3, encoder="block2", update_frequency=2), train)
    before = model.inter.heads[0].banks[0].centroids.clone()
    with torch.no_grad():
        model.block2.attn.v_proj.weight.mul_(3.0)
    model.on_epoch_start(1, train)
    assert torch.equal(model.inter.heads[0].banks[0].centroids, before)  # not a refresh epoch
    model.on_epoch_start(2, train)
    assert not torch.allclose(model.inter.heads[0].banks[0].centroids, before)


def test_fit_trains_simakt_with_banks():
    sim = simulate(80, 16, num_c=NUM_C, problems_per_c=3, seed=0)
    train = sim.data.subset(range(60))
    valid = sim.data.subset(range(60, 80))
    torch.manual_seed(0)
    model = build_model("simakt", preset="tiny", dataset=train, max_len=16)
    result = fit(model, train, valid, epochs=2, max_len=16, batch_size=32, progress=False)
    assert len(result.history) == 2 and np.isfinite(result.best_metric)
    assert result.model.folds is not None and result.model.inter.heads[0].has_banks


def test_cluster_agreement_scores():
    from kt_lib.memory import cluster_agreement

    scores = cluster_agreement([0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1])
    assert scores["purity"] == pytest.approx(5 / 6) and scores["clusters"] == 3
    assert cluster_agreement([1, 1, 0, 0], [0, 0, 1, 1])["adjusted_rand"] == pytest.approx(1.0)


# -- the typed configuration: presets unchanged, parsed once, seed examples ---------------------

REFERENCE = json.loads((DATA / "simakt_preset_reference.json").read_text())
REF_INLINE = {  # the '@' cases of the reference file
    "@tiny": None,  # TINY_SIMILARITY, filled in below
    "@dual_content": dual(strategy="content"),
    "@dual_block2": dual(0.5, encoder="block2"),
}


@pytest.mark.parametrize("name", [k for k in REFERENCE if not k.startswith("_")])
def test_presets_build_the_models_they_built_before(name):
    """State dict keys/shapes and outputs (eval, and train mode for a fixed seed) as recorded
    from the code before the typed configuration; then backward and the causality audit."""
    from kt_lib.models.simakt import TINY_SIMILARITY

    ref = REFERENCE[name]
    train = simulate(ref["students"], 8, num_c=NUM_C, problems_per_c=3, seed=1).data
    spec = {"preset": name}
    if name.startswith("@"):
        spec = {"similarity": REF_INLINE[name] or TINY_SIMILARITY}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.manual_seed(0)
        model = build_model("simakt", dataset=train, **spec, **{**SIZES, "max_len": 8})
    model.prepare(train)
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == ref["state_dict"]
    batch = batch_of(train, range(4), pad_to=8)
    # banks come out of k-means / nearest neighbours on BLAS, whose rounding differs by CPU and
    # grows through the bank: another CPU than the recording's moves logits by up to 6e-5
    # (cluster_dominant, full_collaborative on an Intel Xeon); a changed model moves them far more
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(batch).logits, torch.tensor(ref["eval_logits"]), atol=2e-4)
    model.train()
    torch.manual_seed(7)
    out = model(batch)
    assert torch.allclose(out.logits.detach(), torch.tensor(ref["train_logits"]), atol=2e-4)
    model.loss(out, batch)["total"].backward()
    model.eval()
    assert audit_causality(model, batch, steps=[0, 3, 7])


def test_similarity_is_parsed_once(monkeypatch):
    import kt_lib.heads.simakt_config as sc

    calls = []
    original = sc.parse_similarity
    monkeypatch.setattr(
        sc, "parse_similarity", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    build_model("simakt", num_c=NUM_C, similarity="position_weighted_dual", **SIZES)
    assert len(calls) == 1


def test_config_object_in_the_model_config_round_trips(tmp_path):
    sim = load_simakt_config("dual_modular").with_settings(
        n_clusters=4, memory_size=8, k_neighbors=3
    )
    model = simakt(sim, students())
    assert model.similarity is not None and isinstance(model.config.similarity, dict)
    assert load_simakt_config(model.config.similarity).to_mapping() == sim.to_mapping()
    save_model(tmp_path / "m", model)  # the config is plain JSON
    loaded, _, _ = load_model(tmp_path / "m")
    batch = batch_of(students(), range(3))
    with torch.no_grad():
        assert torch.equal(loaded.eval()(batch).logits, model(batch).logits)


@pytest.mark.parametrize("path", SEED_EXAMPLES, ids=lambda p: p.stem)
def test_seed_examples_load_as_written(path):
    """Every configuration block of seed 000 loads, builds an 8-head model, round-trips through
    its mapping, and (banks shrunk) prepares, runs and passes the causality audit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        configs = load_simakt_configs(path)
    train = students(n=40)
    for name, sim in configs.items():
        assert load_simakt_config(sim.to_mapping(), warn=False).to_mapping() == sim.to_mapping()
        custom = any(h.type == "custom" for h in sim.heads)  # set_size: DeepSet's field
        small = sim.shrink(  # one size list for every layout: off heads keep theirs
            n_clusters=3,
            memory_size=6,
            k_neighbors=2,
            kmeans_n_init=1,
            set_size=4 if custom else None,
        )
        model = simakt(small, train)
        assert model.n_intra + len(sim.heads) == 8, name
        batch = batch_of(train, range(3))
        assert torch.isfinite(model(batch).logits).all(), name
        assert audit_causality(model, batch, steps=[2, 9], trials=1), name


@pytest.mark.parametrize(
    "approach, n, types",
    [
        ("cluster", None, ["cluster"]),
        ("cluster", 3, ["cluster", "cluster", "cluster"]),
        ("knn", 2, ["knn", "knn"]),
        ("hybrid", 1, ["hybrid"]),
        ("hybrid", 2, ["hybrid", "hybrid"]),
        ("position_weighted_dual", 2, ["cluster", "knn"]),
        ("none", 0, []),
        ("cluster", 0, []),
    ],
)
def test_step1_approaches_and_inter_heads(approach, n, types):
    raw = {"approach": approach, "temporal_config": {"future_weight": 0.2}}
    if approach != "none":
        raw.update(
            cluster_config={"n_clusters": 3}, knn_config={"memory_size": 6, "k_neighbors": 2}
        )
    if approach in ("cluster", "knn"):
        raw.pop("knn_config" if approach == "cluster" else "cluster_config")
    if n is not None:
        raw["inter_heads"] = n
    sim = load_simakt_config(raw)
    assert [h.type for h in sim.heads] == types
    assert sim.n_intra(8) == 8 - len(types)
    if approach == "hybrid":
        parts = sim.heads[-1].params.modules
        assert [p.name for p in parts] == [
            f"{sim.heads[-1].name}.cluster",
            f"{sim.heads[-1].name}.knn",
        ]
        assert all(p.temporal.future_weight == 0.2 for p in parts)  # inherited
    if not types:  # inter_heads 0: DTransformer's parameters exactly
        torch.manual_seed(0)
        dt = build_model("dtransformer", num_c=NUM_C, **SIZES)
        torch.manual_seed(0)
        model = build_model("simakt", num_c=NUM_C, similarity=raw, **SIZES)
        assert all(
            torch.equal(a, b)
            for a, b in zip(dt.state_dict().values(), model.state_dict().values(), strict=True)
        )
    else:
        model = simakt(raw, students())
        assert torch.isfinite(model(batch_of(students(), range(2))).logits).all()


# -- new heads, metrics, sampling and strategies: causal and self-excluding --------------------


def one_head(head: dict, intra: int = 7, **memory) -> dict:
    return {"intra_heads": intra, "memory": {"kmeans_n_init": 1, **memory}, "inter_heads": [head]}


CLUSTER = {"type": "cluster", "n_clusters": 4}
KNN = {"type": "knn", "memory_size": 8, "k_neighbors": 3}
NEW = {
    "hybrid": {
        "intra_heads": 7,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {
                "type": "hybrid",
                "modules": [CLUSTER, KNN],
                "weights": [0.5, -0.5],
                "temporal_config": {"future_weight": 0.4},
            }
        ],
    },
    "knn_random": one_head({**KNN, "sampling": "random", "temporal_config": {"future_weight": 1}}),
    "learned_metrics": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {**CLUSTER, "similarity_metric": "learned"},
            {**KNN, "distance_metric": "learned"},
        ],
    },
    "euclidean_dot": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {**CLUSTER, "similarity_metric": "euclidean"},
            {**KNN, "distance_metric": "dot"},
        ],
    },
    "prefix_aligned": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {**c, "temporal_config": {"strategy": "prefix_aligned"}} for c in (CLUSTER, KNN)
        ],
    },
    "multiscale": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1, "encoder": "block2"},
        "inter_heads": [
            {**c, "temporal_config": {"strategy": "multiscale", "window_sizes": [2, 5]}}
            for c in (CLUSTER, KNN)
        ],
    },
    "completion": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {**c, "temporal_config": {"strategy": "completion", "future_weight": 0.5}}
            for c in (CLUSTER, KNN)
        ],
    },
    "graph_attention_position_weighted": {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "inter_heads": [
            {"type": "graph", "temporal_config": {"decay_factor": 0.8, "future_weight": 0.3}},
            {"type": "attention", "n_prototypes": 3, "temporal_config": {"decay_factor": 0.7}},
        ],
    },
}


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name", list(NEW))
def test_new_heads_and_strategies_are_causal(name, mode):
    train = students()
    model = simakt(NEW[name], train)
    outsiders = random_batch(NUM_C, B=4, L=L, num_pid=NUM_PID, seed=5)
    outsiders.uid = torch.arange(1000, 1004)
    for batch in (batch_of(train, range(6)), outsiders):
        result = audit_causality(model, batch, steps=[0, 4, 9, 15], mode=mode)
        assert result, str(result)


@pytest.mark.parametrize("name", list(NEW))
def test_new_heads_and_strategies_are_self_excluding(name):
    train = students()
    model = simakt(NEW[name], train)
    rebuild = bank_rebuilder(train)
    for fold in range(model.folds.n_folds):
        batch = one_fold_batch(model, train, fold=fold)
        result = audit_causality(model, batch, steps=[1, 6, 12], trials=1, rebuild=rebuild)
        assert result, str(result)


def test_hybrid_mixes_its_modules_by_learnable_weights():
    train = students()
    model = simakt(NEW["hybrid"], train)
    hybrid = model.inter.heads[0]
    assert sorted(model.banks()) == ["hybrid.cluster", "hybrid.knn"]
    assert [k for k, _ in model.inter.bank_slots()] == ["head0_0", "head0_1"]
    batch = batch_of(train, range(4))
    captured = []
    for module in (*hybrid.parts, hybrid):  # heads are called through `attend`

        def spy(query, ctx, attend=module.attend):
            out, maps = attend(query, ctx)
            captured.append(out.detach())
            return out, maps

        module.attend = spy
    model.train()
    out = model(batch)
    w = torch.softmax(hybrid.mix.detach(), 0)
    assert torch.allclose(w, torch.softmax(torch.tensor([0.5, -0.5]), 0))
    assert torch.allclose(captured[2], w[0] * captured[0] + w[1] * captured[1], atol=1e-6)
    model.loss(out, batch)["total"].backward()
    assert hybrid.mix.grad is not None and hybrid.mix.grad.abs().sum() > 0


def test_knn_random_sampling_is_seeded_and_differs_from_farthest_first():
    enc = encoded()
    a, b = random_sample(enc.encodings, 6, seed=3), random_sample(enc.encodings, 6, seed=3)
    assert torch.equal(a, b) and a.unique().numel() == 6
    rnd = KNNBank.build(enc, 6, seed=1, sampling="random")
    ff = KNNBank.build(enc, 6, seed=1)
    assert rnd.uids.tolist() != ff.uids.tolist()


def test_learned_metric_starts_as_cosine():
    model = simakt(NEW["learned_metrics"])
    metric = model.inter.heads[0].metric
    q, k = torch.randn(2, 5, 4), torch.randn(2, 3, 4)
    from kt_lib.heads.inter import METRICS

    assert sorted(METRICS) == ["cosine", "dot", "euclidean", "learned"]
    cos = METRICS["cosine"](4)(q, k)
    assert torch.allclose(type(metric)(4)(q, k), cos, atol=1e-6)


def naive_prefix(cur, mem, valid):
    B, Lc, _ = cur.shape
    M, S, _ = mem.shape
    out = torch.zeros(B, Lc, M, dtype=torch.float64)
    for b in range(B):
        for t in range(Lc):
            c = cur[b, : t + 1].mean(0)
            for m in range(M):
                steps = [i for i in range(min(t + 1, S)) if valid[m, i]]
                if steps:
                    h = mem[m, steps].mean(0)
                    out[b, t, m] = float(F.cosine_similarity(c, h, dim=0))
    return out


def naive_completion(cur, mem, valid, decay, fw, complete):
    B, Lc, _ = cur.shape
    M, S, _ = mem.shape
    out = torch.zeros(B, Lc, M, dtype=torch.float64)
    for b in range(B):
        for t in range(Lc):
            g = complete(cur[b, t])
            for m in range(M):
                num = den = 0.0
                for i in range(S):
                    if not valid[m, i]:
                        continue
                    if i <= t:
                        w, s = decay ** (t - i), float(F.cosine_similarity(cur[b, i], mem[m, i], 0))
                    else:
                        w, s = (
                            fw * decay ** (i - t - 1),
                            float(F.cosine_similarity(g, mem[m, i], 0)),
                        )
                    num, den = num + w * s, den + w
                out[b, t, m] = num / den if den > 0 else 0.0
    return out


@pytest.mark.parametrize("S", [9, 4])
def test_prefix_and_completion_match_naive_loops(S):
    g = torch.Generator().manual_seed(S)
    cur, mem = torch.randn(2, 6, 5, generator=g), torch.randn(3, S, 5, generator=g)
    valid = torch.rand(3, S, generator=g) > 0.2
    valid[0] = False
    fast = prefix_aligned_similarity(cur, mem, valid)
    assert torch.allclose(fast.double(), naive_prefix(cur, mem, valid), atol=1e-5)

    class Settings:
        decay_factor, future_weight, window_sizes = 0.9, 0.6, [2]

    torch.manual_seed(0)
    completion = build_strategy("completion", 5, Settings())
    with torch.no_grad():
        fast = completion(cur, mem, valid)
        slow = naive_completion(cur, mem, valid, 0.9, 0.6, completion.complete)
    assert torch.allclose(fast.double(), slow, atol=1e-5)


@pytest.mark.parametrize("strategy", sorted(TEMPORAL_STRATEGIES))
def test_every_strategy_ignores_the_current_future(strategy):
    class Settings:
        decay_factor, future_weight, window_sizes = 0.9, 0.5, [2, 3]

    torch.manual_seed(0)
    module = build_strategy(strategy, 6, Settings())
    g = torch.Generator().manual_seed(1)
    cur, mem = torch.randn(2, 8, 6, generator=g), torch.randn(3, 8, 6, generator=g)
    with torch.no_grad():
        base = module(cur, mem, None)
        for t in (0, 3, 6):
            pert = cur.clone()
            pert[:, t + 1 :] = torch.randn(2, 7 - t, 6, generator=g)
            assert torch.equal(module(pert, mem, None)[:, : t + 1], base[:, : t + 1]), t


def test_graph_position_weighting_mixes_the_past_and_two_step_edges():
    train = students()
    model = simakt(NEW["graph_attention_position_weighted"], train)
    graph = model.inter.heads[0]
    batch = batch_of(train, range(2))
    from kt_lib.heads.inter import HeadContext

    fold = model._folds_for(batch)
    ctx = HeadContext(None, None, None, batch.q, fold, batch.uid)
    prior = graph.prior(ctx).exp()  # [B, L, C]
    b, t = 0, 5
    P = torch.softmax(graph.log_adj[fold[b]], -1)
    w = torch.tensor([0.8 ** (t - i) for i in range(t + 1)])
    past = (w[:, None] * P[batch.q[b, : t + 1]]).sum(0) / w.sum()
    expected = (past + 0.3 * (P @ P)[batch.q[b, t]]) / 1.3
    assert torch.allclose(prior[b, t], expected, atol=1e-5)
    assert torch.allclose(prior.sum(-1), torch.ones(2, L), atol=1e-5)


# -- banks: short logs, KMeans restarts, influence rule, learning rates, the CLI ---------------


def test_short_logs_stay_out_of_the_banks_and_kmeans_restarts(monkeypatch):
    import kt_lib.memory.banks as banks

    seen = []
    real = banks.KMeans
    monkeypatch.setattr(banks, "KMeans", lambda **kw: seen.append(kw["n_init"]) or real(**kw))
    train = students()
    short = [
        StudentSeq(500 + i, np.zeros(4, int), np.ones(4, int), np.zeros(4, int)) for i in range(6)
    ]
    train = KTDataset(train.students + short, num_c=NUM_C, num_pid=NUM_PID, name="t")
    cfg = {**dual(), "memory": {}}  # defaults: kmeans_n_init 10, min_length 5
    model = simakt(cfg, train)
    assert seen and set(seen) == {10}
    for head in model.inter.heads:
        for bank in head.banks:
            assert (bank.uids < 500).all()
    assert model.folds.fold_of(torch.tensor([500])).item() in (0, 1)  # still assigned a fold
    model = simakt({**dual(), "memory": {"min_length": 1, "kmeans_n_init": 1}}, train)
    assert any((b.uids >= 500).any() for h in model.inter.heads for b in h.banks)


def test_influence_rule_of_example_4_follows_the_training_set_size(tmp_path):
    raw = json.loads((DATA / "seed000" / "influence_example4_dataset_size.json").read_text())
    raw.update(
        cluster_config={"n_clusters": 4},
        knn_config={"memory_size": 8, "k_neighbors": 3},
        memory={"kmeans_n_init": 1},
    )
    small = simakt(raw, students(n=60))
    assert small.inter.weights == [0.6, 1.5]
    large = simakt({**raw, "large_dataset_min_students": 50}, students(n=60))
    assert large.inter.weights == [1.8, 0.7]
    save_model(tmp_path / "m", large)
    loaded, _, _ = load_model(tmp_path / "m")
    assert loaded.inter.weights == [1.8, 0.7]
    step2 = load_simakt_config(
        {
            "intra_heads": 6,
            "inter_heads": [CLUSTER, KNN],
            "influence_rule": {"large": {"knn": 2.0}, "small": {"cluster": 0.0}},
        }
    )
    assert step2.influence_rule.weights_for(step2.heads, 5) == [0.0, 1.0]
    assert step2.influence_rule.weights_for(step2.heads, 5000) == [1.0, 2.0]


def test_param_groups_scale_learning_rates_inversely_with_influence():
    cfg = {
        "intra_heads": 6,
        "memory": {"kmeans_n_init": 1},
        "lr_scaling": "inverse_influence",
        "inter_heads": [
            {**CLUSTER, "influence_weight": 2.0},
            {**KNN, "influence_weight": 0.5},
        ],
    }
    model = simakt(cfg, students())
    groups = model.param_groups(1e-3)
    assert [(g["name"], g["lr"]) for g in groups] == [
        ("model", 1e-3),
        ("cluster", 5e-4),
        ("knn", 2e-3),
    ]
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each parameter once
    torch.optim.AdamW(groups, lr=1e-3)
    plain = simakt(dual(), students()).param_groups(1e-3)
    assert len(plain) == 1 and plain[0]["lr"] == 1e-3


def test_bank_cli_builds_banks_the_model_loads_by_dataset_name(tmp_path, capsys):
    from kt_lib.cli.memory import main
    from kt_lib.data import load_bundle

    settings = ["--set", "n_clusters=4", "--set", "memory_size=8", "--set", "k_neighbors=3"]
    args = ["build", "--data-format", "synthetic", "--num-students", "60", "--seq-len", "12"]
    args += ["--out", str(tmp_path), "--preset", "tiny", "--max-len", "16"]
    path = main([*args, "--similarity", "dual_modular", *settings])
    assert path.with_suffix(".pt").is_file() and path.with_suffix(".json").is_file()
    assert "training students" in capsys.readouterr().out
    train = load_bundle(None, "synthetic", seed=0, num_students=60, seq_len=12).train
    sim = load_simakt_config("dual_modular").with_settings(
        n_clusters=4, memory_size=8, k_neighbors=3
    )

    def model_with(memory_sim):
        torch.manual_seed(0)
        m = build_model("simakt", preset="tiny", dataset=train, max_len=16, similarity=memory_sim)
        m.prepare(train)
        return m.eval()

    loaded = model_with(sim.with_settings(bank_dir=str(tmp_path)))
    built = model_with(sim)
    batch = collate(train, [Window(i, 0, len(train.students[i])) for i in range(4)], 16)
    with torch.no_grad():
        assert torch.equal(loaded(batch).logits, built(batch).logits)
    with pytest.raises(ValueError, match="other training students"):
        loaded.load_banks(path, train.subset(range(10)))
    # same uids, same count, other logs (another fold's train{k} file numbers its students
    # 0..n-1 too): refused, or its students could read banks holding their own logs
    swapped = [dataclasses.replace(s, r=1 - s.r) for s in train.students]
    with pytest.raises(ValueError, match="another fold"):
        loaded.load_banks(path, dataclasses.replace(train, students=swapped))
    other = build_model(
        "simakt",
        preset="tiny",
        dataset=train,
        max_len=16,
        similarity=sim.with_settings(n_clusters=5),
    )
    with pytest.raises(ValueError, match="banks were built for similarity"):
        other.load_banks(path)
    data = bytearray(path.with_suffix(".pt").read_bytes())
    data[-20] ^= 0xFF
    path.with_suffix(".pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256 differs"):
        loaded.load_banks(path)
    with pytest.raises(FileNotFoundError, match="no prebuilt banks"):
        model_with(sim.with_settings(bank_dir=str(tmp_path / "empty")))
    with pytest.raises(ValueError, match="bank_dir needs the heuristic encoder"):
        MemoryConfig(encoder="block2", bank_dir="x").validate()
