"""The evaluation protocol (kt_lib.evaluate): scored rows, per-question rows, sliding histories."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.base import BaseConfig, KTModel, ModelOutput


def test_an_immediate_second_attempt_at_a_multi_skill_problem_is_a_new_question():
    from kt_lib.evaluate import question_rows

    # (P,a),(P,b),(P,a),(P,b) then (Q,a): attempts 1 and 2 of P, then Q
    pred = {
        "y_true": np.zeros(5),
        "uid": np.zeros(5, dtype=int),
        "step": np.arange(5),
        "pid": np.array([7, 7, 7, 7, 8]),
        "q": np.array([0, 1, 0, 1, 0]),
    }
    assert question_rows(pred).tolist() == [True, False, True, False, True]
    pred["q"] = np.array([0, 0, 0, 1, 1])  # same skill again: three attempts, the last two-skill
    assert question_rows(pred).tolist() == [True, True, True, False, True]


class _CopyPrevious(KTModel):
    """Predicts r[t-1] (causal): on multi-skill rows it copies the answer to the same question."""

    config_cls = BaseConfig

    def __init__(self, config):
        super().__init__(config)
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, batch, return_attention=False):
        prev = torch.nn.functional.pad(batch.r.float(), (1, 0))[:, :-1]
        return ModelOutput(logits=(4 * prev - 2) * self.w)


def test_per_question_evaluation_drops_repeated_rows_of_a_problem():
    """GUIDE section 9: rows of one multi-skill problem must not score each other's answers."""
    from kt_lib.data.dataset import KTDataset, StudentSeq
    from kt_lib.evaluate import evaluate

    rng = np.random.default_rng(0)
    students = []
    for uid in range(60):
        pid, q, r = [], [], []
        for problem in rng.integers(0, 30, 25):
            answer = int(rng.integers(0, 2))  # independent of the past: nothing to learn
            for skill in range(1 + problem % 3):  # 1-3 distinct skills per problem, one row each
                pid.append(problem)
                q.append(int(problem + skill) % 5)
                r.append(answer)
        students.append(StudentSeq(uid, np.array(q), np.array(r), np.array(pid)))
    data = KTDataset(students, num_c=5, num_pid=30)
    model = _CopyPrevious(BaseConfig(num_c=5, num_pid=30))
    rows = evaluate(model, data, rows="per_row")
    per_q = evaluate(model, data)
    assert rows["auc"] > 0.7  # inflated by copying the same question's earlier row
    assert abs(per_q["auc"] - 0.5) < 0.05  # per question: chance, as it should be
    assert per_q["rows_merged"] > 0 and per_q["n"] + per_q["rows_merged"] == rows["n"]
    again = [StudentSeq(0, np.array([1, 1, 2]), np.array([0, 1, 1]), np.array([7, 7, 7]))]
    retry = evaluate(model, KTDataset(again, num_c=5, num_pid=30))  # 7 twice with skill 1: a retry
    assert retry["rows_merged"] == 1 and retry["n"] == 2


def test_sliding_windows_score_every_step_once_with_its_history():
    from kt_lib.data.dataset import KTDataset, StudentSeq, sliding

    lengths = [0, 1, 5, 8, 9, 30]
    data = KTDataset(
        [StudentSeq(u, np.zeros(n, int), np.zeros(n, int)) for u, n in enumerate(lengths)], 3
    )
    for stride in (1, 3, 8):
        scored = {}
        for w in sliding(data, 8, stride):
            assert w.stop - w.start <= 8 and 0 <= w.context < w.stop - w.start
            for t in range(w.start + w.context, w.stop):
                assert (w.student, t) not in scored
                scored[(w.student, t)] = t - w.start  # steps of history
        assert sorted(scored) == [(i, t) for i, n in enumerate(lengths) for t in range(n)]
        hist = np.array([scored[(i, t)] for (i, t) in scored if t >= 8])
        assert hist.max() == 7 and hist.min() == 8 - stride  # stride 1: exactly max_len - 1
        assert all(h == t for (i, t), h in scored.items() if t < 8)  # whole log so far
    # a stride past max_len would skip the steps between one window's end and the next's start
    with pytest.raises(ValueError, match="stride 9 > max_len 8 would leave steps unscored"):
        sliding(data, 8, 9)


@pytest.mark.parametrize("name", ["sakt", "akt"])
def test_sliding_history_predicts_each_step_from_its_last_max_len_steps(name):
    """predict(history="sliding") equals one forward per step on the log slice ending there;
    history="window" equals one forward per chunk."""
    from kt_lib.data.dataset import KTDataset, StudentSeq
    from kt_lib.evaluate import evaluate_protocols, predict

    rng = np.random.default_rng(1)
    students = [
        StudentSeq(u, rng.integers(0, 4, n), rng.integers(0, 2, n))
        for u, n in enumerate([3, 11, 17])
    ]
    data = KTDataset(students, num_c=4)
    torch.manual_seed(0)
    model = build_model(name, dataset=data, preset="tiny").eval()

    def alone(s, a, b):  # P(correct) of the slice s[a:b] run alone
        one = lambda x: torch.as_tensor(x[a:b]).unsqueeze(0)  # noqa: E731
        batch = Batch(
            one(s.q),
            one(s.r),
            torch.ones(1, b - a, dtype=torch.bool),
            uid=torch.tensor([s.uid]),
            start=torch.tensor([a]),
        )
        with torch.no_grad():
            return model.probabilities(model(batch))[0].numpy()

    L = 6
    slide = predict(model, data, batch_size=4, max_len=L, history="sliding")
    want = [alone(s, max(0, t - L + 1), t + 1)[-1] for s in students for t in range(len(s))]
    np.testing.assert_allclose(slide["prob"], want, rtol=1e-5, atol=1e-6)
    assert slide["step"].tolist() == [t for s in students for t in range(len(s))]
    win = predict(model, data, batch_size=4, max_len=L)
    want = [alone(s, a, min(a + L, len(s))) for s in students for a in range(0, len(s), L)]
    np.testing.assert_allclose(win["prob"], np.concatenate(want), rtol=1e-5, atol=1e-6)
    both = evaluate_protocols(model, data, max_len=L, histories=("window", "sliding"))
    assert set(both) == {
        "per_question/window",
        "per_row/window",
        "per_question/sliding",
        "per_row/sliding",
    }
    plain = {k: v for k, v in both["per_question/window"].items() if "@" not in k}
    assert both["per_row/window"] == plain  # no problem ids; the default adds its breakdown
    assert both["per_row/sliding"]["auc"] != both["per_row/window"]["auc"]
    short = evaluate_protocols(model, data, max_len=20, histories=("window", "sliding"))
    assert short["per_row/sliding"] == short["per_row/window"]  # no log longer than max_len
    with pytest.raises(ValueError, match="history must be one of"):
        predict(model, data, history="slide")


def test_history_breakdown_scores_each_position_bucket_and_length_quartile():
    """AUC by history length: each bucket scores exactly its rows (checked against sklearn on
    the rows picked by hand), and the counts add up to every scored row."""
    from sklearn.metrics import roc_auc_score

    from kt_lib.evaluate import history_breakdown

    rng = np.random.default_rng(0)
    lengths = {0: 5, 1: 30, 2: 80, 3: 260}
    uid = np.concatenate([np.full(n, u) for u, n in lengths.items()])
    step = np.concatenate([np.arange(n) for n in lengths.values()])
    y = rng.integers(0, 2, len(uid))
    prob = np.clip(0.3 * y + rng.random(len(uid)) * 0.7, 0, 1)
    pred = {"y_true": y, "prob": prob, "uid": uid, "step": step, "q": np.zeros_like(uid)}
    out = history_breakdown(pred, lengths)
    sel = (step >= 10) & (step < 50)  # positions 11-50 (1-based)
    assert out["n@pos11-50"] == sel.sum()
    assert out["auc@pos11-50"] == pytest.approx(roc_auc_score(y[sel], prob[sel]))
    assert out["n@pos201+"] == 60
    assert sum(out[f"n@pos{b}"] for b in ("1-10", "11-50", "51-200", "201+")) == len(y)
    later = step >= 1  # every step but each student's first (pyKT's scored steps)
    assert out["n@pos2+"] == len(y) - len(lengths)
    assert out["auc@pos2+"] == pytest.approx(roc_auc_score(y[later], prob[later]))
    assert sum(out[f"n@lenq{b}"] for b in range(1, 5)) == len(y)
    assert out["n@lenq4"] == 260  # the longest student alone in the top quartile
    assert out["auc@lenq4"] == pytest.approx(roc_auc_score(y[uid == 3], prob[uid == 3]))


def test_length_quartiles_count_each_student_once_with_tied_lengths():
    """The length bands are quartiles of the students, not of the distinct lengths: six students
    of length 5 and two long ones put the six short ones in the lowest band (a set of lengths
    made the edges 52.5/100/150 and left one band empty)."""
    from kt_lib.evaluate import history_breakdown

    lengths = {u: 5 for u in range(6)} | {6: 100, 7: 200}
    uid = np.concatenate([np.full(n, u) for u, n in lengths.items()])
    step = np.concatenate([np.arange(n) for n in lengths.values()])
    y = np.arange(len(uid)) % 2
    pred = {"y_true": y, "prob": np.full(len(uid), 0.5), "uid": uid, "step": step,
            "q": np.zeros_like(uid)}  # fmt: skip
    out = history_breakdown(pred, lengths)
    # edges over the eight students: 5, 5, 28.75 -> (.., 5] holds the six, (28.75, ..] the two
    assert out["n@lenq1"] == 30 and out["n@lenq2"] == 0 and out["n@lenq3"] == 0
    assert out["n@lenq4"] == 300


@pytest.mark.parametrize("name", ["dkt", "gkt", "akt"])
def test_windows_are_batched_longest_first_and_rows_come_back_in_log_order(name, monkeypatch):
    """Each batch pads only to its own rows (lengths sorted, longest first), and the rows equal
    those of one window at a time (no neighbour, no padding), in (student, step) order."""
    from kt_lib import evaluate as ev
    from kt_lib.data.dataset import KTDataset, StudentSeq

    rng = np.random.default_rng(2)
    lengths = [3, 19, 1, 7, 12, 2, 19, 5, 9, 4]
    students = [StudentSeq(u, rng.integers(0, 4, n), rng.integers(0, 2, n))
                for u, n in enumerate(lengths)]  # fmt: skip
    data = KTDataset(students, num_c=4)
    torch.manual_seed(0)
    model = build_model(name, dataset=data, preset="tiny")
    model.prepare(data)
    padded = []
    real = ev.collate
    monkeypatch.setattr(ev, "collate", lambda d, part: padded.append(
        [w.stop - w.start for w in part]) or real(d, part))  # fmt: skip
    got = ev.predict(model, data, batch_size=3, max_len=10)
    flat = [n for batch in padded for n in batch]
    assert flat == sorted(flat, reverse=True)  # longest first: 10, 10, 9, 9, 9, 7, ...
    one = ev.predict(model, data, batch_size=1, max_len=10)
    np.testing.assert_allclose(got["prob"], one["prob"], rtol=1e-5, atol=1e-6)
    order = [(s.uid, t) for s in students for t in range(len(s))]
    assert list(zip(got["uid"].tolist(), got["step"].tolist(), strict=True)) == order
    assert got["y_true"].tolist() == [int(x) for s in students for x in s.r]
