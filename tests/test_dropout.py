"""kt_lib.nn.dropout: the fast keep draws (rate, scale, lanes) and the dropout modules."""

from __future__ import annotations

import torch

import kt_lib.nn.dropout as drop


def test_fast_dropout_rate_scale_and_gradients():
    keep = torch.empty(200_000, dtype=torch.bool)
    torch.manual_seed(0)
    scale = drop.draw_keep(keep, 0.05)
    assert abs(scale - 1 / 0.95) < 1e-4 and abs(keep.float().mean().item() - 0.95) < 0.003
    torch.manual_seed(0)
    as_float = torch.empty(200_000)
    drop.draw_keep(as_float, 0.05)  # the same draw, as 0./1. floats
    assert torch.equal(as_float, keep.float())
    assert drop.draw_keep(keep, 0.0) == 1.0 and keep.all()
    # each int64 draw feeds four elements: every 16-bit lane keeps at the rate asked
    half = torch.empty(400_000, dtype=torch.bool)
    drop.draw_keep(half, 0.5)
    for lane in range(4):
        assert abs(half[lane::4].float().mean().item() - 0.5) < 0.005, lane
    x = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    for module in (drop.Dropout(0.3), drop.ReLUDropout(0.3), drop.ReLUDropout(0.0)):
        module.train()

        def f(t, module=module):
            torch.manual_seed(1)  # the same mask on every call
            return module(t * 1)  # ReLUDropout works in place on a fresh op output

        out = f(x)
        kept = out != 0
        base = torch.relu(x) if isinstance(module, drop.ReLUDropout) else x
        torch.testing.assert_close(out[kept], (base * drop.keep_scale(module.p))[kept])
        assert torch.autograd.gradcheck(f, (x,))
        module.eval()
        assert torch.equal(module(x), base) and torch.equal(module(x * 1), base)
