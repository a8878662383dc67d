"""CL4KT and kt_lib.nn.augment: each augmentation, the difficulty tables, the contrastive term."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kt_lib.audit import random_batch
from kt_lib.data.dataset import KTDataset, StudentSeq
from kt_lib.models import build_model
from kt_lib.models.cl4kt import info_nce, pooled
from kt_lib.nn.augment import (
    crop_window,
    flip_responses,
    mask_tokens,
    permute_window,
    replace_by_difficulty,
)

NUM_C = 10


def _valid(lengths: list[int], L: int) -> torch.Tensor:
    return torch.arange(L) < torch.tensor(lengths).unsqueeze(1)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- augmentations ---------------------------------------------------------------------------------


def test_mask_tokens_follows_the_80_10_10_rule_on_real_steps_only():
    valid = _valid([400, 250], 400)
    ids = torch.randint(0, NUM_C, (2, 400), generator=_gen(1)) * valid
    out = mask_tokens(ids, valid, 1.0, NUM_C, NUM_C, _gen(2))
    assert torch.equal(out[~valid], ids[~valid])
    n = int(valid.sum())
    masked = float((out[valid] == NUM_C).sum()) / n
    assert 0.74 < masked < 0.86
    changed = float(((out != ids) & (out != NUM_C) & valid).sum()) / n  # random ids that differ
    assert 0.05 < changed < 0.15 and int(out[valid & (out != NUM_C)].max()) < NUM_C
    assert torch.equal(mask_tokens(ids, valid, 0.0, NUM_C, NUM_C, _gen(2)), ids)
    partial = mask_tokens(ids, valid, 0.2, NUM_C, NUM_C, _gen(3))
    assert 0.1 < float((partial[valid] == NUM_C).sum()) / n < 0.22  # ~0.2 * 0.8


def test_flip_and_replace():
    valid = _valid([6, 3], 6)
    r = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 1, 0, 0, 0]])
    flipped = flip_responses(r, valid, 1.0, _gen())
    assert torch.equal(flipped[valid], 1 - r[valid]) and torch.equal(flipped[~valid], r[~valid])
    assert torch.equal(flip_responses(r, valid, 0.0, _gen()), r)
    q = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 0, 0, 0]])
    easier, harder = (torch.arange(NUM_C) + 1) % NUM_C, (torch.arange(NUM_C) - 1) % NUM_C
    out = replace_by_difficulty(q, r, valid, 1.0, easier, harder, _gen())
    want = torch.where(r == 1, easier[q], harder[q])
    assert torch.equal(out[valid], want[valid]) and torch.equal(out[~valid], q[~valid])


def test_permute_window_shuffles_one_window_of_real_steps():
    L = 30
    valid = _valid([30, 21, 10, 1], L)
    for seed in range(5):
        idx = permute_window(valid, 0.3, _gen(seed))
        for b, n in enumerate([30, 21, 10, 1]):
            row = idx[b]
            assert sorted(row.tolist()) == list(range(L))  # a permutation
            moved = (row != torch.arange(L)).nonzero().squeeze(1).tolist()
            size = int(0.3 * n)
            if moved:  # moved steps lie in one window of `size` real steps
                assert max(moved) - min(moved) < size and max(moved) < n
                assert set(row[min(moved) : min(moved) + size].tolist()) >= set(moved)
    assert torch.equal(permute_window(valid, 0.0, _gen()), torch.arange(L).expand(4, L))


def test_permute_window_never_moves_padding_in_at_the_largest_draw(monkeypatch):
    """The largest uniform draw (1 - 2^-24) puts a key at start + u * size, which in float32
    rounds to start + size: the key of the step after the window, padding when the window
    ends the log. The keys are float64, so the window's steps still sort before it."""
    import kt_lib.nn.augment as augment

    top = torch.tensor(1 - 2**-24, dtype=torch.float32)
    monkeypatch.setattr(augment, "_rand", lambda shape, like, g: top.expand(shape).clone())
    L, n = 200, 200 - 1  # the window [140, 199) ends the log; step 199 is padding
    valid = _valid([n], L)
    monkeypatch.setattr(augment, "_window_start", lambda n_, size, g: torch.tensor([140]))
    idx = permute_window(valid, 59 / n, None)
    assert idx[0, 199] == 199 and sorted(idx[0].tolist()) == list(range(L))
    assert set(idx[0, 140:199].tolist()) == set(range(140, 199))


def test_crop_window_keeps_one_contiguous_window_at_the_front():
    L = 20
    lengths = [20, 13, 2, 1]
    valid = _valid(lengths, L)
    for seed in range(5):
        idx, kept = crop_window(valid, 0.3, _gen(seed))
        for b, n in enumerate(lengths):
            size = max(1, int(0.3 * n))
            assert int(kept[b].sum()) == size and bool(kept[b, :size].all())
            window = idx[b, :size]
            assert torch.equal(window, window[0] + torch.arange(size))
            assert int(window[0]) >= 0 and int(window[-1]) < n


def test_augmentations_draw_from_torchs_global_rng():
    valid = _valid([12, 8], 12)
    ids = torch.randint(0, NUM_C, (2, 12)) * valid

    def draw():
        return (
            mask_tokens(ids, valid, 0.5, NUM_C, NUM_C),
            permute_window(valid, 0.5),
            crop_window(valid, 0.5)[0],
        )

    torch.manual_seed(5)
    a = draw()
    torch.manual_seed(5)
    b = draw()
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# -- the model ------------------------------------------------------------------------------------


def _model(**kw):
    torch.manual_seed(0)
    return build_model("cl4kt", preset="tiny", num_c=NUM_C, **kw)


def test_prepare_orders_concepts_by_their_training_correct_rate():
    # concept c answered right with rate c / 10 (0 hardest), concept 9 never seen
    students = []
    for c in range(9):
        r = np.array([1] * c + [0] * (10 - c))
        students.append(StudentSeq(c, np.full(10, c), r))
    train = KTDataset(students, num_c=NUM_C, num_pid=0, K=2, name="rates")
    model = _model()
    model.prepare(train)
    assert model.easier.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 8, 9]
    assert model.harder.tolist() == [0, 0, 1, 2, 3, 4, 5, 6, 7, 9]
    state = model.extra_state()
    fresh = _model()
    fresh.load_extra_state(state)
    assert torch.equal(fresh.easier, model.easier) and torch.equal(fresh.harder, model.harder)


def test_info_nce_and_pooling_match_plain_loops():
    g = _gen(3)
    logits = torch.randn(4, 8, generator=g)
    want = sum(-torch.log(torch.exp(logits[i, i]) / torch.exp(logits[i]).sum()) for i in range(4))
    assert torch.allclose(info_nce(logits), want / 4, atol=1e-6)
    h, valid = torch.randn(3, 5, 2, generator=g), _valid([5, 2, 1], 5)
    for b in range(3):
        n = int(valid[b].sum())
        assert torch.allclose(pooled(h, valid)[b], h[b, :n].mean(0), atol=1e-6)


def test_contrastive_term_matches_its_definition():
    model = _model(hard_negative_weight=0.7, dropout=0.0).train()
    b = random_batch(NUM_C, B=4, L=12, seed=4)
    got = model.contrastive(b, _gen(9))
    g = _gen(9)
    views = [model.view(b, g), model.view(b, g)]
    neg = flip_responses(b.r * b.mask, b.mask, 1.0, g)
    t = model.config.temperature

    def z(layers, emb, valid):
        return pooled(model.encode_view(layers, emb, valid), valid)

    zq = [z(model.q_encoder, model.question(q), v) for q, _, v in views]
    zi = [z(model.i_encoder, model.interaction(q + (NUM_C + 1) * r), v) for q, r, v in views]
    zk = z(model.i_encoder, model.interaction(b.q + (NUM_C + 1) * neg), b.mask)
    total = 0.0
    for i in range(4):  # one row at a time: positives on the diagonal, hard negative at B + i
        sq = torch.stack([F.cosine_similarity(zq[0][i], zq[1][j], dim=0) / t for j in range(4)])
        total = total + F.cross_entropy(sq[None], torch.tensor([i])) / 4
        si = [F.cosine_similarity(zi[0][i], zi[1][j], dim=0) / t for j in range(4)]
        sk = [F.cosine_similarity(zi[0][i], zk[j], dim=0) / t + 0.7 * (i == j) for j in range(4)]
        total = total + F.cross_entropy(torch.stack(si + sk)[None], torch.tensor([i])) / 4
    assert torch.allclose(got, total, atol=1e-5)


def test_view_states_are_causal():
    model = _model().eval()
    b = random_batch(NUM_C, B=3, L=10, seed=5, ragged=False)
    emb = model.interaction(b.q + (NUM_C + 1) * b.r)
    base = model.encode_view(model.i_encoder, emb, b.mask)
    emb2 = emb.clone()
    emb2[:, 6:] = torch.randn_like(emb2[:, 6:])
    moved = model.encode_view(model.i_encoder, emb2, b.mask)
    assert torch.allclose(moved[:, :6], base[:, :6], atol=1e-6)
    assert not torch.allclose(moved[:, 6:], base[:, 6:], atol=1e-3)


def test_contrastive_term_in_training_only_and_it_changes_the_gradient():
    model = _model().train()
    b = random_batch(NUM_C, B=4, L=12, seed=6)
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(1)
    terms = model.loss(model(b), b)
    assert set(terms) == {"pred", "cl", "total"}
    assert torch.allclose(terms["total"], terms["pred"] + terms["cl"])
    g_tot = torch.autograd.grad(terms["total"], params, allow_unused=True)
    # the same forward (same dropout draws) again: the monotonic kernels allow one backward each
    torch.manual_seed(1)
    g_pred = torch.autograd.grad(model.loss(model(b), b)["pred"], params, allow_unused=True)
    diff = sum(
        float((a - (c if c is not None else 0)).abs().sum())
        for a, c in zip(g_pred, g_tot, strict=True)
        if a is not None
    )
    assert diff > 1e-6
    model.eval()
    assert set(model.loss(model(b), b)) == {"pred", "total"}
    model.train()
    with torch.no_grad():
        assert set(model.loss(model(b), b)) == {"pred", "total"}
    off = _model(lambda_cl=0.0).train()
    assert set(off.loss(off(b), b)) == {"pred", "total"}


def test_the_contrastive_term_never_moves_a_logit():
    model = _model().train()
    b = random_batch(NUM_C, B=3, L=9, seed=7)
    torch.manual_seed(1)
    out = model(b)
    before = out.logits.detach().clone()
    model.loss(out, b)  # draws views from the RNG after the forward
    torch.manual_seed(1)
    assert torch.equal(model(b).logits, before)


def test_paper_preset_and_parameter_count():
    model = build_model("cl4kt", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.final_fc_dim) == (64, 8, 2, 1024, 512)
    assert (c.lambda_cl, c.temperature, c.mask_prob, c.crop_prob) == (0.1, 0.05, 0.2, 0.3)
    # 6 layers x 144904 (shared q/k projection, v, out, 8 decays, 2 LN, FFN 64-1024-64),
    # embeddings 101 x 64 and 202 x 64, MLP 128-512-256-1 (197633)
    assert sum(p.numel() for p in model.parameters()) == 1_086_449
    with pytest.raises(ValueError, match="crop_prob"):
        build_model("cl4kt", preset="tiny", num_c=5, crop_prob=0.0)
