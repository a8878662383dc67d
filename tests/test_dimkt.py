"""DIMKT: difficulty levels and the gated recurrence against plain loops, tables learned from the
training students only (through `fit`) and restored by extra_state, what it refuses, the paper
preset's size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.data.dataset import KTDataset, StudentSeq
from kt_lib.models import build_model
from kt_lib.models.dimkt import difficulty_levels
from kt_lib.train import fit
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def test_refuses_skill_only_data_by_name():
    skills_only = make_tiny_dataset(NUM_C, 0)
    with pytest.raises(ValueError, match=r"dimkt needs problem ids \(pid\), and tiny has none"):
        build_model("dimkt", preset="tiny", dataset=skills_only)
    build_model("dimkt", preset="tiny", dataset=make_tiny_dataset(NUM_C, NUM_PID))


def test_paper_preset_size():
    # 100 skills, 1000 problems: (P + C + 2 * 101 + 2 + 1) * 128 + 2 * (4 * 128 + 1) * 128
    # + 2 * (128 + 1) * 128 + 2 * (2 * 128 + 1) * 128 = 397,184
    model = build_model("dimkt", preset="paper", num_c=100, num_pid=1000)
    n = sum(p.numel() for p in model.parameters())
    assert 380_000 <= n <= 420_000, n


def _model(**kw):
    torch.manual_seed(0)
    return build_model("dimkt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw).double().eval()


def test_difficulty_levels_match_a_plain_loop():
    rng = np.random.default_rng(0)
    ids, r = rng.integers(0, 9, 200), rng.integers(0, 2, 200)
    r[ids == 4] = 1  # an all-correct item: rate 1 goes to the top level, not past it
    levels, min_count = 7, 20
    got = difficulty_levels(ids, r.astype(float), 10, levels, min_count)  # id 9 is never seen
    for i in range(10):
        answers = [int(x) for x, j in zip(r, ids, strict=True) if j == i]
        if len(answers) < min_count:
            want = levels
        else:
            want = min(int(sum(answers) / len(answers) * levels), levels - 1)
        assert got[i] == want, i
    assert got[9] == levels and got[4] == levels - 1


def _dimkt_loop(model, b):
    """The authors' step as pyKT writes it (concatenations into each gate), h_{t-1} . x_t."""
    qd, cd = model.qd_table[b.pid], model.cd_table[b.q]
    qd_e, cd_e, a_e = model.qd_emb(qd), model.cd_emb(cd), model.a_emb(b.r)
    x = model.input(torch.cat([model.q_emb(b.pid), model.c_emb(b.q), qd_e, cd_e], -1))
    k = model.k0.expand(b.q.shape[0], -1)
    logits = []
    for t in range(b.q.shape[1]):
        logits.append((x[:, t] * k).sum(-1))
        qq = k - x[:, t]
        sdf = torch.sigmoid(model.sdf_gate(qq)) * torch.tanh(model.sdf_cand(qq))
        inp = torch.cat([sdf, a_e[:, t]], -1)
        pka = torch.sigmoid(model.pka_gate(inp)) * torch.tanh(model.pka_cand(inp))
        g = torch.sigmoid(model.ksu_gate(torch.cat([k, a_e[:, t], cd_e[:, t], qd_e[:, t]], -1)))
        k = g * k + (1 - g) * pka
    return torch.stack(logits, 1)


def test_dimkt_recurrence_matches_the_gates_written_plainly():
    model = _model()
    model.prepare(make_tiny_dataset(NUM_C, NUM_PID))
    assert (model.qd_table < model.config.difficult_levels).any()  # some levels learned
    b = random_batch(NUM_C, B=3, L=11, num_pid=NUM_PID, seed=5)
    with torch.no_grad():
        assert torch.allclose(model(b).logits, _dimkt_loop(model, b), atol=1e-10)


def _split(flip_valid: bool = False, flip_train: bool = False):
    data = make_tiny_dataset(NUM_C, NUM_PID, n=40)
    students = [StudentSeq(s.uid, s.q, s.r.copy(), s.pid) for s in data.students]
    if flip_valid:
        for s in students[30:]:
            s.r[:] = 1 - s.r
    if flip_train:
        students[0].r[:] = 1 - students[0].r
    data = KTDataset(students, NUM_C, NUM_PID, name="tiny")
    return data.subset(range(30), "train"), data.subset(range(30, 40), "valid")


def _fitted_tables(train, valid):
    torch.manual_seed(0)
    # 100 levels over items answered ~20 times: any change of a correct count moves a level
    model = build_model("dimkt", preset="tiny", dataset=train, difficult_levels=100)
    fit(model, train, valid, epochs=1, max_len=16, progress=False)
    return model.extra_state()


def test_dimkt_tables_come_from_the_training_students_only():
    train, valid = _split()
    tables = _fitted_tables(train, valid)
    cfg = (100, 3)
    pid = np.concatenate([s.pid for s in train.students])
    r = np.concatenate([s.r for s in train.students]).astype(float)
    assert torch.equal(tables["qd_table"], difficulty_levels(pid, r, NUM_PID, *cfg))
    # validation answers cannot move the tables; one training student's can
    for name, t in _fitted_tables(*_split(flip_valid=True)).items():
        assert torch.equal(t, tables[name]), name
    moved = _fitted_tables(*_split(flip_train=True))
    assert not torch.equal(moved["qd_table"], tables["qd_table"])
    assert not torch.equal(moved["cd_table"], tables["cd_table"])


def test_dimkt_extra_state_restores_the_tables():
    model = _model()
    model.prepare(make_tiny_dataset(NUM_C, NUM_PID))
    fresh = _model()
    assert not torch.equal(fresh.qd_table, model.qd_table)
    fresh.load_extra_state(model.extra_state())
    assert torch.equal(fresh.qd_table, model.qd_table)
    assert torch.equal(fresh.cd_table, model.cd_table)
