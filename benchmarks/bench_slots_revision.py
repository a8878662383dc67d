"""DTransformer's Block 4 kernel (kt_lib/nn/slots.py and native/slot_chain.c) of this checkout
against the same two files at another git revision, in one process: each model's training step
and inference with either version, alternated, and the step over AKT's (AKT does not use the
Block 4 kernel: its step is the same in both columns, measured in the same rounds).

    python benchmarks/bench_slots_revision.py --base REV [--models akt dtransformer simakt]
        [--repeats 3] [--threads 1] [--out benchmarks/results/slots_revision_cpu.json]

The base's two files (and the C header they share) are read with `git show`, its C compiled
with the native kernels' flags and the revision's own for it (`bench_slot_kernel.base_library`)
into a temporary folder, and its module loaded beside ours
(`kt_lib.nn.attention.slots` is swapped per round; the modules it imports, e.g. the
reference math, are this checkout's). Paper preset, B=64, L=200, on CPU
(`bench_models.build_ours`); medians over the repeats after one warm-up round; also the
largest difference of the eval logits and of a training step's gradients between the two
versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from bench_models import build_ours, cpu_model
from bench_slot_kernel import base_library
from timing import model_step_and_inference, seconds

from kt_lib.nn import attention, native
from kt_lib.provenance import ROOT


def base_module(rev: str, tmp: Path):
    """kt_lib.nn.slots as of `rev`, calling that revision's slot_chain.c (built here)."""
    show = lambda path: subprocess.run(  # noqa: E731
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    lib = base_library(rev, tmp)  # its C and header, with its own flags for them
    code = show("kt_lib/nn/slots.py")
    if code.count('native.load("slot_chain")') != 1:  # else it would call this checkout's C
        sys.exit(f"{rev}: kt_lib/nn/slots.py does not load its chain as this script expects")
    code = code.replace('native.load("slot_chain")', "_BASE_LIB")
    spec = importlib.util.spec_from_loader("kt_lib.nn.slots_base", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "kt_lib.nn"
    module._BASE_LIB = lib
    exec(compile(code, f"{rev}:kt_lib/nn/slots.py", "exec"), module.__dict__)
    return module


def grads(model, batch) -> list[torch.Tensor]:
    model.train()
    torch.manual_seed(0)
    model.zero_grad()
    model.loss(model(batch), batch, 0)["total"].backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, help="the git revision to compare with")
    p.add_argument("--models", nargs="*", default=["akt", "dtransformer", "simakt"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/slots_revision_cpu.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if native.load("slot_chain") is None:
        sys.exit(f"slot_chain does not build here: {native.why_not('slot_chain')}")
    ours = attention.slots
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"this checkout": ours, a.base: base_module(a.base, Path(tmp))}
        runs, diffs = {}, {}
        for name in a.models:
            model, batch = build_ours(name, "cpu")
            step, infer = model_step_and_inference(model, batch)
            runs[name] = (step, infer)
            logits, g = {}, {}
            for label, module in versions.items():
                attention.slots = module
                model.eval()
                with torch.no_grad():
                    logits[label] = model(batch).logits
                g[label] = grads(model, batch)
            attention.slots = ours
            (l1, l2), (g1, g2) = logits.values(), g.values()
            diffs[name] = {
                "eval_logits": (l1 - l2).abs().max().item(),
                "grads": max((x - y).abs().max().item() for x, y in zip(g1, g2, strict=True)),
            }
        times = {(n, v): {"step": [], "infer": []} for n in a.models for v in versions}
        for rep in range(a.repeats + 1):  # the first round is the warm-up
            order = list(versions.items())
            for label, module in order if rep % 2 else order[::-1]:  # each goes first in turn
                attention.slots = module
                for name, (step, infer) in runs.items():
                    s, i = seconds(step), seconds(infer)
                    if rep:
                        times[name, label]["step"].append(s)
                        times[name, label]["infer"].append(i)
        attention.slots = ours
    rows = []
    for (name, label), t in times.items():
        akt = times.get(("akt", label))
        step = statistics.median(t["step"])
        rows.append({
            "model": name, "version": label, "step_s": step,
            "infer_s": statistics.median(t["infer"]), "steps": t["step"],
            "step_over_akt": step / statistics.median(akt["step"]) if akt else None,
            **{f"max_diff_{k}": v for k, v in diffs[name].items()},
        })  # fmt: skip
        print(
            f"{name:14s} {label:14s} step {step:7.3f} s  infer {rows[-1]['infer_s']:6.3f} s"
            + (f"  / AKT {rows[-1]['step_over_akt']:.2f}" if akt else "")
        )
    out = {"cpu": cpu_model(), "threads": a.threads, "repeats": a.repeats, "base": a.base,
           "results": rows}  # fmt: skip
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
