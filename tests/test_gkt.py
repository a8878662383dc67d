"""GKT: the concept graph (training students only), one update step against a loop, batch norm
over valid rows, the paper preset's size."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.data.dataset import KTDataset, StudentSeq
from kt_lib.models import build_model
from kt_lib.models.gkt import MaskedBatchNorm, dense_graph
from tests.conftest import make_tiny_dataset

C = 6


def _loop_graph(data: KTDataset) -> torch.Tensor:
    g = np.zeros((data.num_c, data.num_c))
    for s in data.students:
        for a, b in zip(s.q[:-1], s.q[1:], strict=True):
            if a != b:
                g[a, b] += 1
    for i in range(data.num_c):
        if g[i].sum() > 0:
            g[i] /= g[i].sum()
    return torch.tensor(g, dtype=torch.float32)


def test_transition_graph_comes_from_training_students_only():
    train = make_tiny_dataset(C, 0, n=10, seed=3)
    other = make_tiny_dataset(C, 0, n=10, seed=4)
    model = build_model("gkt", preset="tiny", num_c=C)
    with pytest.raises(RuntimeError, match="prepare"):
        model(random_batch(C, B=2, L=5))
    model.prepare(train)
    assert torch.allclose(model.graph, _loop_graph(train), atol=1e-6)
    both = KTDataset(train.students + other.students, num_c=C)
    assert not torch.allclose(model.graph, _loop_graph(both), atol=1e-3)  # the test can fail
    before = model.graph.clone()
    model.train()
    model(random_batch(C, B=3, L=8, seed=5))  # training on other data never moves the graph
    assert torch.equal(model.graph, before)
    assert torch.equal(model.extra_state()["graph"], before)


def test_transition_graph_edges_follow_consecutive_concepts():
    data = KTDataset([StudentSeq(0, np.array([0, 1, 1, 2, 0]), np.zeros(5, dtype=np.int64))], 4)
    model = build_model("gkt", preset="tiny", num_c=4)
    model.prepare(data)
    want = torch.zeros(4, 4)
    want[0, 1] = want[1, 2] = want[2, 0] = 1.0  # 1 -> 1 is dropped (no self loops)
    assert torch.equal(model.graph, want)


def test_dense_graph_needs_no_data():
    model = build_model("gkt", preset="tiny", num_c=C, graph="dense")
    assert torch.allclose(model.graph, dense_graph(C))
    assert torch.allclose(model.graph.sum(1), torch.ones(C)) and model.graph.diagonal().eq(0).all()
    model(random_batch(C, B=2, L=5))  # no prepare needed


def _loop_step(model, H, q, r, valid):
    """The update equations, one student and one concept at a time (eval mode: row-wise MLPs)."""
    A, out = model.graph, H.clone()
    for b in range(H.shape[0]):
        if not valid[b]:
            continue
        i = int(q[b])
        feats = [
            model.emb_x.weight[i + C * int(r[b])] if j == i else model.emb_c.weight[j]
            for j in range(C)
        ]
        Hp = [torch.cat([H[b, j], feats[j]]) for j in range(C)]
        for j in range(C):
            if j == i:
                m = model.f_self(Hp[i][None], torch.ones(1, dtype=torch.bool))[0]
            elif A[i, j] > 0 or A[j, i] > 0:
                x = torch.cat([Hp[i], Hp[j]])[None]
                one = torch.ones(1, dtype=torch.bool)
                m = A[i, j] * model.f_out(x, one)[0] + A[j, i] * model.f_in(x, one)[0]
            else:
                continue  # not a neighbour: untouched
            w = model.gate.weight[j]
            m = m - w * torch.sigmoid(model.gate.erase(m)) * m + w * torch.tanh(model.gate.add(m))
            out[b, j] = model.gru(m[None], H[b, j][None])[0]
    return out


def test_step_matches_a_loop_and_touches_only_the_answered_concept_and_neighbours():
    torch.manual_seed(0)
    # a sparse graph: 0 -> 1, 2 -> 0, 3 -> 4; concept 5 has no edge
    seqs = [[0, 1], [2, 0], [3, 4]]
    students = [StudentSeq(k, np.array(s), np.zeros(2, dtype=np.int64)) for k, s in enumerate(seqs)]
    model = build_model("gkt", preset="tiny", num_c=C)
    model.prepare(KTDataset(students, C))
    for mlp in (model.f_self, model.f_out, model.f_in):  # non-trivial normalisation
        mlp.norm.running_mean.uniform_(-0.5, 0.5)
        mlp.norm.running_var.uniform_(0.5, 2)
    model.eval()
    H = torch.randn(4, C, model.config.d)
    q, r = torch.tensor([0, 5, 3, 0]), torch.tensor([1, 0, 1, 1])
    valid = torch.tensor([True, True, True, False])
    with torch.no_grad():
        got = model.step(H, q, r, valid)
        want = _loop_step(model, H, q, r, valid)
    assert torch.allclose(got, want, atol=1e-5)
    changed = (got - H).abs().amax(-1) > 0  # [B, C]
    assert changed[0].tolist() == [True, True, True, False, False, False]  # 0, 0->1, 2->0
    assert changed[1].tolist() == [False] * 5 + [True]  # isolated concept: only itself
    assert changed[2].tolist() == [False, False, False, True, True, False]
    assert not changed[3].any()  # padding never updates


def _plain_step(model, H, q, r, valid):
    """The update written plainly: the [B, C, 2(D+E)] pair inputs built whole, f_out and f_in
    run as MLPs on them (training mode: batch statistics over every valid (b, j) row)."""
    B, _, D = H.shape
    A, b = model.graph, torch.arange(B)
    Hp = torch.cat([H, model.emb_c.weight.expand(B, C, -1)], -1).clone()
    Hp[b, q, D:] = model.emb_x(q + C * r)
    own = Hp[b, q]
    rows = valid[:, None].expand(B, C).flatten()

    def pair(mlp):
        x = torch.cat([own[:, None].expand(-1, C, -1), Hp], -1).flatten(0, 1)
        return mlp(x, rows).view(B, C, -1)

    m_nb = A[q][..., None] * pair(model.f_out) + A[:, q].T[..., None] * pair(model.f_in)
    m_nb = m_nb.clone()
    m_nb[b, q] = model.f_self(own, valid)
    new = model.gru(model.gate(m_nb).flatten(0, 1), H.flatten(0, 1)).view_as(H)
    touched = (torch.nn.functional.one_hot(q, C).bool() | (A[q] > 0) | (A[:, q].T > 0)) & valid[
        :, None
    ]
    return torch.where(touched[..., None], new, H)


def test_step_matches_a_plain_rewrite_in_training():
    """The step's split first layer (`GraphMLP.pair`: no concatenated input) and the answered
    concept's row give the plain rewrite's state, gradients and running statistics in training
    mode, where that row enters the batch statistics (dropout 0: no draws to match)."""
    torch.manual_seed(0)
    model = build_model("gkt", preset="tiny", num_c=C, dropout=0.0)
    # a sparse one-way graph (0 -> 1, 2 -> 0, 3 -> 4; 5 alone): f_out and f_in apart, and rows
    # that are no neighbour still in the batch statistics
    seqs = [[0, 1], [2, 0], [3, 4]]
    model.prepare(KTDataset([StudentSeq(k, np.array(q), np.zeros(2, dtype=np.int64))
                             for k, q in enumerate(seqs)], C))  # fmt: skip
    assert not torch.equal(model.graph, model.graph.T)
    model.train()
    plain = copy.deepcopy(model)
    H = torch.randn(5, C, model.config.d)
    q, r = torch.tensor([0, 5, 3, 0, 2]), torch.tensor([1, 0, 1, 1, 0])
    valid = torch.tensor([True, True, True, False, True])
    probe = torch.randn_like(H)
    got, want = model.step(H, q, r, valid), _plain_step(plain, H, q, r, valid)
    assert torch.allclose(got, want, atol=1e-5)
    (got * probe).sum().backward()
    (want * probe).sum().backward()
    for (name, a), b in zip(model.named_parameters(), plain.parameters(), strict=True):
        if b.grad is None:
            assert a.grad is None or a.grad.abs().max() == 0, name
            continue
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name
    for (name, a), b in zip(model.named_buffers(), plain.buffers(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.equal(model.f_in.norm.running_mean, torch.zeros_like(probe[0, 0]))


def test_masked_batch_norm_uses_valid_rows_only():
    torch.manual_seed(0)
    ours, ref = MaskedBatchNorm(5), torch.nn.BatchNorm1d(5)
    x = torch.randn(9, 5)
    valid = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    y = ours(x, valid)
    assert torch.allclose(y[valid], ref(x[valid]), atol=1e-5)
    assert torch.allclose(ours.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(ours.running_var, ref.running_var, atol=1e-6)
    x2 = x.clone()
    x2[~valid] = 1e3  # padding never moves the valid rows
    assert torch.allclose(MaskedBatchNorm(5)(x2, valid)[valid], y[valid], atol=1e-5)
    one = torch.zeros(9, dtype=torch.bool)
    one[2] = True  # fewer than two rows: passed through, statistics kept (as pyKT)
    fresh = MaskedBatchNorm(5)
    assert torch.equal(fresh(x, one), x) and fresh.running_mean.eq(0).all()


def test_paper_preset_size():
    model = build_model("gkt", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.emb, c.dropout, c.graph) == (32, 32, 0.5, "transition")
    n = sum(p.numel() for p in model.parameters())
    # pyKT's GKT at these sizes has 31,909 parameters; ours adds H_0 (100 x 32) and drops
    # pyKT's padding row of the concept embedding (32)
    assert n == 31_909 + 3_200 - 32


def test_checkpointed_steps_give_the_same_gradients_and_move_the_statistics_once():
    torch.manual_seed(0)
    train = make_tiny_dataset(C, 0, n=10, seed=3)
    models = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = build_model("gkt", preset="tiny", num_c=C, checkpoint=ckpt)
        model.prepare(train)
        model.train()
        torch.manual_seed(1)  # the same dropout draws
        batch = random_batch(C, B=4, L=12, seed=6)
        model.loss(model(batch), batch)["total"].backward()
        models.append(model)
    plain, ckpt = models
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name
    for (name, a), b in zip(plain.named_buffers(), ckpt.buffers(), strict=True):
        assert torch.equal(a, b), name  # running statistics: not moved again by recomputation
    assert not torch.equal(plain.f_self.norm.running_mean, torch.zeros(8))


def test_steps_are_recomputed_only_where_the_activations_would_pass_the_budget():
    model = build_model("gkt", preset="paper", num_c=100)  # checkpoint None: by the budget
    assert not model.recompute(64, 36)  # ASSIST2015's bucketed batches: ~1.3 GB
    assert model.recompute(64, 200)  # a full batch of 200-step windows: ~7.9 GB
    assert build_model("gkt", preset="paper", num_c=1223).recompute(64, 36)  # Statics2011
    assert build_model("gkt", preset="paper", num_c=100, checkpoint=True).recompute(1, 1)
    assert not build_model("gkt", preset="paper", num_c=100, checkpoint=False).recompute(64, 200)
    small = build_model("gkt", preset="paper", num_c=100, checkpoint_gb=0.5)
    assert small.recompute(64, 36)
    with pytest.raises(ValueError, match="checkpoint_gb must be > 0"):
        build_model("gkt", preset="paper", num_c=100, checkpoint_gb=0)
