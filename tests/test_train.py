"""Training (kt_lib.train): validated configs, refused splits, determinism, resume, recipes,
the optimizer built from the model's groups."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from kt_lib.models import build_model
from kt_lib.train import TrainConfig, fit
from tests.conftest import make_tiny_dataset


@pytest.mark.parametrize(
    "override, field",
    [
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"metric": "aucc"}, "metric"),
        ({"eval_batch_size": 0}, "eval_batch_size"),
        ({"lr": float("inf")}, "lr"),
        ({"epochs": "3"}, "epochs"),
        ({"precision": "fp16"}, "precision"),
        ({"backend": "gpu"}, "backend"),
        ({"device": "tpu:x"}, "device"),
        ({"optimizer": "adam"}, "optimizer"),
        ({"momentum": 0.9}, "momentum .* needs optimizer='sgd'"),
        ({"optimizer": "sgd", "momentum": 1.0}, "momentum"),
        ({"lr_decay": 0.5}, "lr_decay .* go together"),
        ({"lr_decay_every": 3}, "go together"),
        ({"lr_decay": 0.0, "lr_decay_every": 1}, "lr_decay must be in"),
        ({"loss_per": "row"}, "loss_per must be one of"),
        ({"compile": True, "backend": "cpu"}, "compile runs the reference attention"),
        ({"compile": True, "backend": "cuda"}, "backend='cuda' would be ignored"),
    ],
)
def test_train_config_is_validated_before_any_work(override, field):
    data = make_tiny_dataset(5, 0)
    model = build_model("dkt", preset="tiny", num_c=5)
    with pytest.raises(ValueError, match=field):
        fit(model, data, data, progress=False, **override)


def test_compile_with_the_reference_backend_or_none_is_accepted():
    for backend in (None, "reference"):
        TrainConfig(compile=True, backend=backend).validate()  # raises if refused


def test_fit_refuses_splits_it_cannot_use():
    from kt_lib.data.dataset import KTDataset

    data = make_tiny_dataset(5, 0)
    model = build_model("dkt", preset="tiny", num_c=5)
    one_class = KTDataset([type(s)(s.uid, s.q, s.r * 0, s.pid) for s in data.students], 5, 0, 2)
    with pytest.raises(ValueError, match="AUC is undefined"):
        fit(model, data, one_class, progress=False)
    three = make_tiny_dataset(5, 0, K=3)
    with pytest.raises(ValueError, match="K=3 .* K=2"):
        fit(model, three, three, progress=False)
    with pytest.raises(ValueError, match="validation split holds no student"):
        fit(model, data, KTDataset([], 5, 0, 2), progress=False)
    # a stopping metric this model's validation does not give: refused before the first epoch
    with pytest.raises(ValueError, match=r"metric='qwk': the validation of a binary model"):
        fit(model, data, data, progress=False, metric="qwk")
    ordinal = build_model("attention_gpcm", preset="tiny", dataset=three)
    with pytest.raises(ValueError, match=r"metric='auc': .* ordinal model at K=3"):
        fit(ordinal, three, three, progress=False, metric="auc")


def test_a_dotted_checkpoint_prefix_keeps_best_and_last_apart(tmp_path):
    """`akt_lr0.001` must not lose `.001_best` and `.001_last` to a suffix rule: both pairs
    exist after a run, and the best pair holds the best epoch's weights."""
    data = make_tiny_dataset(5, 0)
    prefix = tmp_path / "dkt_lr0.001"
    model = build_model("dkt", preset="tiny", num_c=5)
    res = fit(model, data, data, progress=False, epochs=3, patience=5, checkpoint=str(prefix))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert {"dkt_lr0.001_best.pt", "dkt_lr0.001_best.json", "dkt_lr0.001_last.pt",
            "dkt_lr0.001_last.json"} <= set(names), names  # fmt: skip
    from kt_lib.checkpoint import load_checkpoint

    meta, tensors = load_checkpoint(tmp_path / "dkt_lr0.001_best.pair")
    assert meta["epoch"] == res.best_epoch
    for k, v in res.model.state_dict().items():
        assert torch.equal(tensors["model"][k], v), k


def test_fit_is_deterministic_and_resumes(tmp_path):
    train, valid = make_tiny_dataset(n=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(**kw):
        torch.manual_seed(0)
        model = build_model("sakt", preset="tiny", dataset=train)
        return fit(model, train, valid, epochs=3, max_len=16, progress=False, patience=9, **kw)

    a, b = run(), run()
    cols = [c for c in a.history.columns if "seconds" not in c]
    assert np.array_equal(a.history[cols].values, b.history[cols].values)
    # stop after 2 epochs, then resume to 3: same history as the straight run
    straight = a.history[cols].values
    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=train)
    first = fit(
        model,
        train,
        valid,
        epochs=2,
        max_len=16,
        progress=False,
        patience=9,
        checkpoint=str(tmp_path / "r"),
    )
    assert a.history.attrs["earlier_seconds"] == first.history.attrs["earlier_seconds"] == 0
    torch.manual_seed(0)
    model = build_model("sakt", preset="tiny", dataset=train)
    resumed = fit(
        model,
        train,
        valid,
        epochs=3,
        max_len=16,
        progress=False,
        patience=9,
        checkpoint=str(tmp_path / "r"),
        resume=True,
    )
    assert np.allclose(resumed.history[cols].values, straight, atol=1e-6)
    # the resumed run's seconds count the first process's too (the records' wall times)
    earlier = resumed.history.attrs["earlier_seconds"]
    assert 0 < earlier <= first.seconds and resumed.seconds > earlier


def test_a_run_that_stopped_early_resumes_to_its_end_not_one_epoch_more(tmp_path):
    """A process killed after the early-stopping epoch's checkpoint but before `fit` returned
    (or a run resumed after it finished) trains no further epoch: patience ran out already."""
    train, valid = make_tiny_dataset(n=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(resume: bool):
        torch.manual_seed(0)
        model = build_model("sakt", preset="tiny", dataset=train)
        return fit(model, train, valid, epochs=30, max_len=16, progress=False, patience=1,
                   lr=0.05, checkpoint=str(tmp_path / "s"), resume=resume)  # fmt: skip

    done = run(resume=False)
    assert len(done.history) < 30  # it stopped early
    again = run(resume=True)
    assert len(again.history) == len(done.history)
    assert again.best_epoch == done.best_epoch and again.best_metric == done.best_metric


def test_dkt_learns_on_a_learnable_signal():
    rng = np.random.default_rng(0)
    from kt_lib.data.dataset import KTDataset, StudentSeq

    def make(n, off):
        studs = []
        for i in range(n):
            q = rng.integers(0, 4, 40)
            r = (q % 2).astype(np.int64)  # skill parity decides the answer
            studs.append(StudentSeq(off + i, q, r))
        return KTDataset(studs, num_c=4)

    torch.manual_seed(0)
    model = build_model("dkt", preset="tiny", num_c=4)
    res = fit(model, make(40, 0), make(10, 100), epochs=5, lr=1e-2, progress=False)
    assert res.best_metric > 0.95


def test_training_recipes_and_the_akt_authors_setup():
    from kt_lib.models.akt import AKTConfig
    from kt_lib.train import TrainConfig

    cfg = TrainConfig.recipe("akt_authors", device="cpu")
    assert (cfg.lr, cfg.batch_size, cfg.bucket, cfg.grad_clip) == (1e-5, 24, 0, None)
    assert (cfg.epochs, cfg.patience, cfg.weight_decay) == (300, 42, 0.0)
    assert TrainConfig.recipe("akt_authors", epochs=2).epochs == 2  # fields still override
    assert TrainConfig.recipe() == TrainConfig()
    with pytest.raises(ValueError, match="unknown training recipe 'akt'"):
        TrainConfig.recipe("akt")
    assert AKTConfig.preset("authors").d_ff == 2048 and AKTConfig.paper().d_ff == 1024


def test_fit_builds_the_optimizer_from_the_models_groups_after_prepare():
    from kt_lib.train import TrainConfig

    data = make_tiny_dataset(num_pid=0, n=12, L=10)
    model = build_model("dkt", dataset=data, preset="tiny")
    calls = []
    model.prepare = lambda train: calls.append("prepare")
    model.param_groups = lambda lr: (
        calls.append(("groups", lr)) or [{"params": list(model.parameters()), "lr": 0.0}]
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, data, data, TrainConfig(epochs=1, lr=0.01, progress=False))
    assert calls == ["prepare", ("groups", 0.01)]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # lr 0 held


def test_a_bf16_fit_scores_outside_its_context_as_it_did_inside():
    """The model `fit` returns after bf16 training gives, evaluated in fp32, the validation AUC
    its best epoch had under bf16 (bf16 once trained on the first step's frozen weights: valid
    AUC 0.50 inside, garbage outside), and it learns."""
    from kt_lib.data.synthetic import simulate
    from kt_lib.evaluate import evaluate

    sim = simulate(num_students=300, seq_len=60, num_c=10, seed=0).data
    train, valid = sim.subset(range(240)), sim.subset(range(240, 300))
    torch.manual_seed(0)
    model = build_model("sakt", dataset=train, preset="tiny")  # paper size: 47 s, the same check
    cfg = TrainConfig(epochs=5, lr=1e-2, precision="bf16", progress=False)
    res = fit(model, train, valid, cfg)
    assert res.best_metric > 0.65  # 0.697 here; the frozen-weights defect stayed near 0.5
    assert abs(evaluate(res.model, valid)["auc"] - res.best_metric) < 0.02


def test_sgd_with_a_stepped_rate_updates_as_torch_sgd_does_and_resumes_the_schedule(tmp_path):
    """optimizer='sgd' is torch's SGD with momentum over the model's groups; the rate is
    base * lr_decay ** (epoch // lr_decay_every) in every group, a function of the epoch, so a
    resumed run continues the schedule (equal to a straight run), and a changed schedule
    changes the result."""
    from kt_lib.train import epoch_lr, make_optimizer

    cfg = TrainConfig(optimizer="sgd", momentum=0.9, lr=0.1, lr_decay=0.5, lr_decay_every=2)
    w1, w2 = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt = make_optimizer(cfg, [{"params": [w1]}, {"params": [w2], "lr": 0.02}])
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.9
    rates = []
    for epoch in range(5):
        epoch_lr(opt, cfg, epoch)
        rates.append([g["lr"] for g in opt.param_groups])
    expected = [[0.1, 0.02]] * 2 + [[0.05, 0.01]] * 2 + [[0.025, 0.005]]
    assert np.allclose(rates, expected)
    assert isinstance(make_optimizer(TrainConfig(), [{"params": [w1]}]), torch.optim.AdamW)

    train, valid = make_tiny_dataset(n=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(epochs=4, **kw):
        torch.manual_seed(0)
        model = build_model("dkt", preset="tiny", dataset=train)
        sgd = dict(optimizer="sgd", momentum=0.9, lr=0.5, lr_decay=0.5, lr_decay_every=1)
        done = fit(model, train, valid, epochs=epochs, max_len=16, progress=False, patience=9,
                   **{**sgd, **kw})  # fmt: skip
        return done, torch.cat([p.detach().flatten() for p in model.parameters()])

    (a, pa), (_, pb) = run(), run(lr_decay=0.9)
    assert not torch.allclose(pa, pb)  # the schedule is used
    run(epochs=2, checkpoint=str(tmp_path / "s"))
    resumed, pr = run(checkpoint=str(tmp_path / "s"), resume=True)
    cols = [c for c in a.history.columns if "seconds" not in c]
    assert np.allclose(resumed.history[cols].values, a.history[cols].values, atol=1e-6)
    assert torch.allclose(pr, pa, atol=1e-6)


def test_the_later_training_fields_leave_earlier_run_keys_alone():
    from kt_lib.runs.spec import LATER_DEFAULTS, train_settings

    plain = train_settings(TrainConfig())
    assert not set(LATER_DEFAULTS) & set(plain)  # at their defaults: not in a run's identity
    sgd = train_settings(TrainConfig(optimizer="sgd", momentum=0.9))
    assert (sgd["optimizer"], sgd["momentum"]) == ("sgd", 0.9) and "lr_decay" not in sgd


def test_a_checkpoint_from_before_the_rate_schedule_resumes(tmp_path, monkeypatch):
    """Epoch checkpoints written before the schedule existed hold optimizer groups without
    `base_lr`: resuming one trains on (a KeyError there would fail every run left in flight),
    equal to a straight run."""
    import kt_lib.train as train_module

    train, valid = make_tiny_dataset(n=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(epochs, **kw):
        torch.manual_seed(0)
        model = build_model("dkt", preset="tiny", dataset=train)
        return fit(model, train, valid, epochs=epochs, max_len=16, progress=False, patience=9,
                   **kw)  # fmt: skip

    straight = run(3)
    made = train_module.make_optimizer

    def old_style(cfg, groups):  # the optimizer as it was: no base_lr, a constant rate
        opt = made(cfg, groups)
        for group in opt.param_groups:
            del group["base_lr"]
        return opt

    with monkeypatch.context() as m:
        m.setattr(train_module, "make_optimizer", old_style)
        m.setattr(train_module, "epoch_lr", lambda opt, cfg, epoch: None)
        run(2, checkpoint=str(tmp_path / "old"))
    resumed = run(3, checkpoint=str(tmp_path / "old"), resume=True)
    cols = [c for c in straight.history.columns if "seconds" not in c]
    assert np.allclose(resumed.history[cols].values, straight.history[cols].values, atol=1e-6)


def test_a_window_loss_is_the_step_mean_times_the_scored_steps_per_window():
    """loss_per="window" (the DKVMN authors' MXNet loss: each window's steps summed, averaged
    over windows) against that sum written out; "step" is the model's mean as it is."""
    from kt_lib.audit import random_batch
    from kt_lib.train import objective

    torch.manual_seed(0)
    model = build_model("dkt", preset="tiny", num_c=5)
    b = random_batch(5, B=4, L=9, seed=1)  # ragged: windows of different lengths
    out = model(b)
    mean = model.loss(out, b)["total"]
    each = torch.nn.functional.binary_cross_entropy_with_logits(
        out.logits, b.r.float(), reduction="none"
    )
    per_window = (each * b.mask).sum(1)  # [B]
    assert int(b.mask.sum()) < b.mask.numel()  # some padding
    assert torch.allclose(objective(mean, b.mask, "window"), per_window.mean())
    assert objective(mean, b.mask, "step") is mean


def test_a_resumed_run_whose_best_weights_are_gone_starts_afresh(tmp_path):
    """The best epoch came before the resume and its `_best` pair was removed (another process
    finishing the same run removes it): the run starts from epoch 0 with a warning (retrying
    the resume would fail the same way every time) and ends as an uninterrupted run."""
    data = make_tiny_dataset(5, 0)
    prefix = str(tmp_path / "run")
    kw = dict(epochs=2, patience=9, progress=False)

    def run(**more):
        torch.manual_seed(0)
        return fit(build_model("dkt", preset="tiny", num_c=5), data, data, **kw, **more)

    straight = run()
    run(checkpoint=prefix)
    for f in tmp_path.glob("run_best.*"):
        f.unlink()
    with pytest.warns(RuntimeWarning, match=r"run_best.pt; the run starts from epoch 0"):
        again = run(checkpoint=prefix, resume=True)
    assert again.best_epoch == straight.best_epoch and len(again.history) == 2
    assert again.best_metric == pytest.approx(straight.best_metric)


def _resumes_without_a_warning(run) -> None:
    """`run(resume=True, epochs=3)` resumes the checkpoint's epochs 0-1 with no RuntimeWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        resumed = run(resume=True, epochs=3)
    assert list(resumed.history["epoch"]) == [0, 1, 2]
    assert resumed.history.attrs["earlier_seconds"] > 0  # epochs 0-1 came from the checkpoint


def test_epochs_of_another_device_kind_or_precision_are_not_resumed(tmp_path):
    """A run's epochs come from one kind of device at one precision: a checkpoint carried from
    this CPU to a GPU (or resumed in bf16) would land as a row of the second alone, paired and
    priced as such (a review). The run starts afresh, with a warning naming both."""
    data = make_tiny_dataset(5, 0)
    prefix = str(tmp_path / "run")
    kw = dict(epochs=2, patience=9, progress=False, checkpoint=prefix)

    def run(**more):
        torch.manual_seed(0)
        return fit(build_model("dkt", preset="tiny", num_c=5), data, data, **{**kw, **more})

    run(epochs=1)
    last = tmp_path / "run_last.json"
    meta = json.loads(last.read_text())
    assert (meta["device_kind"], meta["precision"]) == ("cpu", "fp32")
    last.write_text(json.dumps({**meta, "device_kind": "cuda", "precision": "tf32"}))
    with pytest.warns(RuntimeWarning, match=r"ran on \{'device_kind': 'cuda', 'precision': "):
        again = run(resume=True)
    assert list(again.history["epoch"]) == [0, 1]  # from epoch 0, not from the carried epoch 1
    # a checkpoint from before the record: resumed as it was (nothing to compare)
    meta = json.loads(last.read_text())
    older = {k: v for k, v in meta.items() if k not in ("device_kind", "precision")}
    last.write_text(json.dumps(older))
    _resumes_without_a_warning(run)


def test_epochs_made_under_another_config_are_not_resumed(tmp_path):
    """A preset edited while its run was in flight keeps the run key, so the run's checkpoint
    name: its epochs, made under the old settings, must not land under the new preset's digest
    (a review). The run starts afresh, naming the field; fields the checkpoint predates are not
    compared."""
    data = make_tiny_dataset(5, 0)
    prefix = str(tmp_path / "run")
    kw = dict(epochs=2, patience=9, progress=False, checkpoint=prefix)

    def run(**more):
        torch.manual_seed(0)
        model = build_model("sakt", preset="tiny", num_c=5, **more.pop("fields", {}))
        return fit(model, data, data, **{**kw, **more})

    run(epochs=1)
    with pytest.warns(RuntimeWarning, match=r"another config \(query_positions True \(now False"):
        again = run(resume=True, fields={"query_positions": False})
    assert list(again.history["epoch"]) == [0, 1]  # from epoch 0, not from the carried epoch 1
    last = tmp_path / "run_last.json"
    meta = json.loads(last.read_text())
    assert meta["config"]["query_positions"] is False and meta["epoch"] == 1
    del meta["config"]["query_positions"]  # a checkpoint from before the field existed
    last.write_text(json.dumps(meta))
    _resumes_without_a_warning(run)


def test_a_window_loss_trains_on_whole_batches_of_windows():
    """loss_per="window" is the DKVMN authors' loss over batches of `batch_size` windows; length
    bucketing made batches of 8 to 56 windows on Statics2011, so a step's weight was 1/8 to
    1/56, not their 1/10 (a review). Bucketing is off for it: any `bucket` trains the same."""
    data, valid = make_tiny_dataset(n=40, L=30, seed=0), make_tiny_dataset(n=10, seed=1)

    def run(bucket):
        torch.manual_seed(0)
        model = build_model("dkt", preset="tiny", dataset=data)
        return fit(model, data, valid, epochs=2, batch_size=10, max_len=16, loss_per="window",
                   bucket=bucket, progress=False, patience=9)  # fmt: skip

    a, b = run(0), run(50)
    cols = [c for c in a.history.columns if "seconds" not in c]
    assert np.array_equal(a.history[cols].values, b.history[cols].values)


def test_a_negative_seed_is_refused_before_any_work():
    data = make_tiny_dataset(5, 0)
    with pytest.raises(ValueError, match="TrainConfig.seed must be >= 0, got -1"):
        fit(build_model("dkt", preset="tiny", num_c=5), data, data, seed=-1, progress=False)


def test_a_run_without_a_best_epoch_never_returns_another_runs_best_weights(tmp_path, monkeypatch):
    """Every validation score NaN (a diverged run), so the run has no best epoch; a `_best`
    pair left at its prefix by an earlier run was loaded and tested as this run's weights (a
    review)."""
    import kt_lib.train as train_module

    data = make_tiny_dataset(5, 0)
    prefix = str(tmp_path / "run")
    torch.manual_seed(1)
    earlier = fit(build_model("dkt", preset="tiny", num_c=5), data, data, epochs=1,
                  checkpoint=prefix, progress=False)  # fmt: skip
    scores = train_module.evaluate
    monkeypatch.setattr(
        train_module, "evaluate", lambda *a, **k: {**scores(*a, **k), "auc": float("nan")}
    )
    torch.manual_seed(0)
    model = build_model("dkt", preset="tiny", num_c=5)
    now = fit(model, data, data, epochs=1, checkpoint=prefix, progress=False)
    assert now.best_epoch == -1
    theirs = earlier.model.state_dict()
    assert any(not torch.equal(v, theirs[k]) for k, v in now.model.state_dict().items())


def test_a_second_process_cannot_train_the_same_checkpointed_run(tmp_path):
    """Two trainers of one run would write the same epoch files (and one's cleanup delete the
    other's): while one holds the run's claim, another is refused by name."""
    from kt_lib.checkpoint import remove_checkpoint
    from kt_lib.fileio import locked

    data = make_tiny_dataset(5, 0)
    prefix = tmp_path / "run"
    kw = dict(epochs=1, progress=False, checkpoint=str(prefix))
    with locked(tmp_path / "run.claim"), pytest.raises(ValueError, match=r"run.claim.lock is held"):
        fit(build_model("dkt", preset="tiny", num_c=5), data, data, **kw)
    fit(build_model("dkt", preset="tiny", num_c=5), data, data, **kw)  # free again: it trains
    remove_checkpoint(prefix)
    assert not list(tmp_path.iterdir())  # the claim's file goes with the run's
