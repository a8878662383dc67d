"""Seed 002's extension guide as written, and the context metadata mechanisms receive."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from kt_lib.audit import random_batch
from kt_lib.heads.ordinal import (
    MECHANISMS,
    AttentionConfig,
    AttentionContext,
    AttentionMechanism,
    AttentionRegistry,
)
from kt_lib.models.gpcm_interface import ModularAttentionGPCM


@pytest.fixture
def registered():
    """Mechanism names a test registers, removed afterwards."""
    names: list[str] = []
    yield names
    for n in names:
        MECHANISMS.pop(n, None)


def test_the_seed_002_extension_example_builds_and_trains_one_step(registered):
    """The guide's code, verbatim (Step 1 and Step 2), then one optimizer step."""

    # Step 1: Define your mechanism
    @AttentionRegistry.register("my_custom_attention")
    class MyCustomAttention(AttentionMechanism):
        """Custom attention mechanism for specific use case."""

        def __init__(self, config: AttentionConfig):
            super().__init__(config)
            # Add your components
            self.custom_layer = nn.Linear(config.embed_dim, config.embed_dim)

        def forward(self, context: AttentionContext) -> torch.Tensor:
            embeddings = context.embeddings

            # Your custom attention logic
            attended = self.custom_layer(embeddings)

            # Must return tensor of same shape as input embeddings
            return attended

    registered.append("my_custom_attention")

    # Step 2: Use in model
    model = ModularAttentionGPCM(
        n_questions=100, attention_mechanisms=["my_custom_attention", "ordinal_aware"]
    )

    torch.manual_seed(0)
    batch = random_batch(100, B=2, L=6, K=model.config.K)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = model.encoder.pipelines[0].mechanisms[0].custom_layer.weight.detach().clone()
    loss = model.loss(model(batch), batch)["total"]
    loss.backward()
    opt.step()
    after = model.encoder.pipelines[0].mechanisms[0].custom_layer.weight
    assert torch.isfinite(loss) and not torch.equal(before, after)
    probs = model(batch.q, batch.r)  # seed 002's call: probabilities [B, L, K]
    assert probs.shape == (2, 6, model.config.K)
    assert model.get_attention_weights()  # ordinal_aware's maps; the custom one gives none


def test_a_mechanism_overriding_neither_attend_nor_forward_is_refused():
    class Nothing(AttentionMechanism):
        pass

    with pytest.raises(TypeError, match="override attend.*or forward"):
        Nothing(AttentionConfig(embed_dim=8, n_heads=2))


def test_mechanisms_receive_questions_batch_size_and_sequence_length(registered):
    """Seed 002's create_embeddings fills metadata with questions, batch_size, seq_len."""
    seen: list[dict] = []

    @AttentionRegistry.register("test_metadata_probe")
    class Probe(AttentionMechanism):
        def attend(self, context, need_weights=False):
            seen.append(dict(context.metadata))
            return context.embeddings, {}

    registered.append("test_metadata_probe")
    model = ModularAttentionGPCM(20, 4, 16, attention_mechanisms=["test_metadata_probe"], n_heads=2)
    batch = random_batch(20, B=3, L=7, K=4)
    model(batch)
    meta = seen[-1]
    assert meta["batch_size"] == 3 and meta["seq_len"] == 7
    assert torch.equal(meta["questions"], batch.q)
