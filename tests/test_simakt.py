"""DTransformer and SimAKT: equivalence, causality with banks, self-exclusion, presets, banks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kt_lib.audit import audit_causality, perturb_future, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.data.dataset import KTDataset, StudentSeq, Window, collate
from kt_lib.data.synthetic import simulate
from kt_lib.heads.similarity import BaseSimilarityHead, parse_head_spec
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
from kt_lib.models import build_model
from kt_lib.models.simakt import bank_rebuilder, list_simakt_presets, load_simakt_config
from kt_lib.train import fit

NUM_C, NUM_PID, L = 8, 24, 16
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
            "module_path": "kt_lib.heads.similarity.DeepSetSimilarity",
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


def test_shipped_presets():
    assert sorted(PRESETS) == list_simakt_presets()
    layouts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name in PRESETS:
            sim = load_simakt_config(name)
            layouts[name] = (sim.n_intra(8), [(h.type, h.influence_weight) for h in sim.heads])
    assert layouts["none"] == (8, [])
    assert layouts["position_weighted_dual"] == (6, [("cluster", 1.0), ("knn", 1.0)])
    assert layouts["cluster_only"] == (6, [("cluster", 1.0), ("knn", 0.0)])
    assert layouts["minimal_modular"] == (7, [("cluster", 1.0)])
    assert [t for t, _ in layouts["multi_similarity"][1]] == [
        "cluster",
        "graph",
        "attention",
        "custom",
    ]
    strict = load_simakt_config("strict_causal").heads[0]
    assert (strict.strategy, strict.future_weight, strict.decay_factor) == (
        "position_weighted",
        0.0,
        0.95,
    )
    full = load_simakt_config("full_collaborative")
    assert full.heads[1].params.memory_size == 300 and full.heads[0].decay_factor == 0.98


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds_prepares_and_runs(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sim = load_simakt_config(name)
        need = max(
            [1]
            + [
                getattr(h.params, a, 1)
                for h in sim.heads
                for a in ("n_clusters", "memory_size", "set_size")
            ]
        )
        train = simulate(2 * need + 4, 8, num_c=NUM_C, problems_per_c=3, seed=1).data
        torch.manual_seed(0)
        model = build_model("simakt", preset=name, dataset=train, **{**SIZES, "max_len": 8})
    assert model.config.similarity == name
    model.prepare(train)
    batch = batch_of(train, range(4), pad_to=8)
    model.train()
    out = model(batch)
    assert out.logits.shape == (4, 8) and torch.isfinite(out.logits).all()
    model.loss(out, batch)["total"].backward()
    model.eval()
    assert audit_causality(model, batch, steps=[0, 3, 7])


def test_head_count_mismatch_and_intra():
    with pytest.raises(
        ValueError,
        match=r"head-count mismatch: 6 intra \+ 2 inter heads != "
        r"n_heads=4",
    ):
        build_model("simakt", num_c=5, similarity="dual_modular", d=32, n_heads=4)
    with pytest.raises(ValueError, match="total_heads=9"):
        load_simakt_config({**dual(), "total_heads": 9})
    with pytest.raises(ValueError, match="at least one intra-student head"):
        load_simakt_config({**dual(), "intra_heads": 0}).n_intra(2)
    with pytest.raises(ValueError, match="inter_heads must be 2"):
        load_simakt_config({"approach": "position_weighted_dual", "inter_heads": 3})


@pytest.mark.parametrize(
    "head, message",
    [
        (
            {"type": "clusterz"},
            "unknown inter-student head type 'clusterz'; valid types: attention, "
            "cluster, custom, graph, knn",
        ),
        ({"type": "cluster", "influence_weight": -0.5}, "influence_weight must be >= 0"),
        (
            {"type": "knn", "temporal_config": {"future_weight": 1.5}},
            r"future_weight must be in \[0, 1\], got 1.5",
        ),
        ({"type": "knn", "temporal_config": {"future_weight": -0.1}}, "future_weight must be in"),
        (
            {"type": "knn", "memory_size": 10, "k_neighbors": 20},
            r"k_neighbors=20 is larger than the bank \(memory_size=10\)",
        ),
        ({"type": "cluster", "n_cluster": 3}, r"unknown field\(s\) \['n_cluster'\]"),
        (
            {"type": "graph", "temporal_config": {"future_weight": 0.2}},
            "does not support the position_weighted strategy",
        ),
        ({"type": "knn", "temporal_config": {"strategy": "magic"}}, "unknown similarity strategy"),
        ({"type": "custom"}, "a custom head needs module_path"),
        ({"type": "custom", "module_path": "no_such_pkg.Head"}, "cannot import 'no_such_pkg'"),
        ({"type": "custom", "module_path": "torch.nn.Linear"}, "is not a subclass of"),
        (
            {"type": "custom", "module_path": "kt_lib.heads.similarity.BaseSimilarityHead"},
            "is not a subclass of",
        ),
        ({"type": "custom", "module_path": "kt_lib.heads.similarity.Nope"}, "has no 'Nope'"),
        ({"influence_weight": 1.0}, "needs a 'type'"),
    ],
)
def test_head_config_errors(head, message):
    with pytest.raises(ValueError, match=message):
        load_simakt_config({"intra_heads": 7, "inter_heads": [head]})


def test_config_errors_name_the_source(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("intra_heads: 7\ninter_heads:\n  - type: cluster\n    influence_weight: -1\n")
    with pytest.raises(ValueError, match=r"mine.yaml: inter_heads\[0\]: influence_weight"):
        load_simakt_config(path)
    with pytest.raises(ValueError, match="unknown SimAKT preset or config file 'nope'"):
        load_simakt_config("nope")
    with pytest.raises(ValueError, match="unknown approach 'triple'"):
        load_simakt_config({"approach": "triple"})
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        load_simakt_config({"approach": "none", "colour": "red"})
    with pytest.raises(ValueError, match="unknown encoder 'lstm'"):
        load_simakt_config({**dual(), "memory": {"encoder": "lstm"}})
    with pytest.raises(ValueError, match="folds must be >= 2"):
        load_simakt_config({**dual(), "memory": {"folds": 1}})
    path.write_text("intra_heads: 7\ninter_heads:\n  - type: cluster\n    n_clusters: 3\n")
    assert build_model("simakt", num_c=5, similarity=str(path), **SIZES).n_intra == 7


def test_warning_when_every_inter_head_is_off():
    with pytest.warns(UserWarning, match="every inter-student head has influence_weight 0"):
        load_simakt_config("no_inter_student")
    with pytest.warns(UserWarning, match="influence_weight 0"):
        build_model("simakt", num_c=5, similarity="no_inter_student", **SIZES)


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
                    "module_path": "kt_lib.heads.similarity.DeepSetSimilarity",
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
        parse_head_spec(
            {
                "type": "custom",
                "set_size": 3,
                "module_path": "kt_lib.heads.similarity.DeepSetSimilarity",
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
        model.inter.register_forward_hook(lambda m, i, o, c=captured: c.setdefault("out", o))
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
