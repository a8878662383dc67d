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


def test_under_torch_compile_dropout_is_the_plain_draw_the_compiler_can_trace():
    """Traced by torch.compile (dynamo's `eager` backend: no compiler needed), `draw_keep` draws
    `torch.rand >= p` and the modules call `F.dropout`: the exact rate p and scale 1 / (1 - p)
    (p = 0.3 is no multiple of 1 / 65536, so the eager 16-bit path's scale differs), with no
    graph break (the int64 `random_` and the autograd Functions each broke it)."""
    x = torch.randn(400, 500, requires_grad=True)

    def step(t):
        keep = torch.empty(t.shape, dtype=torch.bool)
        scale = drop.draw_keep(keep, 0.3)
        return drop.Dropout(0.3)(t), drop.ReLUDropout(0.3)(t * 1), keep, scale

    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    out, relu_out, keep, scale = torch.compile(step, backend="eager")(x)
    assert scale == 1 / 0.7 != drop.keep_scale(0.3)  # the eager path's p' differs
    assert abs(keep.float().mean().item() - 0.7) < 0.005
    for o, base in ((out, x), (relu_out, torch.relu(x))):
        kept = o != 0
        torch.testing.assert_close(o[kept], (base / 0.7)[kept])
    assert abs((out != 0).float().mean().item() - 0.7) < 0.005
    (out.sum() + relu_out.sum()).backward()
    torch.testing.assert_close(x.grad, ((out != 0).float() + (relu_out != 0).float()) / 0.7)
