"""The GPCM layer, the ordinal losses and the ordinal metrics on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from kt_lib.heads.gpcm import (
    GPCMHead,
    emd_loss,
    gpcm_logits,
    ordered_thresholds,
    parse_loss,
    qwk_loss,
)
from kt_lib.metrics import ordinal_confusion_matrix, ordinal_metrics, predict_category

K = 4


# --- GPCM layer and ordinal losses -------------------------------------------------------------


def test_gpcm_matches_the_formula_and_sums_to_one():
    g = torch.Generator().manual_seed(0)
    theta, alpha = torch.randn(5, generator=g), torch.rand(5, generator=g) + 0.5
    beta = torch.sort(torch.randn(5, 3, generator=g), dim=-1).values
    prob = gpcm_logits(theta, alpha, beta).softmax(-1)
    assert torch.allclose(prob.sum(-1), torch.ones(5))
    for i in range(5):
        z = [0.0]
        for h in range(3):
            z.append(z[-1] + float(alpha[i] * (theta[i] - beta[i, h])))
        expected = np.exp(z) / np.exp(z).sum()
        assert np.allclose(prob[i].numpy(), expected, atol=1e-6)


def test_gpcm_with_two_categories_is_2pl():
    theta, alpha, beta = torch.randn(7), torch.rand(7) + 0.2, torch.randn(7)
    prob = gpcm_logits(theta, alpha, beta.unsqueeze(-1)).softmax(-1)
    assert torch.allclose(prob[:, 1], torch.sigmoid(alpha * (theta - beta)), atol=1e-6)


def test_gpcm_head_keeps_thresholds_ordered_and_alpha_positive():
    head = GPCMHead(num_items=30, K=5)
    for p in head.parameters():
        torch.nn.init.normal_(p, std=3.0)
    alpha, thresholds = head.item_parameters()
    assert alpha.shape == (30,) and (alpha > 0).all()
    assert thresholds.shape == (30, 4) and (thresholds.diff(dim=-1) > 0).all()
    out = head(torch.randn(2, 6), torch.randint(0, 30, (2, 6)))
    assert out.logits.shape == (2, 6, 5) and out.thresholds.shape == (2, 6, 4)
    assert torch.allclose(
        ordered_thresholds(torch.zeros(1, 1), torch.zeros(1, 0)), torch.zeros(1, 1)
    )
    with pytest.raises(ValueError, match="K >= 2"):
        GPCMHead(3, 1)


def test_free_thresholds_start_where_ordered_ones_do_and_fit_a_disordered_item():
    """`ordered=False`: the same starting thresholds; an item whose middle category is rare
    (thresholds out of order, as OULAD's narrow 60-69 band makes them) is recovered by the free
    head, while the ordered head cannot leave the log-concave distributions."""
    free, ordered = GPCMHead(1, 4, ordered=False), GPCMHead(1, 4)
    assert torch.allclose(free.item_parameters()[1], ordered.item_parameters()[1])
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(4000, generator=g)
    truth = torch.tensor([[-1.0, 1.0, 0.0]])  # beta_1 > beta_2: category 2 is rare
    y = torch.multinomial(gpcm_logits(theta, torch.ones(()), truth).softmax(-1), 1, generator=g)
    fitted = {}
    for name, head in (("free", free), ("ordered", ordered)):
        opt = torch.optim.LBFGS(head.parameters(), max_iter=60, line_search_fn="strong_wolfe")

        def nll(head=head, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(head(theta, torch.zeros_like(y[:, 0])).logits, y[:, 0])
            loss.backward()
            return loss

        opt.step(nll)
        fitted[name] = (float(nll().detach()), head.item_parameters()[1][0].detach())
    assert torch.allclose(fitted["free"][1], truth[0], atol=0.2)  # recovered, out of order
    assert (fitted["ordered"][1].diff() > 0).all()
    assert fitted["free"][0] < fitted["ordered"][0] - 0.005  # and a better fit


def test_ordinal_losses_prefer_near_misses():
    target = torch.tensor([3])
    near, far = torch.tensor([[0.0, 0, 9, 0]]), torch.tensor([[9.0, 0, 0, 0]])
    perfect = torch.tensor([[0.0, 0, 0, 30]])
    assert emd_loss(near, target) < emd_loss(far, target)
    assert emd_loss(perfect, target) < 1e-6
    assert F.cross_entropy(near, target) == pytest.approx(float(F.cross_entropy(far, target)))
    targets = torch.tensor([0, 1, 2, 3])
    assert qwk_loss(torch.eye(4) * 30, targets) < 1e-6
    assert qwk_loss(torch.eye(4)[[1, 2, 3, 2]] * 30, targets) < qwk_loss(
        torch.eye(4)[[3, 3, 0, 0]] * 30, targets
    )
    assert parse_loss("ce+emd") == ["ce", "emd"]
    with pytest.raises(ValueError, match="distinct"):
        parse_loss("ce+ce")
    with pytest.raises(KeyError, match="valid names"):
        parse_loss("hinge")


# --- metrics on hand-checked cases -------------------------------------------------------------


def test_ordinal_metrics_hand_checked():
    y = np.array([0, 1, 2, 3, 3])
    prob = np.eye(4)[[0, 1, 1, 0, 3]]  # errors 0, 0, 1, 3, 0
    m = ordinal_metrics(y, prob)
    # QWK by hand: observed sum (i-j)^2 / n = 10/5; expected from the marginals [1,1,1,2] x
    # [2,2,0,1] is 80/25; 1 - 2/3.2 = 0.375
    assert m["qwk"] == pytest.approx(0.375)
    assert m["acc"] == pytest.approx(0.6)
    assert m["adjacent_acc"] == pytest.approx(0.8)
    assert m["mae"] == pytest.approx(0.8)
    assert m["near_miss"] == pytest.approx(0.2)
    assert m["large_error"] == pytest.approx(0.2)
    assert [m[f"f1_{k}"] for k in range(4)] == pytest.approx([2 / 3, 2 / 3, 0, 2 / 3])
    assert m["macro_f1"] == pytest.approx(0.5)
    assert m["n"] == 5 and "auc" not in m
    assert all(isinstance(v, (float, int)) for v in m.values())
    cm = ordinal_confusion_matrix(y, prob)
    expected = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 1]])
    assert np.array_equal(cm, expected)


def test_large_error_bound_and_prediction_rule():
    y = np.array([0, 1, 2, 3, 3])
    prob = np.eye(4)[[0, 1, 1, 1, 0]]  # errors 0, 0, 1, 2, 3
    assert ordinal_metrics(y, prob)["large_error"] == pytest.approx(0.2)
    assert ordinal_metrics(y, prob, large_error=1)["large_error"] == pytest.approx(0.4)
    skewed = np.array([[0.4, 0.0, 0.0, 0.6], [0.1, 0.5, 0.0, 0.4]])  # E = 1.8, 1.7
    assert predict_category(skewed).tolist() == [3, 1]
    assert predict_category(skewed, "expectation").tolist() == [2, 2]
    m = ordinal_metrics(np.array([2, 2]), skewed, prediction="expectation")
    assert m["acc"] == 1.0 and m["mae"] == 0.0
    with pytest.raises(ValueError, match="argmax' or 'expectation"):
        predict_category(skewed, "median")
    with pytest.raises(ValueError, match="large_error must be >= 1"):
        ordinal_metrics(y, prob, large_error=0)
    with pytest.raises(ValueError, match=r"prob must be \[n, K\]"):
        ordinal_metrics(y, prob[:3])


def test_ordinal_metrics_edge_cases_and_binary():
    y = np.array([0, 1, 2, 1])
    perfect = ordinal_metrics(y, np.eye(3)[y])
    assert perfect["qwk"] == 1.0 and perfect["mae"] == 0.0 and perfect["large_error"] == 0.0
    assert np.isnan(ordinal_metrics(np.zeros(3), np.eye(2)[[0, 0, 0]])["qwk"])
    yb = np.array([0, 1, 1, 0, 1])
    pb = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.4, 0.6], [0.1, 0.9]])
    mb = ordinal_metrics(yb, pb)
    assert mb["auc"] == pytest.approx(roc_auc_score(yb, pb[:, 1]))
    assert mb["acc"] == pytest.approx(0.6) and {"rmse", "logloss"} <= set(mb)


@pytest.mark.parametrize(
    "name", ["dkt_gpcm", "attention_gpcm", "modular_attention_gpcm", "gpcm_irt"]
)
def test_every_gpcm_model_takes_free_thresholds(name):
    from kt_lib.models import build_model

    assert build_model(name, preset="tiny", num_c=5, K=4).gpcm.ordered
    model = build_model(name, preset="tiny", num_c=5, K=4, ordered_thresholds=False)
    assert not model.gpcm.ordered
