"""Ordinal KT models (seed 002): causality, binary data, losses, the evaluation cache, the seed's
configuration files, parameter recovery and plots."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch, BatchLoader
from kt_lib.heads.ordinal import AttentionRegistry, MechanismCache
from kt_lib.heads.ordinal.config import CONFIG_DIR, SEED_CONFIG, read_seed_config
from kt_lib.metrics import ordinal_confusion_matrix, ordinal_metrics
from kt_lib.models import build_model
from kt_lib.models.gpcm_interface import (
    ModularAttentionGPCM,
    create_model_from_config,
    load_seed_config,
)
from kt_lib.viz.ordinal import concept_theta_moments, item_parameter_recovery
from tests.conftest import make_tiny_dataset

B, L, K = 2, 10, 4
MECHANISM_NAMES = AttentionRegistry.list_available()


# --- models: causality audit, binary data, losses ----------------------------------------------


AUDITED = [
    ("attention_gpcm", {"n_layers": 2}, 2),
    ("attention_gpcm", {"n_layers": 2}, 4),
    ("modular_attention_gpcm", {"n_layers": 2, "mechanisms": MECHANISM_NAMES}, 2),
    ("modular_attention_gpcm", {"n_layers": 2, "mechanisms": MECHANISM_NAMES}, 4),
    *[("modular_attention_gpcm", {"mechanisms": [m]}, 4) for m in MECHANISM_NAMES],
    *[("modular_attention_gpcm", {"fusion": f}, 4) for f in ("concat", "weighted", "mean")],
    (
        "modular_attention_gpcm",
        {"mechanisms": ["ordinal_aware", "ordinal_pattern"], "fusion": "gated"},
        4,
    ),
    ("modular_attention_gpcm", {"n_layers": 2, "gradient_checkpointing": True}, 4),
    ("attention_gpcm", {"n_layers": 2, "gradient_checkpointing": True}, 4),
]


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name, overrides, n_cats", AUDITED)
def test_models_pass_the_causality_audit(name, overrides, n_cats, mode):
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=12, K=n_cats, **overrides)
    batch = random_batch(12, B=4, L=16, K=n_cats, seed=3)
    result = audit_causality(model, batch, steps=[0, 1, 4, 9, 14, 15], trials=1, mode=mode)
    assert result, str(result)


def saved_activation_bytes(model, batch: Batch) -> int:
    """Bytes autograd keeps for the backward pass of one training loss (parameters excluded,
    each storage once): what gradient checkpointing reduces."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            kept[s.data_ptr()] = max(kept.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        terms = model.loss(model(batch), batch)
    terms["total"].backward()
    return sum(kept.values())


@pytest.mark.parametrize("name", ["modular_attention_gpcm", "attention_gpcm"])
def test_gradient_checkpointing_same_gradients_less_memory(name):
    """Checkpointed training recomputes the encoder with the same dropout draws: identical loss
    and gradients (so the audited model's causality carries over), fewer bytes kept."""
    batch = random_batch(12, B=3, L=40, K=4, seed=1)
    kept, grads, logits = {}, {}, {}
    for on in (False, True):
        torch.manual_seed(0)
        model = build_model(
            name, preset="tiny", num_c=12, K=4, n_layers=2, gradient_checkpointing=on
        )
        torch.manual_seed(1)
        kept[on] = saved_activation_bytes(model.train(), batch)
        grads[on] = [p.grad for p in model.parameters()]
        torch.manual_seed(1)
        logits[on] = model(batch).logits.detach()
        model.eval()
        with torch.no_grad():  # evaluation ignores the switch
            logits[on, "eval"] = model(batch).logits
    assert torch.equal(logits[False], logits[True])
    assert torch.equal(logits[False, "eval"], logits[True, "eval"])
    assert all(
        torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[False], grads[True], strict=True)
    )
    assert kept[True] < 0.7 * kept[False], kept


def test_bf16_autocast_trains_the_modular_model():
    """mixed_precision: true maps to TrainConfig(precision="bf16"): autocast, fp32 weights."""
    from kt_lib.runtime import precision_context

    torch.manual_seed(0)
    model = build_model(
        "modular_attention_gpcm",
        preset="tiny",
        num_c=12,
        K=4,
        fusion="gated",
        mechanisms=["ordinal_aware", "ordinal_pattern"],
    )
    batch = random_batch(12, B=3, L=12, K=4)
    model.eval()
    with torch.no_grad():
        full = model(batch).logits
        with precision_context("bf16", "cpu"):
            half = model(batch).logits
    assert not torch.equal(half.float(), full)  # autocast ran in bfloat16 ...
    assert torch.allclose(half.float(), full, atol=0.1)  # ... to bfloat16's precision
    model.train()
    with precision_context("bf16", "cpu"):
        terms = model.loss(model(batch), batch)
    assert torch.isfinite(terms["total"])
    terms["total"].backward()
    assert all(
        p.grad is None or (p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all())
        for p in model.parameters()
    )


# --- evaluation cache -------------------------------------------------------------------------


def test_eval_cache_returns_exact_outputs_and_never_stale_ones():
    torch.manual_seed(0)
    model = build_model("modular_attention_gpcm", preset="tiny", num_c=12, K=4, n_layers=2).eval()
    batch = random_batch(12, B=3, L=10, K=4)
    with torch.no_grad():
        plain = model(batch).logits
        with model.eval_cache() as cache:
            first, again = model(batch).logits, model(batch).logits
            n = 2 * len(model.config.mechanisms)  # mechanisms per block x blocks
            assert (cache.misses, cache.hits) == (n, n)
            assert torch.equal(first, plain) and torch.equal(again, plain)
            # the seed's key (shape + set of responses) would collide here: same shape, same
            # response values, another order
            other = batch.clone()
            other.r = batch.r.flip(1) * batch.mask
            assert torch.equal(model(other).logits, model.eval().forward(other).logits)
            assert not torch.equal(model(other).logits[batch.mask], plain[batch.mask])
            # parameters changed in place: a miss, and the new output
            misses = cache.misses
            model.encoder.pipelines[0].mechanisms[0].distance_penalty.add_(1.0)
            changed = model(batch).logits
            assert cache.misses > misses and not torch.equal(changed, plain)
            # the caller's tensors edited in place after caching: a miss too
            misses = cache.misses
            batch.r[0, 0] = (batch.r[0, 0] + 1) % 4
            model(batch)
            assert cache.misses > misses
        assert all(p.cache is None for p in model.encoder.pipelines)
    with model.eval_cache() as cache:  # gradients or training mode bypass it
        model(batch)
        model.train()
        with torch.no_grad():
            model(batch)
        assert cache.hits == cache.misses == 0
    with pytest.raises(ValueError, match="max_entries"):
        MechanismCache(0)


def test_binary_data_is_a_2pl_and_evaluates_with_auc():
    from kt_lib.train import evaluate, fit

    data = make_tiny_dataset(num_c=8, num_pid=0, K=2, n=30, L=20)
    torch.manual_seed(0)
    model = build_model("attention_gpcm", preset="tiny", dataset=data)
    assert model.config.K == 2
    model.eval()
    batch = random_batch(8, B=3, L=10, K=2)
    out = model(batch)
    theta, alpha, beta = out.extras["theta"], out.extras["alpha"], out.extras["thresholds"][..., 0]
    p1 = model.probabilities(out)[..., 1]
    assert torch.allclose(p1, torch.sigmoid(alpha * (theta - beta)), atol=1e-6)
    res = fit(model, data, data, epochs=1, progress=False, metric="auc")
    metrics = evaluate(res.model, data)
    assert {"auc", "qwk", "acc", "rmse", "logloss"} <= set(metrics)


@pytest.mark.parametrize("loss", ["ce", "emd", "qwk", "ce+emd", "ce+qwk"])
def test_configurable_losses_train(loss):
    data = make_tiny_dataset(num_c=8, num_pid=0, K=4, n=20, L=15)
    torch.manual_seed(0)
    model = build_model("attention_gpcm", preset="tiny", dataset=data, loss=loss)
    batch = random_batch(8, B=3, L=10, K=4)
    terms = model.loss(model(batch), batch)
    assert torch.isfinite(terms["total"])
    assert (set(loss.split("+")) <= set(terms)) == ("+" in loss)
    terms["total"].backward()
    with pytest.raises(ValueError, match="loss 'ce\\+mse'"):
        build_model("attention_gpcm", num_c=8, loss="ce+mse")


# --- configuration files -----------------------------------------------------------------------


def test_seed_yaml_loads_into_the_modular_model():
    setup = load_seed_config(SEED_CONFIG)
    c = setup.config
    assert setup.model == "modular_attention_gpcm"
    assert c.mechanisms == ["ordinal_aware", "response_conditioned", "qwk_aligned"]
    assert (c.fusion, c.d, c.n_heads, c.K, c.num_c) == ("weighted", 512, 8, 4, 1000)
    assert (c.distance_penalty, c.window_size, c.correct_threshold) == (0.5, 3, 2)
    assert setup.train == {"lr": 0.001, "batch_size": 32, "epochs": 100, "precision": "bf16"}
    assert c.gradient_checkpointing is True
    from kt_lib.train import TrainConfig

    TrainConfig(**setup.train).validate()
    data = make_tiny_dataset(num_c=9, num_pid=0, K=4)
    model = create_model_from_config(SEED_CONFIG, dataset=data, d=16, n_heads=2)
    assert isinstance(model, ModularAttentionGPCM) and model.config.num_c == 9
    assert len(model.attention_pipeline.mechanisms) == 3


def _seed_dict(**changes) -> dict:
    base = {
        "attention": {
            "type": "modular",
            "mechanisms": ["ordinal_aware"],
            "fusion_method": "mean",
            "config": {"embed_dim": 16, "n_heads": 2, "n_cats": 4},
        },
        "model": {"n_questions": 10, "n_responses": 4, "embed_dim": 16},
    }
    for path, value in changes.items():
        section, key = path.split(".")
        if value is None:
            base[section].pop(key, None)
        else:
            base[section][key] = value
    return base


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"attention.mechanisms": ["ordinal_awar"]}, "unknown mechanism"),
        ({"attention.fusion_method": "sum"}, "fusion must be one of"),
        ({"attention.type": "fancy"}, "attention.type must be"),
        ({"attention.heads": 2}, r"unknown key\(s\) \['heads'\] in 'attention'"),
        ({"attention.config": {"embed_dim": 32}}, "embed_dim=32 disagrees"),
        ({"attention.config": {"n_cats": 5}}, "n_cats=5 disagrees"),
        ({"attention.config": {"temperature": 1.0}}, "unknown field"),
        ({"attention.config": {"n_heads": 3}}, "not divisible"),
        ({"model.n_questions": None}, "n_questions is required"),
        ({"attention.config": None, "model.embed_dim": "big"}, "expected int"),
    ],
)
def test_seed_config_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        load_seed_config(_seed_dict(**changes))


def test_seed_config_structure_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown section\(s\) \['optimizer'\]"):
        load_seed_config({**_seed_dict(), "optimizer": {}})
    with pytest.raises(ValueError, match="need type: modular"):
        load_seed_config(_seed_dict(**{"attention.type": "basic"}))
    basic = _seed_dict(**{"attention.type": "basic"})
    basic["attention"] = {"type": "basic"}
    assert load_seed_config(basic).model == "attention_gpcm"
    with pytest.raises(ValueError, match="n_responses=4 but the data has K=2"):
        load_seed_config(_seed_dict(), dataset=make_tiny_dataset(K=2))
    bad = tmp_path / "bad.yaml"
    bad.write_text("attention: [1, 2]\n")
    with pytest.raises(ValueError, match="bad.yaml: section 'attention' must be a mapping"):
        load_seed_config(bad)
    bad.write_text("model: {n_questions: 5}\ntraining: {warmup_steps: 10}\n")
    with pytest.raises(
        ValueError, match=r"bad.yaml: unknown key\(s\) \['warmup_steps'\] in 'training'"
    ):
        load_seed_config(bad)


def test_seed_training_switches_are_applied():
    """No seed key is dropped: checkpointing reaches the model, mixed precision the training."""
    off = {**_seed_dict(), "training": {"gradient_checkpointing": False, "mixed_precision": False}}
    setup = load_seed_config(off)
    assert setup.config.gradient_checkpointing is False and setup.train == {"precision": "fp32"}
    on = {**_seed_dict(), "training": {"gradient_checkpointing": True, "mixed_precision": True}}
    model = load_seed_config(on).build()
    assert all(p.gradient_checkpointing for p in model.encoder.pipelines)
    assert read_seed_config(on).train == {"precision": "bf16"}
    seed = read_seed_config(SEED_CONFIG)  # the file alone, before any model is built
    assert (seed.attention_type, seed.n_questions, seed.gradient_checkpointing) == (
        "modular",
        1000,
        True,
    )


def test_shipped_kt_lib_configs_build(tmp_path):
    data = make_tiny_dataset(num_c=9, num_pid=0, K=4)
    modular = build_model("modular_attention_gpcm", CONFIG_DIR / "modular_default.yaml", data)
    assert len(modular.attention_pipeline.mechanisms) == 4
    basic = build_model("attention_gpcm", CONFIG_DIR / "attention_gpcm_ordinal_loss.yaml", data)
    assert basic.loss_parts == ["ce", "emd"]


# --- recovery helper and plots -----------------------------------------------------------------


def test_item_parameter_recovery_and_plots():
    from kt_lib.viz import ordinal as viz

    torch.manual_seed(0)
    model = build_model("modular_attention_gpcm", preset="tiny", num_c=6, K=4)
    torch.nn.init.normal_(model.gpcm.alpha_raw.weight)
    learned = model.item_parameters()
    table, corr = item_parameter_recovery(
        model, 2 * learned["alpha"] + 1, 3 * learned["thresholds"] - 1
    )
    assert corr == pytest.approx({"threshold_r": 1.0, "alpha_r": 1.0}) and len(table) == 6 * 4
    with pytest.raises(ValueError, match="thresholds"):
        item_parameter_recovery(model, learned["alpha"], learned["thresholds"][:, :2])
    # per-concept shifts of theta are not identified: the anchored frame removes them
    shift, scale = np.linspace(-2, 2, 6), np.linspace(0.5, 2, 6)
    moments = {"mean": shift, "sd": scale}
    true_thr = (learned["thresholds"] - shift[:, None]) / scale[:, None]
    table, corr = item_parameter_recovery(model, learned["alpha"] * scale, true_thr, moments)
    assert corr["threshold_r_anchored"] == pytest.approx(1.0)
    assert corr["alpha_r_anchored"] == pytest.approx(1.0)
    assert corr["threshold_r"] < 0.99 and "anchored" in table
    data = make_tiny_dataset(num_c=6, num_pid=0, K=4, n=10, L=12)
    found = concept_theta_moments(model, data)
    assert found["mean"].shape == (6,) and np.isfinite(found["mean"]).all()
    model.eval()
    with torch.no_grad():
        pairs = [(model(b).extras["theta"][b.mask], b.q[b.mask]) for b in BatchLoader(data, 4, 12)]
    theta, q = torch.cat([t for t, _ in pairs]), torch.cat([c for _, c in pairs])
    expected = [float(theta[q == c].mean()) for c in range(6)]
    assert found["mean"] == pytest.approx(expected, abs=1e-5)
    assert found["sd"] == pytest.approx(
        [float(theta[q == c].std(unbiased=False)) for c in range(6)], abs=1e-5
    )
    y = np.array([0, 1, 2, 3, 3])
    prob = np.eye(4)[[0, 1, 1, 0, 3]]
    viz.plot_confusion(ordinal_confusion_matrix(y, prob))
    viz.plot_category_f1({"a": ordinal_metrics(y, prob), "b": ordinal_metrics(y, np.eye(4)[y])})
    viz.plot_parameter_recovery(table, corr)
    viz.plot_parameter_recovery(table, corr, frame="anchored")
    batch = random_batch(6, B=1, L=8, K=4)
    model.eval()
    viz.plot_attention_maps(model(batch, return_attention=True).attention)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_adjacent_accuracy_is_named_apart_from_exact_accuracy_and_the_old_name_still_stops():
    from kt_lib.train import TrainConfig, fit

    m = ordinal_metrics(np.array([0, 1, 2, 3]), np.eye(4)[[1, 1, 0, 0]])
    assert m["acc"] == 0.25 and m["adjacent_acc"] == 0.5 and "ordinal_acc" not in m
    train = make_tiny_dataset(K=4, n=12, L=10, seed=1)
    valid = make_tiny_dataset(K=4, n=8, L=10, seed=2)
    model = build_model("attention_gpcm", dataset=train, preset="tiny")
    res = fit(model, train, valid, TrainConfig(epochs=1, metric="ordinal_acc", progress=False))
    assert res.best_metric == res.history["valid_adjacent_acc"].iloc[0]
