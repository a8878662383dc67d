"""bf16 against fp32: the same model, weights and batch, the two precisions alternated step by step
in one process, so that a shared machine's noise falls on both alike (the ratio is the figure).

    python benchmarks/bench_precision.py [--models akt dtransformer simakt | all] [--device cpu]
                                         [--repeats 5] [--batch 64] [--len 200] [--resume]
                                         [--out benchmarks/results/precision_cpu.json]

Per model: the median training step (AdamW on `model.loss`) and inference pass at each precision
(`kt_lib.runtime.precision_context`, as `fit()` trains: fp32 is the CPU's default, bf16 autocast
with float32 master weights), their ratio bf16 / fp32, and the loss of one no-grad forward at each
precision on the same weights (how far bf16 moves it). The JSON records whether the CPU has bf16
instructions (`avx512_bf16`, `amx_bf16` in /proc/cpuinfo): without them autocast converts in
software, and bf16 is expected to cost more than it saves.

`--models all` takes every registered model. The file keeps the rows of models this run does not
measure (a run adds or replaces its own), and is rewritten after each model; `--resume` skips the
models already in it, so a long sweep cut off mid-way goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_models import NUM_PID, B, L, build_ours, cpu_model, on_device
from timing import model_step_and_inference, seconds

from kt_lib.models import MODELS
from kt_lib.models.base import list_models
from kt_lib.runtime import BF16_FLAGS, cpu_flags

PRECISIONS = ("fp32", "bf16")


def cpu_bf16_flags() -> list[str]:
    """The CPU's bf16 instruction flags (`kt_lib.runtime.cpu_flags`), [] if none or unknown."""
    return sorted(cpu_flags() & {*BF16_FLAGS, "amx_tile"})


def bench_model(name: str, device: str, repeats: int, b: int, n: int) -> dict:
    """One model: both precisions alternated over `repeats` rounds after a warm-up round; a model
    that needs problem ids gets them (`NUM_PID`, as bench_models)."""
    num_pid = NUM_PID if "pid" in MODELS[name].needs else 0
    with on_device(device, "fp32", None):
        model, batch = build_ours(name, device, b=b, n=n, num_pid=num_pid)
    step, infer = model_step_and_inference(model, batch)
    times = {p: {"train": [], "infer": []} for p in PRECISIONS}
    for round_ in range(repeats + 1):
        for prec in PRECISIONS if round_ % 2 else PRECISIONS[::-1]:  # each goes first in turn
            with on_device(device, prec, None):
                t_step, t_infer = seconds(step, device), seconds(infer, device)
            if round_:  # round 0 warms both up
                times[prec]["train"].append(t_step)
                times[prec]["infer"].append(t_infer)
    losses = {}
    model.eval()
    for prec in PRECISIONS:
        with on_device(device, prec, None), torch.no_grad():
            losses[prec] = float(model.loss(model(batch), batch, 0)["total"])
    med = {p: {k: statistics.median(v) for k, v in times[p].items()} for p in PRECISIONS}
    return {
        "model": name,
        **{
            p: {"train_step_s": round(med[p]["train"], 4), "inference_s": round(med[p]["infer"], 4)}
            for p in PRECISIONS
        },  # fmt: skip
        "bf16_over_fp32": {
            "train_step": round(med["bf16"]["train"] / med["fp32"]["train"], 3),
            "inference": round(med["bf16"]["infer"] / med["fp32"]["infer"], 3),
        },
        "loss": {p: losses[p] for p in PRECISIONS},
        "loss_rel_change": float(
            f"{abs(losses['bf16'] - losses['fp32']) / abs(losses['fp32']):.3g}"
        ),
        "repeats": repeats,
        "device": device,
        "B": b,
        "L": n,
        "num_pid": num_pid,
        "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "cpu_bf16_flags": cpu_bf16_flags(),
        # precision_context casts afresh since 2026-11-27 (rows before: the cache, stale weights)
        "autocast_weight_cache": False,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="+", default=["akt", "dtransformer", "simakt"], help="or: all")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=B)
    p.add_argument("--len", type=int, default=L)
    p.add_argument("--out", default="benchmarks/results/precision_cpu.json")
    p.add_argument("--resume", action="store_true", help="skip the models already in --out")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: must be >= 1")
    names = list_models() if a.models == ["all"] else a.models
    unknown = sorted(set(names) - set(list_models()))
    if unknown:
        p.error(f"--models: unknown {unknown}; registered: {list_models()}")
    out = Path(a.out)
    rows = {r["model"]: r for r in json.loads(out.read_text())} if out.is_file() else {}
    for name in names:
        if a.resume and name in rows:
            continue
        row = bench_model(name, a.device, a.repeats, a.batch, a.len)
        print(json.dumps(row), flush=True)
        rows[name] = row
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(out.name + ".tmp")
        part.write_text(json.dumps(list(rows.values()), indent=1))
        part.replace(out)  # after every model: a cut-off run keeps what finished


if __name__ == "__main__":
    main()
