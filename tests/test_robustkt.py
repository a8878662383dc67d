"""RobustKT: the decoupling analyzer against a plain loop, its causality and algebra, RobustKT as
AKT with a prefilter (identity: AKT's logits), the paper preset's size, and pyKT's robustkt.py on
copied weights (optional)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from kt_lib.audit import random_batch
from kt_lib.models import akt as akt_module
from kt_lib.models import build_model
from kt_lib.models.robustkt import LN_EPS, DecouplingAnalyzer
from kt_lib.nn import use_backend
from tests.pykt_helpers import akt_layout_weights, pykt_repo_module, unused_in_ours

NUM_C, NUM_PID = 12, 36


def _analyzer(d=4, window=3, seed=0) -> DecouplingAnalyzer:
    torch.manual_seed(seed)
    a = DecouplingAnalyzer(d, window, dropout=0.0).double().eval()
    with torch.no_grad():  # LayerNorm's affine away from (1, 0), so the loop checks it too
        a.norm.weight.uniform_(0.5, 1.5)
        a.norm.bias.uniform_(-0.5, 0.5)
    return a


def loop_analyzer(a: DecouplingAnalyzer, z: torch.Tensor) -> torch.Tensor:
    """Plain Python over (b, t): trend_t = b + sum_k A[:, :, k] z_{t-W+1+k} (zero before step 0),
    z' = LN(z + trend + beta^2 (z - trend))."""
    B, L, D = z.shape
    A, bias, W = a.conv.weight, a.conv.bias, a.window  # A [D, D, W]
    out = torch.empty_like(z)
    for b in range(B):
        for t in range(L):
            trend = bias.clone()
            for k in range(W):
                s = t - W + 1 + k
                if s >= 0:
                    trend = trend + A[:, :, k] @ z[b, s]
            x = z[b, t] + trend + a.beta**2 * (z[b, t] - trend)
            mean, var = x.mean(), ((x - x.mean()) ** 2).mean()
            out[b, t] = (x - mean) / torch.sqrt(var + LN_EPS) * a.norm.weight + a.norm.bias
    return out


def test_analyzer_matches_a_loop_and_reads_no_later_step():
    a = _analyzer()
    z = torch.randn(2, 9, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = a(z)
        torch.testing.assert_close(got, loop_analyzer(a, z))
        for t in range(9):  # changing steps after t never moves step t
            z2 = z.clone()
            z2[:, t + 1 :] = torch.randn_like(z2[:, t + 1 :])
            assert torch.equal(a(z2)[:, : t + 1], got[:, : t + 1]), t
        # ... and step t reads steps t - W + 1..t: one W steps back moves it, one W + 1 back not
        z3 = z.clone()
        z3[:, 2] += 1.0
        moved = (a(z3) - got).abs().amax((0, 2))  # [L]
    assert (moved[:2] == 0).all() and (moved[2:5] > 1e-3).all() and (moved[5:] == 0).all()


def test_analyzer_with_unit_beta_ignores_the_trend():
    """beta^2 = 1 recombines the parts into z itself: z' = LN(2 z) whatever the convolution."""
    a = _analyzer(seed=2)
    z = torch.randn(2, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a.beta.fill_(1.0)
        torch.testing.assert_close(a(z), a.norm(2 * z))
        a.beta.fill_(0.0)  # beta = 0 keeps the trend alone: z' = LN(z + trend)
        torch.testing.assert_close(a(z), a.norm(z + a.trend(z)))


def test_robustkt_is_akt_with_a_prefilter():
    """AKT's parent names no child; with the analyzer swapped for the identity RobustKT gives AKT's
    logits on AKT's weights, with the analyzer it does not, and the prediction MLP reads the
    unsmoothed question embedding."""
    assert "robustkt" not in inspect.getsource(akt_module).lower()
    torch.manual_seed(0)
    akt = build_model("akt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    rob = build_model("robustkt", preset="tiny", num_c=NUM_C, num_pid=NUM_PID).double().eval()
    missing, unexpected = rob.load_state_dict(akt.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("prefilter.") for k in missing) and missing
    batch = random_batch(NUM_C, B=3, L=12, num_pid=NUM_PID, seed=3)
    with torch.no_grad():
        smoothed = rob(batch).logits
        state = rob.trunk(batch)
        torch.testing.assert_close(state.emb.x, rob.embed(batch.q, batch.r, batch.pid).x)
        rob.prefilter = nn.Identity()
        torch.testing.assert_close(rob(batch).logits, akt(batch).logits)
    assert not torch.allclose(smoothed, akt(batch).logits, atol=1e-4)


def test_paper_preset_size_and_windows():
    model = build_model("robustkt", preset="paper", num_c=100)
    c = model.config
    assert (c.d, c.n_heads, c.n_blocks, c.d_ff, c.dropout, c.window) == (256, 8, 4, 512, 0.2, 5)
    assert (c.final_fc_dim, c.final_fc_dim2) == (512, 256)
    # embeddings 100 x 256 + 2 x 256; 12 AKT layers, each: shared q/k, v and output projections
    # (3 x (256^2 + 256)), 8 decay rates, a LayerNorm; an FFN 256-512-256 and a second LayerNorm
    # in 8 of them; the analyzer: a 256 x 256 x 5 convolution (+ bias), beta, a LayerNorm; MLP
    attn = 3 * (256 * 256 + 256) + 8 + 512
    ffn = 256 * 512 + 512 + 512 * 256 + 256 + 512
    analyzer = 256 * 256 * 5 + 256 + 256 + 512
    mlp = 512 * 512 + 512 + 512 * 256 + 256 + 257
    want = 100 * 256 + 2 * 256 + 12 * attn + 8 * ffn + analyzer + mlp
    assert sum(p.numel() for p in model.parameters()) == want == 5_231_201
    batch = random_batch(NUM_C, B=2, L=8, seed=1)
    for window in (1, 12):  # one step (pyKT's crop [:-0] empties it); longer than the window
        m = build_model("robustkt", preset="tiny", num_c=NUM_C, window=window).eval()
        with torch.no_grad():
            assert torch.isfinite(m(batch).logits).all()
    with pytest.raises(ValueError, match="window must be >= 1"):
        build_model("robustkt", preset="tiny", num_c=NUM_C, window=0)


def test_matches_pykts_robustkt_on_copied_weights():
    """pyKT's robustkt.py (emb_type "qid"; $PYKT_SRC) and ours on the same weights give the same
    predictions at every step, float64."""
    mod = pykt_repo_module("robustkt")
    torch.manual_seed(0)
    ours = build_model("robustkt", preset="tiny", num_c=NUM_C, final_fc_dim2=256)
    c = ours.config
    theirs = mod.Robustkt(
        NUM_C, 0, c.d, c.n_blocks, 0.1, ks=c.window, d_ff=c.d_ff, final_fc_dim=c.final_fc_dim,
        num_attn_heads=c.n_heads,
    )  # fmt: skip
    weights = akt_layout_weights(theirs, ours)
    smooth = theirs.model.smooth
    weights.update({
        "prefilter.conv.weight": smooth.causal_conv.conv.weight,
        "prefilter.conv.bias": smooth.causal_conv.conv.bias,
        "prefilter.beta": smooth.sqrt_beta.reshape(-1),
        "prefilter.norm.weight": smooth.LayerNorm.gamma,
        "prefilter.norm.bias": smooth.LayerNorm.beta,
    })  # fmt: skip
    ours.load_state_dict(weights)  # strict: every tensor of ours
    # what pyKT has beyond ours: the FFN of each question layer (apply_pos=False, never run)
    unused = {
        f"model.blocks_2.0.{m}.{p}" for m in ("linear1", "linear2", "layer_norm2")
        for p in ("weight", "bias")
    }  # fmt: skip
    assert unused_in_ours(theirs, ours) - {f"model.smooth.{k}" for k, _ in
                                           smooth.named_parameters()} == unused  # fmt: skip
    assert sum(p.numel() for p in theirs.parameters()) - sum(
        p.numel() for n, p in theirs.named_parameters() if n in unused
    ) == sum(p.numel() for p in ours.parameters())
    ours, theirs = ours.double().eval(), theirs.double().eval()
    batch = random_batch(NUM_C, B=3, L=25, seed=5, ragged=False)
    with torch.no_grad(), use_backend("reference"):  # AKT's distance summed as pyKT sums it
        want, _ = theirs(batch.q, batch.r)
        got = torch.sigmoid(ours.predict_logits(ours.trunk(batch)))  # forward casts to float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
