"""The CPU attention kernels' output and gradient buffers: uninitialised (what the kernels do
since the thirteenth session: every block written, only the rest zeroed) against zero-filled
(`new_zeros`, as before), alternated in one process, per model.

    python benchmarks/bench_kernel_buffers.py [--models sakt saint simplekt akt] [--repeats 5]
        [--threads 1] [--out benchmarks/results/kernel_buffers_cpu.json]

Paper presets, B=64, L=200, no problem ids, on CPU (`bench_models.build_ours`). Each repeat runs
every (model, buffers) pair once, in turn, so that a noisy machine slows both alike; figures are
medians over the repeats after one warm-up round. The zero-filled side is the same kernel with
`cpu.new_heads` asked for zeros every time: the fills are the only difference. Also: the
largest difference of one training step's parameter gradients between the two (the same
arithmetic: 0 expected) and of the eval logits (which only test the kernels where evaluation
uses them: AKT's; plain attention evaluates through SDPA).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_models import build_ours, cpu_model
from timing import model_step_and_inference, seconds

import kt_lib.nn.cpu as cpu_kernels
from kt_lib.runtime import keep_freed_memory

PLAIN = cpu_kernels.new_heads


def zero_filled(like, shape, step_major_layout, zeros=True):
    return PLAIN(like, shape, step_major_layout, True)


def use(kind: str) -> None:
    cpu_kernels.new_heads = PLAIN if kind == "uninitialised" else zero_filled


def grads(model, batch) -> list[torch.Tensor]:
    model.train()
    torch.manual_seed(0)  # the same dropout draws on both sides
    model.zero_grad(set_to_none=True)
    model.loss(model(batch), batch, 0)["total"].backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=["sakt", "saint", "simplekt", "akt"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/kernel_buffers_cpu.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    keep_freed_memory()  # as fit() does
    runs, diffs = {}, {}
    for name in a.models:
        model, batch = build_ours(name, "cpu")
        step, infer = model_step_and_inference(model, batch)
        runs[name] = (step, infer)
        sides = {}
        for kind in ("uninitialised", "zero-filled"):
            use(kind)
            model.eval()
            with torch.no_grad():
                logits = model(batch).logits
            sides[kind] = (logits, grads(model, batch))
        (l1, g1), (l2, g2) = sides.values()
        diffs[name] = {
            "logits": (l1 - l2).abs().max().item(),
            "grads": max((x - y).abs().max().item() for x, y in zip(g1, g2, strict=True)),
        }
    times = {
        (n, k): {"step": [], "infer": []} for n in runs for k in ("uninitialised", "zero-filled")
    }
    for rep in range(a.repeats + 1):  # the first round is the warm-up
        for (name, kind), t in times.items():
            use(kind)
            step, infer = runs[name]
            s, i = seconds(step), seconds(infer)
            if rep:
                t["step"].append(s)
                t["infer"].append(i)
    use("uninitialised")
    rows = []
    for name in runs:
        new, old = (times[name, k] for k in ("uninitialised", "zero-filled"))
        row = {
            "model": name,
            "train_step_s": round(statistics.median(new["step"]), 4),
            "train_step_s_zero_filled": round(statistics.median(old["step"]), 4),
            "step_ratio": round(statistics.median(new["step"]) / statistics.median(old["step"]), 3),
            "inference_s": round(statistics.median(new["infer"]), 4),
            "inference_s_zero_filled": round(statistics.median(old["infer"]), 4),
            "max_abs_diff": diffs[name],
            "threads": a.threads,
            "B": 64,
            "L": 200,
            "repeats": a.repeats,
            "cpu": cpu_model(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
