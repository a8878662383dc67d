"""SAKT's query positions (seed 004: Q = E(qry) + P; pyKT's sakt.py: Q = E(qry))."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.models import build_model

NUM_C, L = 9, 12


def _model(**kw):
    torch.manual_seed(0)
    return build_model("sakt", preset="tiny", num_c=NUM_C, **kw).eval()


@pytest.mark.parametrize("query_positions", [True, False])
def test_the_last_query_reads_its_position_only_when_asked(query_positions):
    """P[L-1] is read by the query at step L-1 alone (no query reads the key at step L-1), so
    moving it moves that prediction iff the queries carry positions; the others never move."""
    model, b = _model(query_positions=query_positions), random_batch(NUM_C, B=3, L=L, seed=1)
    with torch.no_grad():
        before = model(b).logits
        model.net.P.weight[L - 1] += 1.0
        after = model(b).logits
    assert torch.equal(before[:, : L - 1], after[:, : L - 1])
    moved = (before[:, L - 1] - after[:, L - 1]).abs().max().item()
    assert (moved > 1e-4) == query_positions, moved


def test_queries_without_positions_are_the_question_embeddings_and_stay_causal():
    with_p, without = _model(), _model(query_positions=False)
    assert with_p.state_dict().keys() == without.state_dict().keys()  # one checkpoint layout
    b = random_batch(NUM_C, B=4, L=L, seed=2)
    with torch.no_grad():  # at P = 0 the two forms are one function
        for m in (with_p, without):
            m.net.P.weight.zero_()
        assert torch.allclose(with_p(b).logits, without(b).logits)
    train = _model(query_positions=False).train()
    for model, mode in ((without, "eval"), (train, "train")):
        assert audit_causality(model, b, steps=list(range(L)), mode=mode)
    with pytest.raises((TypeError, ValueError), match="query_positions"):
        _model(query_positions="no")


def test_the_paper_preset_has_the_papers_queries_and_the_seed_interface_the_seeds():
    """The SAKT paper's queries are exercise embeddings alone (pyKT's too); seed 004's interface
    adds P to them, as the seed specifies."""
    from kt_lib.models.sakt_interface import SAKT

    paper = build_model("sakt", preset="paper", num_c=NUM_C)
    assert paper.config.query_positions is False and paper.net.query_positions is False
    assert build_model("sakt", num_c=NUM_C).net.query_positions  # the seed's default config
    seed = SAKT(number_questions=NUM_C, d=64, num_heads=4)
    assert seed.net.query_positions
