"""kt_lib.nn.backend: the attention backend by device, forced, and under torch.compile, where
every model runs the plain formula and the attention models trace as one graph (dynamo's
`explain` and `eager` backend: no compiler needed)."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import random_batch
from kt_lib.models import build_model
from kt_lib.nn.backend import choose, use_backend

# models whose training forward torch.compile traces with no graph break (2026-11-28: also
# simpleKT, SAINT, extraKT, RobustKT, foliBiKT, CL4KT, DKVMN, Deep-IRT, iDKT, iKT3, GPCM-IRT);
# the others break on torch's own limits (nn.LSTM, data-dependent shapes and loops: docs/gpu.md)
WHOLE_GRAPH = ["akt", "dtransformer", "sakt", "sparsekt", "stablekt"]  # one of each mechanism


def test_the_backend_follows_the_device_the_forced_one_and_compile():
    t = torch.zeros(3)
    assert choose(t) == "cpu"
    seen = []

    def f(x):
        seen.append(choose(x))
        return x + 1

    with use_backend("cuda"):
        assert choose(t) == "cuda"
        torch._dynamo.reset()
        torch.compile(f, backend="eager")(t)
    assert seen == ["reference"]  # traced: the plain formula, whatever was forced


def _model(name: str):
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=6)
    return model, random_batch(6, B=3, L=12, seed=0)


@pytest.mark.parametrize("name", WHOLE_GRAPH)
def test_an_attention_model_traces_as_one_graph(name):
    model, batch = _model(name)
    model.train()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda b: model(b).logits.sum())(batch)
    assert explained.graph_break_count == 0, [str(r.reason)[:200] for r in explained.break_reasons]


@pytest.mark.parametrize("name", ["akt", "dtransformer"])
def test_the_compiled_model_computes_the_reference_formula(name):
    """Eval logits of the traced model equal the eager model's on the reference backend, and
    differ from none of the eager backends by more than float error (all one formula)."""
    model, batch = _model(name)
    model.eval()
    torch._dynamo.reset()
    with torch.no_grad():
        traced = torch.compile(model, backend="eager")(batch).logits
        with use_backend("reference"):
            ref = model(batch).logits
        eager = model(batch).logits  # the cpu backend
    torch.testing.assert_close(traced, ref, rtol=0, atol=0)
    torch.testing.assert_close(eager, ref, rtol=1e-5, atol=1e-5)
