"""AKT training-step speed: B=64, L=200, paper preset (d=256, 8 heads, 1 encoder block), CPU.

    python benchmarks/bench_akt.py [--repeats 7] [--threads 2] [--num-pid 0] [--precision bf16]
        [--out F.json]

One step = forward, loss (BCE + Rasch L2), backward, AdamW update, as in `train.fit`. Prints one
JSON object: median and all step times, CPU seconds per step, the 1-minute load average, the
parameter count and the torch thread count (the CPU may be shared: rerun when the load average
is above the core count or the spread is large). Issue 3's target: <= 1.2 s per step on 2 cores
(pykt-toolkit's AKT: about 5.9 s on the same machine). `--precision` (fp32 | tf32 | bf16; default
fp32, the CPU's) runs model building and the steps inside `kt_lib.runtime.precision_context`, as
`train.fit` does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

B, L, NUM_C = 64, 200, 100


def bench(
    repeats: int, num_pid: int, model_name: str = "akt", precision: str | None = None
) -> dict:
    from kt_lib.runtime import precision_context

    with precision_context(precision, "cpu") as prec:
        return _bench(repeats, num_pid, model_name, prec)


def _bench(repeats: int, num_pid: int, model_name: str, prec: str) -> dict:
    from kt_lib.audit import random_batch
    from kt_lib.models import build_model

    torch.manual_seed(0)
    model = build_model(model_name, preset="paper", num_c=NUM_C, num_pid=num_pid)
    batch = random_batch(NUM_C, B=B, L=L, num_pid=num_pid, seed=0, ragged=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()

    def step() -> None:
        terms = model.loss(model(batch), batch, 0)
        opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        opt.step()

    step()  # warm-up (allocator, thread pool, buffer pool)
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {
        "model": model_name,
        "setting": f"B={B} L={L} d={model.config.d} heads={model.config.n_heads} "
        f"blocks={model.config.n_blocks} num_pid={num_pid} precision={prec}",
        "params": sum(p.numel() for p in model.parameters()),
        "train_step_s_median": round(statistics.median(times), 4),
        "train_step_s_min": round(min(times), 4),
        "train_step_s_all": [round(t, 4) for t in times],
        # CPU seconds of this process per step: with threads=1 about the wall time of a quiet
        # core, a check on wall times taken while other jobs share the machine
        "cpu_s_median": round(statistics.median(cpu), 4),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "target_s": 1.2,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }


def main(argv: list[str] | None = None) -> None:
    from kt_lib.runtime import PRECISIONS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--num-pid", type=int, default=0, help="problem ids (Rasch embeddings)")
    p.add_argument("--model", default="akt")
    p.add_argument(
        "--precision", choices=PRECISIONS, default=None, help="default fp32 (the CPU's default)"
    )
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    result = bench(a.repeats, a.num_pid, a.model, a.precision)
    text = json.dumps(result)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
