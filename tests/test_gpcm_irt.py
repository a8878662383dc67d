"""gpcm_irt, the item-only GPCM reference: it reads the item asked and nothing of the student,
and fitting it recovers item thresholds and discriminations from item-only GPCM data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kt_lib.audit import audit_alignment, audit_causality, random_batch
from kt_lib.data.dataset import Batch
from kt_lib.heads.gpcm import gpcm_logits
from kt_lib.models import build_model


def test_predictions_read_the_item_only():
    torch.manual_seed(0)
    model = build_model("gpcm_irt", preset="tiny", num_c=6, K=4)
    batch = random_batch(6, B=3, L=10, K=4, seed=2)
    assert audit_causality(model, batch, steps=list(range(10)), trials=2)
    assert audit_alignment(model, batch)
    flipped = Batch(batch.q, (batch.r + 1) % 4, batch.mask, batch.pid, batch.uid, batch.start)
    assert torch.equal(model(batch).logits, model(flipped).logits)  # no response is read
    with_pid = build_model("gpcm_irt", preset="tiny", num_c=6, num_pid=12, K=4)
    assert with_pid.gpcm.alpha_raw.num_embeddings == 12  # problems are the items
    with pytest.raises(ValueError, match="problem ids"):
        with_pid(batch)


def test_fitting_recovers_each_items_category_probabilities():
    """Items with known GPCM parameters answered by a population at theta = 0: one ability for
    all identifies each item's category probabilities (not alpha and beta apart), and the fitted
    model finds them."""
    rng = np.random.default_rng(0)
    N, K, n = 8, 4, 8000
    alpha = torch.tensor(rng.uniform(0.6, 2.0, N), dtype=torch.float32)
    base = torch.tensor(rng.uniform(-1.5, 0.5, N), dtype=torch.float32)
    thresholds = base[:, None] + torch.tensor([0.0, 0.8, 1.6])  # [N, K-1]
    truth = torch.softmax(gpcm_logits(torch.zeros(N), alpha, thresholds), -1)  # [N, K]
    items = torch.tensor(rng.integers(0, N, n))
    y = torch.multinomial(truth[items], 1, generator=torch.Generator().manual_seed(0))[:, 0]
    torch.manual_seed(0)
    model = build_model("gpcm_irt", preset="tiny", num_c=N, K=K)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    q = items.view(1, -1)
    batch = Batch(q, y.view(1, -1), torch.ones_like(q, dtype=torch.bool))
    for _ in range(120):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(batch).logits[0], y).backward()
        opt.step()
    each = Batch(torch.arange(N).view(1, -1), torch.zeros(1, N, dtype=torch.long),
                 torch.ones(1, N, dtype=torch.bool))  # fmt: skip
    fitted = torch.softmax(model(each).logits[0], -1).detach()
    assert (fitted - truth).abs().max() < 0.04  # ~1000 answers an item: sampling error ~0.015
    assert (model(each).extras["thresholds"][0].diff(dim=-1) > 0).all()  # still ordered
