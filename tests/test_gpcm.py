"""Seed 002's interface to the GPCM models (kt_lib.models.gpcm_interface): constructors, (questions,
responses) calls, padding, errors, the factory."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.heads.ordinal import (
    AttentionConfig,
)
from kt_lib.models import build_model
from kt_lib.models.gpcm_interface import (
    AttentionGPCM,
    ModularAttentionGPCM,
    create_attention_gpcm,
)


def test_pipeline_integration():
    """Seed 002's integration test as written: constructor keywords, model(questions, responses)."""
    model = ModularAttentionGPCM(
        n_questions=100,
        n_responses=4,
        attention_mechanisms=["ordinal_aware", "qwk_aligned"],
        fusion_method="weighted",
    )
    questions = torch.randint(0, 100, (8, 20))
    responses = torch.randint(0, 4, (8, 20))
    output = model(questions, responses)
    assert output.shape == (8, 20, 4)
    assert not torch.isnan(output).any()
    assert torch.allclose(output.sum(-1), torch.ones(8, 20), atol=1e-5)
    c = model.config  # the seed's defaults: embed_dim 512, AttentionConfig(n_heads=8, dropout=0.1)
    assert (c.num_c, c.K, c.d, c.n_heads, c.dropout, c.fusion) == (100, 4, 512, 8, 0.1, "weighted")
    maps = model.get_attention_weights()
    assert set(maps) == {"ordinal_aware/attention", "qwk_aligned/attention"}
    assert all(w.shape == (8, 8, 20, 20) for w in maps.values())


@pytest.mark.parametrize(
    "mechanisms, fusion",
    [
        (["ordinal_aware"], "mean"),
        (["response_conditioned", "ordinal_pattern"], "concat"),
        (["qwk_aligned", "hierarchical_ordinal"], "weighted"),
        (["ordinal_aware", "ordinal_pattern"], "gated"),
    ],
)
def test_mechanism_composition(mechanisms, fusion):
    model = create_attention_gpcm(
        n_questions=100, attention_type="modular", mechanisms=mechanisms, fusion_method=fusion
    )
    assert len(model.attention_pipeline.mechanisms) == len(mechanisms)
    assert model.attention_pipeline.fusion_method == fusion
    batch = random_batch(100, B=3, L=12, K=4)
    assert audit_causality(model, batch, steps=[0, 1, 6, 11], trials=1)


def test_seed_constructor_positional_and_one_definition():
    """Positional seed arguments; the seed and Batch interfaces give the same predictions."""
    torch.manual_seed(0)
    att = AttentionConfig(embed_dim=16, n_heads=2, n_cats=3)
    model = ModularAttentionGPCM(30, 3, 16, att, ["ordinal_aware", "ordinal_pattern"], "gated")
    assert model.registry_name == "modular_attention_gpcm"
    assert (model.config.d, model.config.n_heads, model.config.K) == (16, 2, 3)
    torch.manual_seed(0)
    same = build_model("modular_attention_gpcm", model.config)
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters(), strict=True)
    )
    batch = random_batch(30, B=3, L=9, K=3)
    model.eval()
    probs = model(batch.q, batch.r, mask=batch.mask)
    with torch.no_grad():
        expected = model.probabilities(model(batch))
    assert torch.allclose(probs[batch.mask], expected[batch.mask])
    maps = model.get_attention_weights()  # the last forward's inputs (the Batch)
    assert set(maps) == {"ordinal_aware/attention", "ordinal_pattern/attention"}
    basic = AttentionGPCM(n_questions=30, n_responses=3, embed_dim=16, n_heads=2, n_layers=2)
    assert basic.registry_name == "attention_gpcm" and basic.config.d == 16
    assert basic(batch.q, batch.r, mask=batch.mask).shape == (3, 9, 3)
    assert set(basic.get_attention_weights()) == {"refine0", "refine1", "read"}


def test_seed_interface_padding():
    """Padded steps (mask False) may hold any id; real steps never read them."""
    torch.manual_seed(0)
    model = ModularAttentionGPCM(20, 4, 16, n_heads=2, attention_mechanisms=["qwk_aligned"]).eval()
    batch = random_batch(20, B=3, L=10, K=4)
    q, r = batch.q.clone(), batch.r.clone()
    q[~batch.mask], r[~batch.mask] = -1, 99
    with torch.no_grad():
        a = model(q, r, mask=batch.mask)
        b = model(batch.q, batch.r, mask=batch.mask)
    assert torch.equal(a[batch.mask], b[batch.mask])
    maps = model.get_attention_weights(q, r, mask=batch.mask)
    assert set(maps) == {"qwk_aligned/attention"}


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda q, r, m: (q.tolist(), r, m), TypeError, "questions must be a torch.Tensor"),
        (lambda q, r, m: (q[0], r, m), ValueError, r"questions must be \[B, L\], got shape \(6,\)"),
        (lambda q, r, m: (q, r.float(), m), ValueError, "responses must hold integer ids"),
        (lambda q, r, m: (q, r.bool(), m), ValueError, "responses must hold integer ids"),
        (lambda q, r, m: (q, r[:, :4], m), ValueError, r"responses \(2, 4\) and questions"),
        (lambda q, r, m: (q + 20, r, m), ValueError, r"questions must lie in \[0, 19\]"),
        (lambda q, r, m: (q, r - 4, m), ValueError, r"responses must lie in \[0, 3\].*mask="),
        (lambda q, r, m: (q, r, m.long()), ValueError, "mask must be a bool tensor"),
        (lambda q, r, m: (q, r, m[:, :2]), ValueError, "mask must be a bool tensor"),
        (lambda q, r, m: (q[:, :0], r[:, :0], None), ValueError, "no steps"),
        (lambda q, r, m: (q.repeat(1, 20), r.repeat(1, 20), None), ValueError, "> max_len 64"),
    ],
)
def test_seed_interface_input_errors(change, error, message):
    model = ModularAttentionGPCM(
        20, 4, 16, n_heads=2, max_len=64, attention_mechanisms=["ordinal_aware"]
    )
    g = torch.Generator().manual_seed(0)
    q, r = torch.randint(0, 20, (2, 6), generator=g), torch.randint(1, 4, (2, 6), generator=g)
    questions, responses, mask = change(q, r, torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(error, match=message):
        model(questions, responses, mask=mask)


def test_seed_interface_argument_errors():
    config = ModularAttentionGPCM(20, 4, 16, n_heads=2).config
    with pytest.raises(TypeError, match="not both"):
        ModularAttentionGPCM(config, fusion_method="mean")
    with pytest.raises(TypeError, match="unexpected arguments"):
        ModularAttentionGPCM(config, n_heads=4)
    with pytest.raises(TypeError, match="needs a config or n_questions"):
        ModularAttentionGPCM()
    with pytest.raises(TypeError, match="n_questions given twice"):
        ModularAttentionGPCM(20, n_questions=20)
    with pytest.raises(ValueError, match="n_heads=2 disagrees with the model's n_heads=4"):
        ModularAttentionGPCM(20, attention_config={"n_heads": 2}, n_heads=4)
    with pytest.raises(ValueError, match="ModularAttentionGPCM: .*not divisible"):
        ModularAttentionGPCM(20, embed_dim=20)
    with pytest.raises(ValueError, match="unknown mechanism"):
        ModularAttentionGPCM(20, attention_mechanisms=["ordinal_awar"])
    with pytest.raises(TypeError, match="attention_config must be an AttentionConfig or a dict"):
        ModularAttentionGPCM(20, attention_config=[("n_heads", 2)])
    model = ModularAttentionGPCM(20, 4, 16, n_heads=2)
    with pytest.raises(RuntimeError, match="no forward pass yet"):
        model.get_attention_weights()
    batch = random_batch(20, B=2, L=5, K=4)
    with pytest.raises(TypeError, match="pass the Batch alone"):
        model(batch, batch.r)
    with pytest.raises(TypeError, match="seed 002's \\(questions, responses\\)"):
        model(batch.q)
    with pytest.raises(ValueError, match="get_attention_weights"):
        model(batch.q, batch.r, return_attention=True)


def test_factory_basic_and_errors():
    basic = create_attention_gpcm(50, 3, attention_type="basic", embed_dim=16, n_heads=2)
    assert basic.registry_name == "attention_gpcm" and basic.config.K == 3
    with pytest.raises(ValueError, match="Unknown attention type"):
        create_attention_gpcm(50, attention_type="fancy")
    with pytest.raises(ValueError, match="apply to attention_type='modular'"):
        create_attention_gpcm(50, attention_type="basic", mechanisms=["ordinal_aware"])
    with pytest.raises(ValueError, match="unknown mechanism"):
        create_attention_gpcm(50, mechanisms=["ordinal_awar"])
    with pytest.raises(ValueError, match="disagrees with the model's embed_dim"):
        create_attention_gpcm(50, embed_dim=16, attention_config={"embed_dim": 32})
    model = create_attention_gpcm(
        50, 4, attention_config=AttentionConfig(embed_dim=16, n_heads=2, n_cats=4)
    )
    assert model.config.d == 16 and model.config.n_heads == 2


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

    from kt_lib.models.gpcm_interface import load_seed_config

    raw = {"model": {"n_questions": 10, "n_responses": 4}, "training": {field: value}}
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=rf"seed\.yaml: training\.{field} {message}"):
        load_seed_config(path)
    raw["training"] = {"learning_rate": 0.01, "batch_size": 8, "epochs": 3}
    path.write_text(yaml.safe_dump(raw))
    assert load_seed_config(path).train == {"lr": 0.01, "batch_size": 8, "epochs": 3}
