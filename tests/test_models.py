"""Every registered model: shapes, backward, no NaN, causality, attention maps, save/load."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from kt_lib.audit import audit_alignment, audit_causality, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.models import MODELS, build_model, list_models
from kt_lib.models.base import KTModel
from kt_lib.models.sakt_interface import SAKT, SeedRangeWarning
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def _setup(name: str, num_pid: int):
    if num_pid == 0 and "pid" in MODELS[name].needs:
        pytest.skip(f"{name} needs problem ids (capability tag needs={{'pid'}})")
    K = 4 if MODELS[name].ordinal else 2
    train = make_tiny_dataset(NUM_C, num_pid, K)
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=NUM_C, num_pid=num_pid, K=K)
    model.prepare(train)
    batch = random_batch(NUM_C, B=4, L=20, num_pid=num_pid, K=K, seed=1)
    # uids of the random batch are 0..3, i.e. training students: exercises self-exclusion
    return model, batch, K


@pytest.fixture(params=list_models())
def name(request):
    return request.param


@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_forward_shapes_backward_no_nan(name, num_pid):
    model, batch, K = _setup(name, num_pid)
    model.train()
    out = model(batch)
    expected = (4, 20, K) if model.ordinal else (4, 20)
    assert tuple(out.logits.shape) == expected
    assert torch.isfinite(out.logits).all()
    terms = model.loss(out, batch, epoch=0)
    assert "total" in terms and torch.isfinite(terms["total"])
    terms["total"].backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(g is None or torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_causality_audit(name, num_pid):
    model, batch, _ = _setup(name, num_pid)
    result = audit_causality(model, batch, steps=list(range(20)), trials=2)
    assert result, str(result)


@pytest.mark.parametrize("num_pid", [NUM_PID, 0])
def test_prediction_at_t_reads_q_t(name, num_pid):
    model, batch, _ = _setup(name, num_pid)
    result = audit_alignment(model, batch, steps=list(range(20)))
    assert result, str(result)


def test_models_that_need_problem_ids_refuse_data_without(name):
    if "pid" not in MODELS[name].needs:
        build_model(name, preset="tiny", num_c=NUM_C, num_pid=0)  # runs on skills alone
        return
    with pytest.raises(ValueError, match=rf"{name} needs problem ids"):
        build_model(name, preset="tiny", num_c=NUM_C, num_pid=0)


def test_attention_maps_on_request(name):
    model, batch, _ = _setup(name, NUM_PID)
    model.eval()
    assert model(batch).attention is None
    maps = model(batch, return_attention=True).attention
    assert isinstance(maps, dict)
    for key, w in maps.items():
        assert isinstance(key, str) and isinstance(w, torch.Tensor)
        assert torch.isfinite(w).all()


def test_save_load_round_trip(name, tmp_path):
    model, batch, _ = _setup(name, NUM_PID)
    model.eval()
    save_model(tmp_path / "ckpt", model, {"note": "round trip"})
    loaded, meta, _ = load_model(tmp_path / "ckpt")
    loaded.eval()
    assert meta["note"] == "round trip" and meta["model"] == name
    with torch.no_grad():
        assert torch.equal(model(batch).logits, loaded(batch).logits)


def test_unknown_model_lists_valid_names():
    with pytest.raises(KeyError, match="valid names: .*sakt"):
        build_model("no_such_model", num_c=3)


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="unknown field"):
        build_model("sakt", num_c=5, dimension=3)
    with pytest.raises(ValueError, match="num_c must be > 0"):
        build_model("sakt", num_c=0)
    with pytest.raises(ValueError, match="SAKTConfig.d: expected int"):
        build_model("sakt", num_c=5, d="big")


def test_config_from_yaml(tmp_path):
    path = tmp_path / "sakt.yaml"
    path.write_text("num_c: 7\nd: 8\nn_heads: 2\n")
    model = build_model("sakt", config=path)
    assert model.config.d == 8 and model.config.num_c == 7
    path.write_text("num_c: 7\nd: 9\nn_heads: 2\n")
    with pytest.raises(ValueError, match=r"sakt.yaml.*not divisible"):
        build_model("sakt", config=path)


def test_causality_audit_in_training_mode_and_float64(name):
    """Issue 15 item 26: the audit also runs the training forward (dropout, key hiding) with
    fixed draws, and a float64 copy with a tight tolerance (leaks below 1e-5)."""
    model, batch, _ = _setup(name, NUM_PID)
    steps = [0, 1, 6, 13, 19]
    result = audit_causality(model, batch, steps=steps, trials=1, mode="train")
    assert result, str(result)
    result = audit_causality(model.double(), batch, steps=steps, trials=1, atol=1e-10)
    assert result, str(result)
    result = audit_causality(model, batch, steps=steps, trials=1, atol=1e-10, mode="train")
    assert result, str(result)  # the training forward in float64 too


def _training_state_rebuilder(train):
    """`rebuild` for the audit: the batch's rows (uids 0..3, training students) written over
    those students' logs, then `model.prepare` on that training set: whatever a model builds
    from its training students (difficulty tables, graphs, memory banks) sees the perturbed
    logs, so a student reading its own future through that state shows."""

    def rebuild(model, batch):
        students = list(train.students)
        for row, uid in enumerate(batch.uid.tolist()):
            s = students[uid]
            n = min(int(batch.mask[row].sum()), len(s.q))
            q, r = s.q.copy(), s.r.copy()
            q[:n], r[:n] = batch.q[row, :n].numpy(), batch.r[row, :n].numpy()
            pid = None
            if s.pid is not None:
                pid = s.pid.copy()
                pid[:n] = batch.pid[row, :n].numpy()
            students[uid] = dataclasses.replace(s, q=q, r=r, pid=pid)
        model.prepare(dataclasses.replace(train, students=students))

    return rebuild


def test_causality_audit_with_the_training_state_rebuilt(name):
    """A model's state built from training students is rebuilt from the perturbed logs. A model
    that declares `own_log_in_training_state` (its tables count a training student's own
    answers, as its paper and pyKT build them) must show that leak here, so the declaration
    stays true; held-out students are not in the state (tests/test_<model>.py)."""
    model, batch, K = _setup(name, NUM_PID)
    train = make_tiny_dataset(NUM_C, NUM_PID, K)
    result = audit_causality(model, batch, steps=[0, 1, 6, 13, 19], trials=1,
                             rebuild=_training_state_rebuilder(train))  # fmt: skip
    assert bool(result) is not bool(model.own_log_in_training_state), str(result)


# -- seed 004's public SAKT: padding (section 9.2) and hyperparameter ranges (section 6.1) -------


def _seed_sakt() -> SAKT:
    torch.manual_seed(0)
    return SAKT(number_questions=NUM_C, d=64, num_heads=4).eval()


def _pad(x: torch.Tensor, k: int, side: str, value: int) -> torch.Tensor:
    fill = torch.full((x.shape[0], k), value, dtype=x.dtype)
    return torch.cat([fill, x] if side == "left" else [x, fill], 1)


@pytest.mark.parametrize("side", ["left", "right"])
def test_seed_sakt_padding_never_moves_a_real_prediction(side):
    model = _seed_sakt()
    g = torch.Generator().manual_seed(0)
    n, k = 7, 5
    q, r = torch.randint(0, NUM_C, (3, n), generator=g), torch.randint(0, 2, (3, n), generator=g)
    nxt = torch.randint(0, NUM_C, (3, 1), generator=g)
    mask = _pad(torch.ones(3, n, dtype=torch.bool), k, side, False)
    # pad values are never read: out-of-vocabulary ids are fine there
    qp, rp = _pad(q, k, side, -1), _pad(r, k, side, 7)
    with torch.no_grad():
        # the next question (Lq = 1) after the real history
        want = model(q, r, nxt)
        assert torch.allclose(model(qp, rp, nxt, mask), want, atol=1e-6)
        # the classic query at every step (Lq = L): qry is padded like the history
        want = model(q, r, q)
        got = model(qp, rp, _pad(q, k, side, 0), mask)
        real = slice(k, None) if side == "left" else slice(0, n)
        assert torch.allclose(got[:, real], want, atol=1e-6)
        # the defect the mask fixes: padding read as history moves the prediction
        fake = _pad(q, k, side, 0), _pad(r, k, side, 0)
        assert not torch.allclose(model(*fake, nxt), model(q, r, nxt), atol=1e-3)


def test_seed_sakt_ragged_batch_matches_each_row_alone():
    model = _seed_sakt()
    g = torch.Generator().manual_seed(1)
    L, lengths = 9, [9, 4, 1, 6]
    q, r = torch.randint(0, NUM_C, (4, L), generator=g), torch.randint(0, 2, (4, L), generator=g)
    mask = torch.arange(L) >= L - torch.tensor(lengths).unsqueeze(1)  # left-padded rows
    nxt = torch.randint(0, NUM_C, (4, 1), generator=g)
    with torch.no_grad():
        batched = model(q, r, nxt, mask)
        for b, n in enumerate(lengths):
            alone = model(q[b : b + 1, L - n :], r[b : b + 1, L - n :], nxt[b : b + 1])
            assert torch.allclose(batched[b], alone[0], atol=1e-6), b
        assert torch.allclose(model(q, r, nxt, torch.ones_like(mask)), model(q, r, nxt), atol=1e-6)


def test_seed_sakt_masked_queries_stay_causal():
    model = _seed_sakt()
    g = torch.Generator().manual_seed(2)
    q, r = torch.randint(0, NUM_C, (2, 12), generator=g), torch.randint(0, 2, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, :3] = False
    mask[1, 8:] = False
    with torch.no_grad():
        base = model(q, r, q, mask)
        for s in (0, 4, 9):  # query s reads steps <= s: later steps must not move it
            q2, r2 = q.clone(), r.clone()
            q2[:, s + 1 :] = torch.randint(0, NUM_C, (2, 11 - s), generator=g)
            r2[:, s + 1 :] = 1 - r2[:, s + 1 :]
            moved = model(q2, r2, q, mask)
            assert torch.equal(moved[:, : s + 1], base[:, : s + 1]), s


def test_seed_sakt_mask_validation():
    model = _seed_sakt()
    q, r, qry = torch.tensor([[1, 2, 3]]), torch.tensor([[1, 0, 1]]), torch.tensor([[4]])
    with pytest.raises(TypeError, match="mask must be a bool tensor.*torch.int64"):
        model(q, r, qry, torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="mask must be a bool tensor.*list"):
        model(q, r, qry, [[True, True, True]])
    with pytest.raises(ValueError, match=r"mask must have q's shape \(1, 3\), got \(1, 2\)"):
        model(q, r, qry, torch.ones(1, 2, dtype=torch.bool))
    # ids are checked at real steps only, still naming the [row, step]
    mask = torch.tensor([[False, True, True]])
    model(torch.tensor([[-1, 2, 3]]), torch.tensor([[9, 0, 1]]), qry, mask)
    with pytest.raises(ValueError, match=r"q\[0, 2\] = 50 is outside"):
        model(torch.tensor([[-1, 2, 50]]), r, qry, mask)
    with pytest.raises(ValueError, match=r"r\[0, 1\] = 3 is outside"):
        model(q, torch.tensor([[9, 3, 1]]), qry, mask)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"d": 32, "num_heads": 4}, "d=32"),
        ({"d": 1024}, "d=1024"),
        ({"num_heads": 2}, "num_heads=2"),
        ({"num_heads": 32}, "num_heads=32"),
        ({"d_ff": 256}, "d_ff=256"),  # 1 x d
        ({"d_ff": 4096}, "d_ff=4096"),  # 16 x d
        ({"dropout": 0.6}, "dropout=0.6"),
        ({"max_seq_len": 20}, "max_seq_len=20"),
        ({"max_seq_len": 1000}, "max_seq_len=1000"),
    ],
)
def test_seed_sakt_warns_outside_the_seed_ranges(kw, name):
    with pytest.warns(SeedRangeWarning, match=rf"{name}.*outside seed 004's range"):
        SAKT(NUM_C, **kw)


def test_seed_sakt_ranges_are_inclusive_and_invalid_values_raise():
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedRangeWarning)
        SAKT(NUM_C)  # the seed's defaults
        for kw in (
            {"d": 64, "num_heads": 4, "d_ff": 128, "dropout": 0.0, "max_seq_len": 50},
            {"d": 512, "num_heads": 16, "d_ff": 4096, "dropout": 0.5, "max_seq_len": 500},
        ):
            SAKT(NUM_C, **kw)
        tiny = build_model("sakt", preset="tiny", num_c=NUM_C)  # d=16: the registry allows it
        SAKT.from_model(tiny)
    for kw, msg in (
        ({"d": 0}, "d must be > 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ):
        with pytest.raises(ValueError, match=msg):
            SAKT(NUM_C, **kw)


def test_sakt_seed_interface_example_and_validation():
    torch.manual_seed(0)
    model = SAKT(number_questions=100, d=256, num_heads=8, dropout=0.1).eval()
    prob = model(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 0, 1]]), torch.tensor([[4]]))
    assert prob.shape == (1, 1, 1) and 0 < prob.item() < 1
    bad = [
        (([[1, 2]], [[1, 0, 1]], [[4]]), "same shape"),
        (([[1, 200, 3]], [[1, 0, 1]], [[4]]), r"q\[0, 1\] = 200 is outside \[0, 99\]"),
        (([[1, 2, 3]], [[1, 0, 1]], [[-1]]), r"qry\[0, 0\] = -1"),
        (([[1, 2, 3]], [[1, 2, 1]], [[4]]), r"r\[0, 1\] = 2 is outside \{0, 1\}"),
    ]
    for (q, r, qry), msg in bad:
        with pytest.raises(ValueError, match=msg):
            model(torch.tensor(q), torch.tensor(r), torch.tensor(qry))
    with pytest.raises(ValueError, match="max_seq_len"):
        long = torch.zeros(1, 201, dtype=torch.long)
        model(long, long, long[:, :1])
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 3), torch.zeros(1, 3).long(), torch.zeros(1, 1).long())


@pytest.mark.parametrize("preset", ["tiny", "paper"])  # the paper's queries carry no position
def test_sakt_seed_interface_shares_registry_weights(preset):
    torch.manual_seed(0)
    reg = build_model("sakt", preset=preset, num_c=10).eval()
    public = SAKT.from_model(reg).eval()
    b = random_batch(10, B=3, L=8, ragged=False)
    # registry logits at t (reads < t) == public query at t+1 over history [0..t]
    with torch.no_grad():
        want = torch.sigmoid(reg(b).logits[:, 1:])
        got = public(b.q[:, :-1], b.r[:, :-1], b.q[:, 1:]).squeeze(-1)
    assert torch.allclose(want, got, atol=1e-6)


def test_sakt_public_is_causal_over_history():
    torch.manual_seed(0)
    model = SAKT(20, d=16, num_heads=2).eval()
    q, r = torch.randint(0, 20, (2, 10)), torch.randint(0, 2, (2, 10))
    base = model(q, r, q)
    r2 = r.clone()
    r2[:, 6:] = 1 - r2[:, 6:]
    assert torch.equal(model(q, r2, q)[:, :6], base[:, :6])


def test_sakt_seed_example_reads_the_whole_history():
    torch.manual_seed(0)
    model = SAKT(10, d=16, num_heads=2).eval()
    q, qry = torch.tensor([[1, 2, 3]]), torch.tensor([[4]])
    probs = {model(q, torch.tensor([r]), qry).item() for r in ([1, 0, 1], [0, 0, 1], [1, 1, 1])}
    assert len(probs) == 3  # every past response moves the prediction for qry=[4]


def test_seed_size_presets():
    """Seeds 001/003: iDKT N=4 encoder blocks (8 retriever layers); iKT3 N=8 per stream; d=256."""
    idkt = build_model("idkt", preset="design", num_c=NUM_C).config
    assert (idkt.n_blocks, idkt.d, idkt.n_heads) == (4, 256, 8)
    assert idkt == build_model("idkt", preset="design", num_c=NUM_C).config
    ikt3 = build_model("ikt3", preset="design", num_c=NUM_C).config
    assert (ikt3.n_blocks, ikt3.d, ikt3.n_heads) == (8, 256, 8)


def test_every_model_builds_at_its_paper_preset(name):
    """The published sizes build (100 skills; 1,000 problems for models that need them) and
    round-trip through their config dict."""
    num_pid = 1000 if "pid" in MODELS[name].needs else 0
    K = 4 if MODELS[name].ordinal else 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_model(name, preset="paper", num_c=100, num_pid=num_pid, K=K)
        again = build_model(name, config=dataclasses.asdict(model.config))
    assert sum(p.numel() for p in model.parameters()) > 0
    assert again.config == model.config


# -- every model: padding and batch-mates never move a real prediction; one batch is learnable --


def _padded(batch, extra: int, seed: int):
    """`batch` with `extra` padded steps appended and every padded cell (old and new) filled with
    random valid ids and responses: what a padded step holds must not matter."""
    g = torch.Generator().manual_seed(seed)
    b = batch.clone()
    B, L = b.q.shape
    pad = torch.zeros(B, extra, dtype=torch.bool)
    b.mask = torch.cat([b.mask, pad], 1)
    hide = ~b.mask

    def fill(x, high):
        x = torch.cat([x, x.new_zeros(B, extra)], 1)
        return torch.where(hide, torch.randint(0, high, x.shape, generator=g), x)

    b.q, b.r = fill(b.q, NUM_C), fill(b.r, 2 if b.r.max() <= 1 else 4)
    if b.pid is not None:
        b.pid = fill(b.pid, NUM_PID)
    return b


def test_padding_never_moves_a_real_prediction(name):
    """Eval mode: padded steps appended and filled with random content, and each row scored
    alone, give the same logits at every real step (within float reassociation)."""
    model, batch, _ = _setup(name, NUM_PID)
    model.eval()
    m = batch.mask
    with torch.no_grad():
        ref = model(batch).logits
        padded = model(_padded(batch, 7, seed=3)).logits[:, : m.shape[1]]
        torch.testing.assert_close(padded[m], ref[m], atol=1e-5, rtol=1e-4)
        for b in range(batch.q.shape[0]):
            n = int(m[b].sum())
            row = batch.clone()
            for f in ("q", "r", "mask", "pid"):
                setattr(row, f, getattr(row, f)[b : b + 1, :n])
            row.uid, row.start = batch.uid[b : b + 1], batch.start[b : b + 1]
            alone = model(row).logits[0]
            torch.testing.assert_close(alone, ref[b, :n], atol=1e-5, rtol=1e-4)


def _prediction_loss(model, batch) -> float:
    """The base class's prediction term (BCE or cross-entropy over real steps), in eval mode."""
    was = model.training
    model.eval()
    with torch.no_grad():
        pred = KTModel.loss(model, model(batch), batch)["pred"]
    model.train(was)
    return float(pred)


def test_one_batch_is_learnable(name):
    """Adam on one fixed batch lowers the prediction loss by a fifth within 60 steps: the
    gradient reaches what the model predicts with (a detached or dead path fails this). A fifth,
    not more: the responses are random, and an item-only model (gpcm_irt) can fit no more than
    each item's frequencies."""
    model, batch, _ = _setup(name, NUM_PID)
    first = _prediction_loss(model, batch)
    model.train()
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(1, 61):
        terms = model.loss(model(batch), batch, epoch=0)
        opt.zero_grad()
        terms["total"].backward()
        opt.step()
        if step % 10 == 0 and _prediction_loss(model, batch) < 0.8 * first:
            break  # learnt: most models get there in 10-20 of the 60 steps
    last = _prediction_loss(model, batch)
    assert last < 0.8 * first, f"{name}: prediction loss {first:.3f} -> {last:.3f}"


def test_every_parameter_reaches_the_loss(name):
    """No parameter is built and never read (pyKT's IEKT, ReKT, extraKT and RobustKT carry such
    tables): within three Adam steps, past any warm-up (epoch 50), each gets a nonzero gradient.
    Three, not one: a Rasch scale starts at 0, so the first step leaves its partner's gradient 0."""
    model, batch, _ = _setup(name, NUM_PID)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    reached = {n: False for n, p in model.named_parameters() if p.requires_grad}
    for _ in range(3):
        opt.zero_grad()
        model.loss(model(batch), batch, epoch=50)["total"].backward()
        for n, p in model.named_parameters():
            if p.grad is not None and p.grad.abs().sum() > 0:
                reached[n] = True
        opt.step()
    dead = [n for n, r in reached.items() if not r]
    assert not dead, f"{name}: parameters the loss never reaches: {dead}"
