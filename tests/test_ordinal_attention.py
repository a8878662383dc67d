"""Seed 002's plug-in ordinal attention (kt_lib.heads.ordinal): every mechanism, the registry,
the pipeline, the seed's mask convention."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.heads.ordinal import (
    MECHANISMS,
    AttentionConfig,
    AttentionContext,
    AttentionMechanism,
    AttentionPipeline,
    AttentionRegistry,
    build_pipeline,
    composite_attention,
)
from kt_lib.models import build_model
from kt_lib.models.gpcm_interface import create_attention_gpcm

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
