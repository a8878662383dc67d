"""How much a fused elementwise chain could save in DTransformer's Block 4 on CPU: the chunk
recompute (`kt_lib.nn.slots._Inputs.chunk`: distance, decay, masked softmax, max-out cap) of one
batch row at the paper size, eager against `torch.compile(dynamic=True)` of the same method
(`--static`: one compilation per chunk shape).

    python benchmarks/bench_block4_fusion.py [--backend inductor] [--repeats 20] [--out FILE]

Per mode (forward: `grad=False`; backward's recompute: `grad=True`) the JSON gives the eager and
compiled milliseconds summed over one row's chunks (medians of --repeats), their ratio, the
compile seconds (the first call of every chunk shape) and the compiled outputs' largest distance
from the eager ones. A measurement for deciding on a fused Block 4, not the kernel itself: the
models run the eager chain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_models import cpu_model  # noqa: E402

from kt_lib.nn import slots  # noqa: E402


def inputs(K: int, H: int, S: int, Dh: int, seed: int = 0):
    """Block 4's small inputs for one batch row, as DTransformer's paper preset shapes them."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(1, K, H, 1, S, generator=g)
    v = torch.randn(1, 1, H, S, Dh, generator=g)
    gamma = torch.randn(H, generator=g)
    keep = torch.rand(1, S, generator=g) > 0.1
    return slots._Inputs(r, v, gamma, keep, strict=True)


def time_chunks(fn, chunks, grad: bool, repeats: int) -> float:
    """Median milliseconds of `fn(c, grad)` over every chunk of the row (after one warm-up)."""
    for c in chunks:
        fn(c, grad)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c in chunks:
            fn(c, grad)
        runs.append(time.perf_counter() - t0)
    return 1000 * statistics.median(runs)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--len", type=int, default=200, help="window length S")
    p.add_argument("--static", action="store_true", help="compile each chunk shape on its own")
    p.add_argument("--out", default=None, help="write the JSON here too")
    a = p.parse_args(argv)
    K, H, Dh = 16, 8, 32  # DTransformer's paper preset: 16 slots, 8 heads, d 256
    x = inputs(K, H, a.len, Dh)
    chunks = [c for c in slots.plan(1, K, H, a.len, slots.CPU_BUDGET) if c[-1] > 0]
    # a shape per chunk and mode when static: past dynamo's default of 8 compilations of one
    # function it would run the rest eager, unmeasured
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    compiled = torch.compile(x.chunk, backend=a.backend, dynamic=not a.static)
    res: dict = {"backend": a.backend, "dynamic": not a.static, "S": a.len, "K": K, "H": H,
                 "chunks_per_row": len(chunks)}  # fmt: skip
    for mode, grad in (("forward", False), ("backward_recompute", True)):
        t0 = time.perf_counter()
        got = [compiled(c, grad) for c in chunks]
        compile_s = time.perf_counter() - t0
        want = [x.chunk(c, grad) for c in chunks]
        diff = max(
            (g - w).abs().max().item()
            for gs, ws in zip(got, want, strict=True)
            for g, w in zip(gs, ws, strict=True)
            if isinstance(g, torch.Tensor) and g.is_floating_point()
        )
        eager = time_chunks(x.chunk, chunks, grad, a.repeats)
        fused = time_chunks(compiled, chunks, grad, a.repeats)
        res[mode] = {"eager_ms": round(eager, 2), "compiled_ms": round(fused, 2),
                     "compiled_over_eager": round(fused / eager, 3),
                     "compile_s": round(compile_s, 1), "max_abs_diff": diff}  # fmt: skip
    res.update(threads=torch.get_num_threads(), cpu=cpu_model(), torch=torch.__version__)
    print(json.dumps(res))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
