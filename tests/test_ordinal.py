"""Ordinal KT (seed 002): GPCM layer, mechanisms, pipeline, models, losses, metrics, configs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from kt_lib.audit import audit_causality, random_batch
from kt_lib.data.dataset import Batch, BatchLoader
from kt_lib.heads.gpcm import (
    GPCMHead,
    emd_loss,
    gpcm_logits,
    ordered_thresholds,
    parse_loss,
    qwk_loss,
)
from kt_lib.heads.ordinal import (
    MECHANISMS,
    AttentionConfig,
    AttentionContext,
    AttentionMechanism,
    AttentionPipeline,
    AttentionRegistry,
    MechanismCache,
    build_pipeline,
    composite_attention,
)
from kt_lib.heads.ordinal.config import CONFIG_DIR, SEED_CONFIG, read_seed_config
from kt_lib.metrics import ordinal_confusion_matrix, ordinal_metrics, predict_category
from kt_lib.models import build_model
from kt_lib.models.gpcm_interface import (
    ModularAttentionGPCM,
    create_attention_gpcm,
    create_model_from_config,
    load_seed_config,
)
from kt_lib.viz.ordinal import concept_theta_moments, item_parameter_recovery
from tests.conftest import make_tiny_dataset

B, L, D, H, K = 2, 10, 64, 4, 4
MECHANISM_NAMES = AttentionRegistry.list_available()


@pytest.fixture
def config() -> AttentionConfig:
    return AttentionConfig(embed_dim=D, n_heads=H, n_cats=K)


def make_context(seed: int = 0, ragged: bool = False) -> AttentionContext:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, L, dtype=torch.bool)
    if ragged:
        mask[1, L - 3 :] = False
    return AttentionContext(
        embeddings=torch.randn(B, L, D, generator=g),
        responses=torch.randint(0, K, (B, L), generator=g) * mask,
        mask=mask if ragged else None,
        metadata={},
    )


def make_mechanism(name: str, config: AttentionConfig) -> AttentionMechanism:
    torch.manual_seed(0)
    return AttentionRegistry.create(name, config).eval()


# --- mechanisms: every registered one ----------------------------------------------------------


def test_the_seed_mechanisms_are_registered():
    assert set(MECHANISM_NAMES) >= {
        "ordinal_aware",
        "response_conditioned",
        "ordinal_pattern",
        "qwk_aligned",
        "hierarchical_ordinal",
    }


@pytest.mark.parametrize("mechanism_name", MECHANISM_NAMES)
@pytest.mark.parametrize("ragged", [False, True])
def test_mechanism_forward_shape_no_nan_backward(mechanism_name, config, ragged):
    mechanism = AttentionRegistry.create(mechanism_name, config).train()
    context = make_context(ragged=ragged)
    context.embeddings.requires_grad_(True)
    output = mechanism(context)
    assert output.shape == context.embeddings.shape
    assert not torch.isnan(output).any()
    output.square().mean().backward()
    assert torch.isfinite(context.embeddings.grad).all()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in mechanism.parameters())


@pytest.mark.parametrize("mechanism_name", MECHANISM_NAMES)
def test_attention_weights_valid(mechanism_name, config):
    mechanism = make_mechanism(mechanism_name, config)
    context = make_context(ragged=True)
    maps = mechanism.get_attention_weights(context)
    assert maps, "every mechanism exposes at least one attention map"
    visible = torch.arange(L).unsqueeze(1) > torch.arange(L).unsqueeze(0)  # [L, L] s < t
    visible = visible & context.mask.unsqueeze(1)  # [B, L, L] valid keys
    for name, w in maps.items():
        assert w.shape == (B, H, L, L), name
        assert w.min() >= 0 and w.max() <= 1, name
        assert (w[~visible.unsqueeze(1).expand_as(w)] == 0).all(), f"{name}: weight on a hidden key"
        sums = w.sum(-1)  # [B, H, L]
        has_key = visible.any(-1).unsqueeze(1).expand_as(sums)
        assert torch.allclose(sums[has_key], torch.ones_like(sums[has_key]), atol=1e-5), name
        assert (sums[~has_key] == 0).all(), f"{name}: rows without a visible key must be zero"
        assert (w[:, :, 0] == 0).all(), f"{name}: step 0 has no past"


@pytest.mark.parametrize("mechanism_name", MECHANISM_NAMES)
def test_mechanism_is_causal(mechanism_name, config):
    """Output at t is unchanged when responses at >= t and embeddings at > t change."""
    mechanism = make_mechanism(mechanism_name, config)
    context = make_context(ragged=True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        base = mechanism(context)
        base_w = mechanism.get_attention_weights(context)
        for t in range(L):
            for _ in range(2):
                r = context.responses.clone()
                e = context.embeddings.clone()
                r[:, t:] = torch.randint(0, K, (B, L - t), generator=g)
                e[:, t + 1 :] = torch.randn(B, L - t - 1, D, generator=g)
                pert = AttentionContext(e, r, context.mask, {})
                out = mechanism(pert)
                assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5), t
                for key, w in mechanism.get_attention_weights(pert).items():
                    assert torch.allclose(w[:, :, : t + 1], base_w[key][:, :, : t + 1], atol=1e-5)


@pytest.mark.parametrize("mechanism_name", MECHANISM_NAMES)
def test_padded_steps_are_never_read(mechanism_name, config):
    mechanism = make_mechanism(mechanism_name, config)
    context = make_context(ragged=True)
    pad = ~context.mask
    r, e = context.responses.clone(), context.embeddings.clone()
    r[pad] = K - 1
    e[pad] = 5.0
    with torch.no_grad():
        a = mechanism(context)
        b = mechanism(AttentionContext(e, r, context.mask, {}))
    assert torch.allclose(a[context.mask], b[context.mask], atol=1e-5)


def test_context_errors_name_the_tensor(config):
    mechanism = make_mechanism("ordinal_aware", config)
    ctx = make_context()
    with pytest.raises(ValueError, match=r"responses must lie in \[0, 3\]"):
        mechanism(AttentionContext(ctx.embeddings, ctx.responses + K))
    with pytest.raises(ValueError, match="responses must be"):
        mechanism(AttentionContext(ctx.embeddings, ctx.responses[:, :3]))
    with pytest.raises(ValueError, match="integer categories"):
        mechanism(AttentionContext(ctx.embeddings, ctx.responses.float()))


# --- registry ----------------------------------------------------------------------------------


def test_registry_create_unknown_lists_names(config):
    with pytest.raises(KeyError, match="valid names: .*ordinal_aware"):
        AttentionRegistry.create("no_such_mechanism", config)
    with pytest.raises(ValueError):  # the seed raised ValueError: both work
        AttentionRegistry.create("no_such_mechanism", config)


def test_registry_rejects_non_mechanisms():
    with pytest.raises(ValueError, match="must inherit from AttentionMechanism"):
        AttentionRegistry.register("not_a_mechanism")(torch.nn.Linear)


def test_registry_custom_mechanism_plugs_into_the_model():
    """Seed 002's extension guide: register a mechanism, then use it by name."""

    @AttentionRegistry.register("test_identity")
    class Identity(AttentionMechanism):
        def attend(self, context, need_weights=False):
            return context.embeddings, {}

    try:
        assert "test_identity" in AttentionRegistry.list_available()
        model = create_attention_gpcm(
            20, 4, mechanisms=["test_identity", "ordinal_aware"], embed_dim=16, n_heads=2
        )
        batch = random_batch(20, B=2, L=8, K=4)
        assert model(batch).logits.shape == (2, 8, 4)
    finally:
        del MECHANISMS["test_identity"]


def test_attention_config_validation():
    with pytest.raises(ValueError, match="not divisible"):
        AttentionRegistry.create("ordinal_aware", AttentionConfig(embed_dim=10, n_heads=4))
    with pytest.raises(ValueError, match="correct_threshold"):
        AttentionRegistry.create("ordinal_aware", AttentionConfig(n_cats=2, correct_threshold=2))
    with pytest.raises(ValueError, match="unknown field"):
        AttentionRegistry.create("ordinal_aware", {"embed_dim": 16, "n_head": 2})


# --- pipeline ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fusion", ["concat", "weighted", "mean", "gated"])
def test_pipeline_fusions(fusion, config):
    torch.manual_seed(0)
    pipeline = build_pipeline(["ordinal_aware", "hierarchical_ordinal"], config, fusion).eval()
    context = make_context(ragged=True)
    out = pipeline(context)
    assert out.shape == context.embeddings.shape and torch.isfinite(out).all()
    maps = pipeline.get_attention_weights(context)
    assert set(maps) == {
        "ordinal_aware/attention",
        "hierarchical_ordinal/binary",
        "hierarchical_ordinal/ordinal",
    }
    weights = pipeline.fusion_weights()
    if fusion == "weighted":
        assert torch.allclose(weights.sum(), torch.tensor(1.0)) and (weights > 0).all()
    else:
        assert weights is None


def test_pipeline_mean_and_weighted_of_one_mechanism_is_that_mechanism(config):
    torch.manual_seed(0)
    mechanism = AttentionRegistry.create("qwk_aligned", config).eval()
    context = make_context()
    with torch.no_grad():
        alone = mechanism(context)
        for fusion in ("mean", "weighted"):
            assert torch.allclose(AttentionPipeline([mechanism], fusion)(context), alone, atol=1e-6)


def test_gated_fusion_is_the_seeds_composite_attention(config):
    """CompositeAttention: g = sigmoid(W [o1; o2]), output g o1 + (1 - g) o2 per feature."""
    torch.manual_seed(0)
    composite = composite_attention(config).eval()
    first, second = composite.mechanisms
    assert composite.names == ["ordinal_aware", "ordinal_pattern"]
    context = make_context(ragged=True)
    with torch.no_grad():
        o1, o2 = first(context), second(context)
        g = torch.sigmoid(composite.gate(torch.cat([o1, o2], -1)))
        assert torch.allclose(composite(context), g * o1 + (1 - g) * o2, atol=1e-6)
    assert set(composite.get_attention_weights(context)) == {
        "ordinal_aware/attention",
        "ordinal_pattern/attention",
    }
    with pytest.raises(ValueError, match="exactly two mechanisms, got 3"):
        build_pipeline(["ordinal_aware", "qwk_aligned", "ordinal_pattern"], config, "gated")
    with pytest.raises(ValueError, match="exactly two mechanisms"):
        build_model("modular_attention_gpcm", num_c=5, mechanisms=["ordinal_aware"], fusion="gated")


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_composite_attention_is_causal(config, mode):
    """The gated pipeline's output at t ignores responses >= t and embeddings > t (same draws)."""
    torch.manual_seed(0)
    composite = composite_attention(config).train(mode == "train")
    context = make_context(ragged=True)
    g = torch.Generator().manual_seed(1)

    def run(ctx):
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(0)
            return composite(ctx)

    base = run(context)
    for t in range(L):
        r, e = context.responses.clone(), context.embeddings.clone()
        r[:, t:] = torch.randint(0, K, (B, L - t), generator=g)
        e[:, t + 1 :] = torch.randn(B, L - t - 1, D, generator=g)
        out = run(AttentionContext(e, r, context.mask))
        assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5), t


def test_pipeline_errors(config):
    with pytest.raises(ValueError, match="unknown fusion method 'sum'"):
        build_pipeline(["ordinal_aware"], config, "sum")
    with pytest.raises(ValueError, match="at least one"):
        AttentionPipeline([], "mean")
    small = AttentionRegistry.create("ordinal_aware", AttentionConfig(embed_dim=8, n_heads=2))
    big = AttentionRegistry.create("ordinal_aware", config)
    with pytest.raises(ValueError, match="equal embed_dim"):
        AttentionPipeline([small, big], "mean")
    assert AttentionPipeline([small, big], "concat").fusion_layer.out_features == 8


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


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_a_seed_convention_mask_is_honoured_or_refused(name, config):
    """Seed 002's AttentionContext.mask is a padding mask (True = padded). Passed as
    `padding_mask` it is honoured (the same output as our mask); passed as `mask` on an
    unpadded batch (all False) it would mask every real step, and is refused, naming both."""
    ours = make_context(ragged=True)
    padding = ~ours.mask
    mechanism = make_mechanism(name, config)
    seedwise = AttentionContext(ours.embeddings, ours.responses, padding_mask=padding)
    with torch.no_grad():
        torch.testing.assert_close(mechanism(seedwise), mechanism(ours))
    unpadded = torch.zeros(B, L, dtype=torch.bool)  # the seed's mask of a batch with no padding
    with pytest.raises(ValueError, match=r"no real step in row 0.*padding_mask="):
        mechanism(AttentionContext(ours.embeddings, ours.responses, mask=unpadded))
    with pytest.raises(ValueError, match="not both"):
        AttentionContext(ours.embeddings, ours.responses, mask=ours.mask, padding_mask=padding)
