"""ReKT: the last-attempt search and the forward (outputs and gradients) against plain per-student
loops, windows longer than pyKT's 200, padding, what it refuses, the paper preset's size."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.rekt import previous_attempt
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def test_refuses_skill_only_data_by_name():
    skills_only = make_tiny_dataset(NUM_C, 0)
    with pytest.raises(ValueError, match=r"rekt needs problem ids \(pid\), and tiny has none"):
        build_model("rekt", preset="tiny", dataset=skills_only)
    build_model("rekt", preset="tiny", dataset=make_tiny_dataset(NUM_C, NUM_PID))


def test_paper_preset_size():
    # 100 skills, 1000 problems, d 128: Q, diff (P * 129) + C, V (2 * 100 * 128) + R (2 * 128)
    # + T (200 * 128) + z0 (3 * 128) + 6 FRU layers (6 * (256 * 128 + 128))
    # + output MLP (512 * 128 + 128 + 128 + 1) = 444,009
    model = build_model("rekt", preset="paper", num_c=100, num_pid=1000)
    assert sum(p.numel() for p in model.parameters()) == 444_009


def test_previous_attempt_matches_a_plain_search():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4, (5, 17), generator=g)  # few ids: many repeats
    mask = torch.rand(5, 17, generator=g) > 0.2  # holes too: a masked step is nobody's attempt
    got = previous_attempt(ids, mask)
    for b in range(5):
        for t in range(17):
            earlier = [s for s in range(t) if mask[b, s] and ids[b, s] == ids[b, t]]
            want = earlier[-1] if mask[b, t] and earlier else -1
            assert got[b, t] == want, (b, t)
    assert (got >= 0).any()


def _model(**kw):
    torch.manual_seed(0)
    model = build_model("rekt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID, **kw)
    return model.double().eval()


def _rekt_loop(model, b: Batch) -> torch.Tensor:
    """The paper's equations per student and per step, with dicts of each item's last state."""
    G = model.config.max_gap
    fp, fc, fd = model.fru

    def forget(fru, z, gap):
        return z * torch.sigmoid(fru.w_forget(torch.cat([z, gap])))

    def update(fru, f, x):
        return f + torch.tanh(fru.w_update(torch.cat([f, x])))

    out = torch.zeros(b.q.shape, dtype=torch.float64)
    for i in range(b.q.shape[0]):
        last = ({}, {})  # item -> (state after its last attempt, that step)
        z_dom = model.z0[2]
        for t in range(b.q.shape[1]):
            if not b.mask[i, t]:
                continue
            p, c, r = int(b.pid[i, t]), int(b.q[i, t]), int(b.r[i, t])
            e = model.pro[p] + model.skill[c] + model.diff[p] * model.change[c]
            x = e + model.answer[r]
            f = []
            for k, item in ((0, p), (1, c)):
                if item in last[k]:
                    z, s = last[k][item]
                    gap = model.gap[min(t - s, G)]
                else:
                    z, gap = model.z0[k], model.gap[0]
                f.append(forget(model.fru[k], z, gap))
            f_dom = forget(fd, z_dom, model.gap[1])
            out[i, t] = model.out(torch.cat([f_dom, f[0], f[1], e]))[0]
            last[0][p] = (update(fp, f[0], x), t)
            last[1][c] = (update(fc, f[1], x), t)
            z_dom = update(fd, f_dom, x)
    return out


def test_rekt_matches_the_equations_per_student_outputs_and_gradients():
    model = _model()
    # L 24 > max_gap 6: gaps beyond G share its row; few items, so items come back often
    b = random_batch(4, B=3, L=24, num_pid=5, seed=3)
    fast, slow = model(b).logits, _rekt_loop(model, b)
    m = b.mask
    assert torch.allclose(fast[m], slow[m], atol=1e-12)
    w = torch.randn(fast.shape, dtype=torch.float64) * m
    params = list(model.parameters())
    for name, gf, gs in zip(
        [n for n, _ in model.named_parameters()],
        torch.autograd.grad((fast * w).sum(), params),
        torch.autograd.grad((slow * w).sum(), params),
        strict=True,
    ):
        assert torch.allclose(gf, gs, atol=1e-10), name


def test_a_new_item_starts_from_the_initial_state():
    """pyKT reads slot 0 of its state tables after step 0 has overwritten it, so a problem or
    concept new to the window starts from the state the window's first item reached, r_0
    included. Here it starts from z0: with the domain update cut off from X_0, r_0 cannot reach
    the first attempt at another problem and concept; it does reach a repeated problem."""
    model = _model()
    with torch.no_grad():
        model.fru[2].w_update.weight.zero_()  # Z^d_0 = F^d_0 + tanh(b_u): reads no X_0
        mask = torch.ones(1, 2, dtype=torch.bool)

        def step_1(pid, r0):
            q = torch.tensor([[0, 1]])
            b = Batch(q=q, r=torch.tensor([[r0, 0]]), mask=mask, pid=torch.tensor([pid]))
            return model(b).logits[0, 1]

        assert step_1([0, 1], 0) == step_1([0, 1], 1)  # a new problem and a new concept
        assert step_1([0, 0], 0) != step_1([0, 0], 1)  # the problem comes back


def test_windows_longer_than_pykts_200_steps():
    model = _model(max_gap=199)
    b = random_batch(NUM_C, B=2, L=260, num_pid=NUM_PID, seed=4)
    with torch.no_grad():
        logits = model(b).logits
    assert logits.shape == (2, 260) and torch.isfinite(logits).all()
    assert audit_causality(model, b, steps=[0, 130, 259], trials=1, atol=1e-10)


def _pad(x: torch.Tensor, fill: int, side: str) -> torch.Tensor:
    p = torch.full((x.shape[0], 4), fill, dtype=x.dtype)
    return torch.cat([p, x] if side == "left" else [x, p], 1)


def test_padding_on_either_side_moves_no_prediction():
    model = _model()
    b = random_batch(NUM_C, B=3, L=15, num_pid=NUM_PID, seed=5, ragged=False)
    with torch.no_grad():
        want = model(b).logits
        for side in ("left", "right"):
            mask = _pad(b.mask, False, side)
            # padded steps hold ids and responses a real step could have: only the mask hides them
            q, r, pid = (_pad(x, 1, side) for x in (b.q, b.r, b.pid))
            got = model(Batch(q=q, r=r, mask=mask, pid=pid)).logits[mask].view(3, 15)
            assert torch.allclose(got, want, atol=1e-12), side
