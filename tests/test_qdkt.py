"""qDKT: the per-problem LSTM against a plain loop, problems read instead of skills, what it
refuses, the paper preset's size."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def test_refuses_skill_only_data_by_name():
    skills_only = make_tiny_dataset(NUM_C, 0)
    with pytest.raises(ValueError, match=r"qdkt needs problem ids \(pid\), and tiny has none"):
        build_model("qdkt", preset="tiny", dataset=skills_only)
    build_model("qdkt", preset="tiny", dataset=make_tiny_dataset(NUM_C, NUM_PID))


def test_paper_preset_size():
    # 100 skills, 1000 problems: 2P*300 + LSTM 4*(600*300 + 600) + (300 + 1)*P = 1,623,400
    model = build_model("qdkt", preset="paper", num_c=100, num_pid=1000)
    n = sum(p.numel() for p in model.parameters())
    assert 1_600_000 <= n <= 1_650_000, n
    assert n == 1_623_400


def _model(**kw):
    torch.manual_seed(0)
    return build_model("qdkt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw).double().eval()


def test_qdkt_matches_a_plain_lstm_loop_with_the_full_output_layer():
    model = _model()
    b = random_batch(NUM_C, B=3, L=9, num_pid=NUM_PID, seed=3)
    cell = torch.nn.LSTMCell(model.config.d, model.config.d).double()
    cell.weight_ih.data, cell.weight_hh.data = model.lstm.weight_ih_l0, model.lstm.weight_hh_l0
    cell.bias_ih.data, cell.bias_hh.data = model.lstm.bias_ih_l0, model.lstm.bias_hh_l0
    h = c = torch.zeros(3, model.config.d, dtype=torch.float64)
    x = torch.zeros(3, model.config.d, dtype=torch.float64)  # the zero start input
    want = []
    for t in range(9):
        h, c = cell(x, (h, c))
        y = model.out(h)  # [B, P]: every problem's logit
        want.append(y.gather(1, b.pid[:, t : t + 1]).squeeze(1))
        x = model.emb.weight[b.pid[:, t] + NUM_PID * b.r[:, t]]
    with torch.no_grad():
        assert torch.allclose(model(b).logits, torch.stack(want, 1), atol=1e-10)


def test_qdkt_reads_problems_not_skills():
    model = _model()
    b = random_batch(NUM_C, B=3, L=9, num_pid=NUM_PID, seed=4)
    other = b.clone()
    other.q = (b.q + 1) % NUM_C * b.mask
    with torch.no_grad():
        assert torch.equal(model(b).logits, model(other).logits)
        other.pid[:, 5] = (b.pid[:, 5] + 1) % NUM_PID
        moved = model(other).logits != model(b).logits
    assert not moved[:, :5].any() and moved[:, 5].all()


def test_prepare_warns_where_a_multi_skill_problem_was_expanded_into_copies():
    """A problem tagged with two skills is two rows of one (pid, r): qDKT would learn the copy;
    a retry of a problem under the same skill is a real attempt and warns nothing."""
    import warnings

    import numpy as np

    from kt_lib.data.dataset import KTDataset, StudentSeq

    def data(q, pid):
        r = [1, 1, 0, 0]
        seq = StudentSeq(0, np.array(q), np.array(r), np.array(pid))
        return KTDataset([seq], num_c=3, num_pid=3, name="toy")

    for name in ("qdkt", "iekt"):  # the problem-id models that pyKT trains question by question
        model = build_model(name, preset="tiny", num_c=3, num_pid=3)
        with pytest.warns(UserWarning, match=f"{name}: 2 of 4 training rows of toy repeat"):
            model.prepare(data([0, 1, 2, 0], [1, 1, 2, 2]))  # problems 1 and 2: two skills each
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model.prepare(data([0, 0, 2, 2], [1, 1, 2, 2]))  # retries under the same skill
    # a two-skill problem answered twice alike: two attempts, each one copy (not three)
    again = KTDataset([StudentSeq(0, np.array([0, 1, 0, 1]), np.ones(4, int), np.full(4, 5))], 2, 6)
    assert again.problem_copies() == 2
