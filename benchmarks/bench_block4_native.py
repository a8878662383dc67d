"""The native CPU chains (kt_lib/nn/native: AKT's monotonic attention, DTransformer's Block 4,
stableKT's penumbral lca) against torch's, per model, in one process: also the issue's ratio
"DTransformer's step / AKT's" from one run, with both models on the same chains.

    python benchmarks/bench_block4_native.py [--models akt dtransformer simakt] [--repeats 3]
        [--threads 1] [--out benchmarks/results/block4_native_cpu.json]

Paper preset, B=64, L=200, 100 skills, no problem ids, on CPU (`bench_models.build_ours`). Each
repeat runs every (model, chain) once, in turn, so that a noisy machine slows all of them alike;
figures are medians over the repeats after one warm-up each; `step_over_akt` divides by AKT's
step on the same chains. Also: the largest difference of the eval logits between the two chains.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from bench_models import build_ours, cpu_model
from timing import model_step_and_inference, seconds

from kt_lib.nn import native


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=["akt", "dtransformer", "simakt"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/block4_native_cpu.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for lib in ("slot_chain", "akt_chain", "penumbral"):
        if native.load(lib) is None:
            sys.exit(f"{lib} does not build here: {native.why_not(lib)}")
    runs = {}  # (model, chain) -> (step, infer, model, batch)
    for name in a.models:
        model, batch = build_ours(name, "cpu")
        for chain in ("native", "torch"):
            runs[name, chain] = (*model_step_and_inference(model, batch), model, batch)
    diffs = {}
    for (name, chain), (_, _, model, batch) in runs.items():
        if chain == "native":
            model.eval()
            with torch.no_grad():
                fast = model(batch).logits
                with native.use(False):
                    plain = model(batch).logits
            diffs[name] = (fast - plain).abs().max().item()
    times = {key: {"step": [], "infer": []} for key in runs}
    for rep in range(a.repeats + 1):  # the first round is the warm-up
        for (name, chain), (step, infer, _, _) in runs.items():
            with native.use(chain == "native"):
                s, i = seconds(step), seconds(infer)
            if rep:
                times[name, chain]["step"].append(s)
                times[name, chain]["infer"].append(i)
    rows = []
    for (name, chain), t in times.items():
        step = statistics.median(t["step"])
        base = statistics.median(times["akt", chain]["step"]) if ("akt", chain) in times else None
        row = {
            "model": name,
            "chain": chain,
            "train_step_s": round(step, 4),
            "inference_s": round(statistics.median(t["infer"]), 4),
            "step_over_akt": round(step / base, 3) if base else None,
            "threads": a.threads,
            "B": 64,
            "L": 200,
            "repeats": a.repeats,
            "cpu": cpu_model(),
        }
        if chain == "native":
            row["max_abs_logit_diff_vs_torch_chain"] = diffs[name]
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
