"""Core behaviour: masks, attention, the auditor itself, SAKT's seed interface, training."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch
from kt_lib.models import build_model
from kt_lib.models.base import BaseConfig, KTModel, ModelOutput
from kt_lib.models.sakt import SAKT
from kt_lib.train import fit
from tests.conftest import make_tiny_dataset


class _LeakyToy(KTModel):
    """Reads the current response: the auditor must catch it."""

    config_cls = BaseConfig

    def __init__(self, config, lag: int = 0):
        super().__init__(config)
        self.lag = lag
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, batch, return_attention=False):
        r = batch.r.float()
        if self.lag:  # peeks `lag` steps ahead
            r = torch.cat([r[:, self.lag :], torch.zeros_like(r[:, : self.lag])], 1)
        return ModelOutput(logits=self.w * r)


class _TrainOnlyLeak(_LeakyToy):
    """Reads the next response only in training mode, under dropout."""

    def forward(self, batch, return_attention=False):
        if not self.training:
            return ModelOutput(logits=self.w * 0 * batch.r.float())
        nxt = torch.nn.functional.pad(batch.r.float(), (0, 1))[:, 1:]
        return ModelOutput(logits=torch.nn.functional.dropout(self.w * nxt, 0.5))


class _TinyLeak(_LeakyToy):
    """Lets the next response move the logit by 1e-8: below the default tolerance."""

    def forward(self, batch, return_attention=False):
        nxt = torch.nn.functional.pad(batch.r.to(self.w.dtype), (0, 1))[:, 1:]
        return ModelOutput(logits=self.w * 1e-8 * nxt)


def test_auditor_catches_training_only_and_tiny_leaks():
    batch = random_batch(5, B=3, L=10, seed=0)
    train_leak = _TrainOnlyLeak(BaseConfig(num_c=5))
    assert audit_causality(train_leak, batch)  # invisible in eval mode
    assert not audit_causality(train_leak, batch, mode="train")  # same draws: the leak shows
    tiny = _TinyLeak(BaseConfig(num_c=5)).double()
    assert audit_causality(tiny, batch)  # below the default atol
    assert not audit_causality(tiny, batch, atol=1e-10)
    with pytest.raises(ValueError, match="mode"):
        audit_causality(tiny, batch, mode="test")


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
    ],
)
def test_train_config_is_validated_before_any_work(override, field):
    data = make_tiny_dataset(5, 0)
    model = build_model("dkt", preset="tiny", num_c=5)
    with pytest.raises(ValueError, match=field):
        fit(model, data, data, progress=False, **override)


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


@pytest.mark.parametrize("lag", [0, 1, 5])
def test_auditor_catches_leaky_toy(lag):
    model = _LeakyToy(BaseConfig(num_c=5), lag)
    result = audit_causality(model, random_batch(5, L=12), steps=list(range(12)))
    assert not result and result.max_diff > 0.5


def test_auditor_catches_question_leak():
    class PeekNextQuestion(_LeakyToy):
        def forward(self, batch, return_attention=False):
            q = torch.cat([batch.q[:, 1:], batch.q[:, :1]], 1).float()
            return ModelOutput(logits=self.w * q)

    assert not audit_causality(PeekNextQuestion(BaseConfig(num_c=50)), random_batch(50, L=10))


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


def test_sakt_seed_interface_shares_registry_weights():
    torch.manual_seed(0)
    reg = build_model("sakt", preset="tiny", num_c=10).eval()
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
    fit(
        model,
        train,
        valid,
        epochs=2,
        max_len=16,
        progress=False,
        patience=9,
        checkpoint=str(tmp_path / "r"),
    )
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


def test_batch_to_and_clone_are_independent():
    b = random_batch(5, B=2, L=4)
    c = b.clone()
    c.r[:] = 1
    assert not torch.equal(b.r, c.r)
    assert isinstance(b.to("cpu"), Batch)


def test_sakt_seed_example_reads_the_whole_history():
    torch.manual_seed(0)
    model = SAKT(10, d=16, num_heads=2).eval()
    q, qry = torch.tensor([[1, 2, 3]]), torch.tensor([[4]])
    probs = {model(q, torch.tensor([r]), qry).item() for r in ([1, 0, 1], [0, 0, 1], [1, 1, 1])}
    assert len(probs) == 3  # every past response moves the prediction for qry=[4]


def test_keep_freed_memory_applies_once_on_glibc():
    import platform

    from kt_lib import runtime

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert runtime.keep_freed_memory() is expected
    assert runtime.keep_freed_memory() is expected  # idempotent
    x = torch.ones(64 << 20 >> 2)  # 64 MB: above glibc's default mmap threshold
    del x
    assert torch.ones(8).sum() == 8  # allocation still works after the settings


# --- bad configuration input (issue 15) ----------------------------------------------------------


def test_duplicate_yaml_and_json_keys_are_refused(tmp_path):
    from kt_lib.config import read_mapping

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model:\n  d: 16\n  n_heads: 2\n  d: 32\n")
    with pytest.raises(ValueError, match=r"cfg\.yaml: .*line 4: duplicate key 'd'"):
        read_mapping(cfg)
    cfg.write_text("base: &b {d: 16, n_heads: 2}\nmodel:\n  <<: *b\n  d: 32\n")  # merge override
    assert read_mapping(cfg)["model"] == {"d": 32, "n_heads": 2}
    js = tmp_path / "cfg.json"
    js.write_text('{"model": {"d": 16, "d": 32}}')
    with pytest.raises(ValueError, match=r"cfg\.json: .*duplicate key 'd'"):
        read_mapping(js)
    js.write_text('{"model": {"d": 16,}}')
    with pytest.raises(ValueError, match=r"cfg\.json: not valid JSON at line 1, column 20"):
        read_mapping(js)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("learning_rate", -1, "must be a finite number > 0, got -1"),
        ("learning_rate", "1e-3", r"must be a finite number > 0, got '1e-3' \(YAML reads"),
        ("epochs", "many", "must be an integer >= 1, got 'many'"),
        ("epochs", 2.5, "must be an integer >= 1"),
        ("batch_size", 0, "must be an integer >= 1, got 0"),
        ("batch_size", True, "must be an integer >= 1, got True"),
        ("mixed_precision", "yes please", "must be true or false"),
    ],
)
def test_seed_ordinal_yaml_training_section_is_checked(tmp_path, field, value, message):
    import yaml

    from kt_lib.models.gpcm import load_seed_config

    raw = {"model": {"n_questions": 10, "n_responses": 4}, "training": {field: value}}
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=rf"seed\.yaml: training\.{field} {message}"):
        load_seed_config(path)
    raw["training"] = {"learning_rate": 0.01, "batch_size": 8, "epochs": 3}
    path.write_text(yaml.safe_dump(raw))
    assert load_seed_config(path).train == {"lr": 0.01, "batch_size": 8, "epochs": 3}


@pytest.mark.parametrize("field, value", [("decay_factor", "fast"), ("future_weight", "0.3")])
def test_simakt_temporal_config_strings_name_file_and_field(tmp_path, field, value):
    import yaml

    from kt_lib.models.simakt import load_simakt_config

    head = {"type": "cluster", "n_clusters": 3, "temporal_config": {field: value}}
    raw = {"intra_heads": 3, "inter_heads": [head]}
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(raw))
    where = r"sim\.yaml: inter_heads\[0\]: "
    with pytest.raises(ValueError, match=rf"{where}temporal_config\.{field} must be a number"):
        load_simakt_config(path)
    inline = rf"similarity: inter_heads\[0\]: temporal_config\.{field}"
    with pytest.raises(ValueError, match=inline):
        load_simakt_config(raw)


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
    assert AKTConfig.authors().d_ff == 2048 and AKTConfig.paper().d_ff == 1024


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
