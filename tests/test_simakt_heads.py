"""SimAKT's inter-student heads, metrics, sampling and temporal strategies: causal,
self-excluding, against naive loops."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import KTDataset, StudentSeq, Window, collate
from kt_lib.memory import KNNBank
from kt_lib.memory.banks import random_sample
from kt_lib.memory.temporal import (
    TEMPORAL_STRATEGIES,
    build_strategy,
    prefix_aligned_similarity,
)
from kt_lib.models.simakt import bank_rebuilder
from tests.simakt_support import (
    CLUSTER,
    KNN,
    NUM_C,
    NUM_PID,
    L,
    batch_of,
    dual,
    encoded,
    one_fold_batch,
    simakt,
    students,
)

# -- new heads, metrics, sampling and strategies: causal and self-excluding --------------------


def one_head(head: dict, intra: int = 7, **memory) -> dict:
    return {"intra_heads": intra, "memory": {"kmeans_n_init": 1, **memory}, "inter_heads": [head]}


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


# -- bank positions past the first window --------------------------------------------------------


def long_students(n: int = 40, seed: int = 1, shortest: int = 2 * L) -> object:
    """Logs of `shortest` to 3L steps (later windows start at L and 2L)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(shortest, 3 * L + 1))
        out.append(StudentSeq(i, rng.integers(0, NUM_C, m), rng.integers(0, 2, m), None))
    return KTDataset(out, num_c=NUM_C, num_pid=0, name="long")


def test_banks_keep_every_step_at_its_position_in_the_log():
    train = long_students()
    model = simakt(dual(0.0), train)
    cluster, knn = model.inter.heads
    longest = max(len(s) for s in train.students)
    assert cluster.sequences.shape[2] == 3 * L >= longest  # whole windows past the first
    entries = knn.banks[0].uids.tolist()
    lengths = [len(train.students[u]) for u in entries]  # uid i is student i here
    assert knn.banks[0].seq_valid.sum(1).tolist() == lengths  # every step, none past the end


def test_a_later_window_meets_the_bank_at_its_own_steps():
    """Row t of a window that starts at step a is compared with the slots' step a + t: a current
    student whose states equal a cluster's mean states at steps a..a+L-1 is fully similar to it
    at every row (position weighting without future weight averages cos(cur_i, mem_i), i <= t)."""
    train = long_students()
    model = simakt(dual(0.0), train)
    cluster = model.inter.heads[0]
    from kt_lib.heads.inter import HeadContext

    seqs, ok = cluster.sequences, cluster.seq_valid
    for a in (0, L, 2 * L - 3):  # chunk windows and a sliding one
        c = int(ok[0, :, a : a + L].all(-1).float().argmax())  # a slot with all L steps there
        assert ok[0, c, a : a + L].all()
        states = seqs[0, c, a : a + L].unsqueeze(0)
        fold = torch.zeros(1, dtype=torch.long)
        ctx = HeadContext(None, None, states, None, fold, None, start=torch.tensor([a]), span=L)
        sim = cluster.trajectory_similarity(ctx, seqs, ok)[0][0, :, c]
        assert torch.allclose(sim, torch.ones(L), atol=1e-5), (a, sim)
        if a:  # the first window's positions would not match
            ctx0 = HeadContext(None, None, states, None, fold, None, span=L)
            first = cluster.trajectory_similarity(ctx0, seqs, ok)[0]
            assert not torch.allclose(first[0, :, c], sim)


def test_later_windows_read_no_bank_step_before_their_start():
    train = long_students()
    model = simakt(dual(0.3), train)
    windows = [Window(i, L, 2 * L) for i in range(4)] + [Window(i, 0, L) for i in range(4, 8)]
    batch = collate(train, windows, L)
    with torch.no_grad():
        base = model(batch).logits
        for head in model.inter.heads:  # bank steps before L: only the first windows read them
            head.sequences[:, :, :L] += torch.randn_like(head.sequences[:, :, :L])
        moved = model(batch).logits
    assert torch.equal(moved[:4], base[:4])
    assert not torch.allclose(moved[4:], base[4:])


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_later_windows_are_causal_and_self_excluding(mode):
    train = long_students()
    model = simakt(dual(0.3), train)
    own = model.folds.fold_of(torch.as_tensor(train.uids))
    for fold in range(model.folds.n_folds):
        rows = (own == fold).nonzero().squeeze(1)[:4].tolist()
        batch = collate(train, [Window(i, L, 2 * L) for i in rows], L)
        rebuild = bank_rebuilder(train) if mode == "eval" else None
        result = audit_causality(
            model, batch, steps=[0, 7, 15], trials=1, rebuild=rebuild, mode=mode
        )
        assert result, str(result)


def _ctx(states, start, fold=0):
    from kt_lib.heads.inter import HeadContext

    B = states.shape[0]
    folds = torch.full((B,), fold, dtype=torch.long)
    return HeadContext(None, None, states, None, folds, None, start=torch.tensor(start), span=L)


def test_a_window_reads_span_steps_of_the_bank_from_its_start():
    """The first window of a log longer than the span reads the bank's first L steps only (as
    before bank sequences held whole logs), a window straddling the bank's end reads its steps
    up to S and nothing past it."""
    train = long_students()
    model = simakt(dual(0.3), train)
    cluster = model.inter.heads[0]
    seqs, ok = cluster.sequences, cluster.seq_valid
    S = seqs.shape[2]
    states = torch.randn(2, L, seqs.shape[-1], generator=torch.Generator().manual_seed(0))
    for a in (0, S - 5):
        sim, readable = cluster.trajectory_similarity(_ctx(states, [a, a]), seqs, ok)
        mem, valid = seqs[0, :, a : a + L], ok[0, :, a : a + L]
        mem = torch.cat([mem, mem.new_zeros(mem.shape[0], L - mem.shape[1], mem.shape[2])], 1)
        valid = torch.cat([valid, valid.new_zeros(valid.shape[0], L - valid.shape[1])], 1)
        assert torch.allclose(sim, cluster.temporal(states, mem, valid), atol=1e-6), a
        assert torch.equal(readable, ok[0, :, a].expand(2, -1))


def test_slots_without_the_windows_first_step_are_not_attended():
    """KNN entries and clusters whose logs end before a later window starts have nothing to
    compare there: they get no attention weight (not a share for a similarity of 0)."""
    train = long_students(shortest=L // 2)  # some logs end within the first window
    model = simakt(dual(0.3), train)
    cluster, knn = model.inter.heads
    own = model.folds.fold_of(torch.as_tensor(train.uids))
    rows = (own == 0).nonzero().squeeze(1)[:4].tolist()
    batch = collate(train, [Window(i, L, min(2 * L, len(train.students[i]))) for i in rows], L)
    ended = knn.seq_valid[0, :, L] == 0  # entries of fold 0 without step L
    assert ended.any() and (~ended & knn.entry_valid[0]).any()
    with torch.no_grad():
        maps = model(batch, return_attention=True).attention
    w = maps[f"block3.{knn.spec.name}"]  # [B, L, M]
    assert (w[..., ended] == 0).all() and (w.sum(-1) > 0.99).all()
    late = (cluster.seq_valid[0, :, L] == 0) & cluster.slot_valid[0]
    if late.any():
        assert (maps[f"block3.{cluster.spec.name}"][..., late] == 0).all()


def test_a_bank_of_first_windows_only_is_refused():
    """Banks built before bank sequences kept whole logs (first max_len steps only) would leave
    every later window with nothing to read: installing one is an error naming the fix."""
    train = long_students()
    model = simakt(dual(0.3), train)
    knn = model.inter.heads[1]
    old = [
        dataclasses.replace(b, sequences=b.sequences[:, :L], seq_valid=b.seq_valid[:, :L])
        for b in knn.banks
    ]
    with pytest.raises(ValueError, match="keeps 16 steps per sequence.*model.prepare"):
        knn.install(old)
