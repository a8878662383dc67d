"""Every registered model: shapes, backward, no NaN, causality, attention maps, save/load."""

from __future__ import annotations

import pytest
import torch

from kt_lib.audit import audit_causality, random_batch
from kt_lib.checkpoint import load_model, save_model
from kt_lib.models import MODELS, build_model, list_models
from tests.conftest import make_tiny_dataset

NUM_C, NUM_PID = 12, 36


def _setup(name: str, num_pid: int):
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
