"""SAINT: the blocks against a plain per-step loop, the response shift, padding, preset sizes."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model

NUM_C = 7


def _mha_at(mha, query: torch.Tensor, keys: torch.Tensor, t: int) -> torch.Tensor:
    """Multi-head attention of the single query `query` [D] over keys[:t + 1] [t+1, D]."""
    h = mha.h
    q = mha.q_proj(query).view(h, -1)  # [H, Dh]
    k = mha.k_proj(keys[: t + 1]).view(t + 1, h, -1)  # [t+1, H, Dh]
    v = mha.v_proj(keys[: t + 1]).view(t + 1, h, -1)
    heads = []
    for i in range(h):
        w = torch.softmax(k[:, i] @ q[i] / q.shape[-1] ** 0.5, 0)  # [t+1]
        heads.append(w @ v[:, i])
    return mha.out_proj(torch.cat(heads))


def _plain_saint(model, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """One student, eval mode, written step by step from the equations in saint.py."""
    L = q.shape[0]
    x = model.concept(q) + model.pos.weight[:L]
    prev = torch.cat([torch.tensor([2]), r[:-1]])
    y = model.response(prev) + model.pos.weight[:L]
    for blk in model.encoder:
        x = blk.ln1(x)
        x = torch.stack([x[t] + _mha_at(blk.attn, x[t], x, t) for t in range(L)])
        x = blk.ln2(x)
        x = x + blk.ffn(x)
    for blk in model.decoder:
        y = blk.ln1(y)
        y = torch.stack([y[t] + _mha_at(blk.self_attn, y[t], y, t) for t in range(L)])
        e = blk.ln_enc(x)
        y = torch.stack([y[t] + _mha_at(blk.cross_attn, y[t], e, t) for t in range(L)])
        y = blk.ln3(y)
        y = y + blk.ffn(y)
    return model.out(y).squeeze(-1)


def _model(**kw):
    torch.manual_seed(0)
    return build_model("saint", preset="tiny", num_c=NUM_C, **kw).eval()


def test_forward_matches_a_plain_loop():
    model = _model()
    b = random_batch(NUM_C, B=3, L=9, seed=3, ragged=False)
    with torch.no_grad():
        got = model(b).logits
        for i in range(3):
            assert torch.allclose(got[i], _plain_saint(model, b.q[i], b.r[i]), atol=1e-5)


def test_logit_at_t_reads_r_before_t_not_r_t():
    model = _model()
    b = random_batch(NUM_C, B=2, L=8, seed=4, ragged=False)
    with torch.no_grad():
        base = model(b).logits
        for t in (0, 3, 7):
            flip = b.clone()
            flip.r[:, t] = 1 - flip.r[:, t]
            moved = model(flip).logits
            assert torch.equal(moved[:, : t + 1], base[:, : t + 1])  # r_t is not read at <= t
            if t + 1 < 8:
                assert (moved[:, t + 1] - base[:, t + 1]).abs().max() > 1e-6  # read at t + 1


def test_ragged_rows_match_each_row_alone():
    model = _model()
    b = random_batch(NUM_C, B=4, L=12, seed=5)
    n = b.mask.sum(1)
    with torch.no_grad():
        full = model(b).logits
        for i in range(4):
            k = int(n[i])
            one = Batch(q=b.q[i : i + 1, :k], r=b.r[i : i + 1, :k], mask=b.mask[i : i + 1, :k])
            assert torch.allclose(full[i, :k], model(one).logits[0], atol=1e-5)


def test_problem_ids_are_read_when_present():
    model = _model(num_pid=20)
    b = random_batch(NUM_C, B=2, L=6, num_pid=20, seed=6, ragged=False)
    with torch.no_grad():
        base = model(b).logits
        b2 = b.clone()
        b2.pid[:, 2] = (b2.pid[:, 2] + 1) % 20
        moved = model(b2).logits
    assert torch.equal(moved[:, :2], base[:, :2])
    assert (moved[:, 2] - base[:, 2]).abs().max() > 1e-6
    assert _model().problem is None  # skill-only data: no problem table


def test_longer_than_max_len_is_refused():
    model = build_model("saint", preset="tiny", num_c=NUM_C, max_len=5)
    with pytest.raises(ValueError, match="max_len 5"):
        model(random_batch(NUM_C, B=1, L=6))


def test_paper_preset_sizes_and_parameter_count():
    model = build_model("saint", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.n_heads, c.n_blocks, c.dropout) == (256, 8, 2, 0.2)  # pyKT kt_config.json
    # blocks: 2 x (MHA 263168 + FFN 131584 + 2 LN) + 2 x (2 MHA + FFN + 3 LN) = 2110464;
    # embeddings 100 + 3 + 200 rows of 256; output 257
    assert sum(p.numel() for p in model.parameters()) == 2_188_289


def test_training_loss_is_finite_and_decreases_on_one_batch():
    torch.manual_seed(0)
    model = build_model("saint", preset="tiny", num_c=NUM_C, dropout=0.0)
    b = random_batch(NUM_C, B=4, L=10, seed=7)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(40):
        loss = model.loss(model(b), b)["total"]
        first = first if first is not None else float(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < first
