"""Evaluation order: `kt_lib.evaluate.predict` (windows batched longest first) against the same
windows batched in log order (what `predict` did before 2026-11-27), alternated in one process.

    python benchmarks/bench_eval.py --data-dir ../shared/data/assist2015 [--format pykt]
        [--fold 0] [--split valid] [--models dkt sakt akt gkt] [--repeats 2] [--batch 128]
        [--out benchmarks/results/eval_order_cpu.json]

In log order a batch of 128 windows pads to the longest of them (on ASSIST2015 usually the full
200 steps, while the median window is 21), so most of its work is padding. Per model: the time of
one pass over the split in each order (minimum over `--repeats`, the two alternated, log order
first in odd rounds), their ratio, the padded cells each order computes, and the largest
difference between the two orders' probabilities (floating-point summation order only: the
predictions do not depend on a row's neighbours or its padding). Models at their paper preset,
`prepare`d on the training split, untrained (the work does not depend on the weights).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from bench_models import cpu_model

from kt_lib.data.dataset import chunk, collate
from kt_lib.evaluate import predict
from kt_lib.models import build_model
from kt_lib.runs.data import DataSpec


@torch.no_grad()
def log_order(model, data, batch_size: int, max_len: int = 200) -> np.ndarray:
    """P(correct) of every real step, windows batched in log order (the reference)."""
    windows = chunk(data, max_len)
    model.eval()
    out = []
    for i in range(0, len(windows), batch_size):
        batch = collate(data, windows[i : i + batch_size])
        out.append(model.probabilities(model(batch))[batch.mask])
    return torch.cat(out).numpy()


def padded_cells(data, batch_size: int, longest_first: bool, max_len: int = 200) -> int:
    """Batch rows x padded steps the forward passes compute, in either order."""
    lengths = np.array([w.stop - w.start for w in chunk(data, max_len)])
    if longest_first:
        lengths = np.sort(lengths)[::-1]
    return int(
        sum(
            len(part) * part.max()
            for part in np.split(lengths, range(batch_size, len(lengths), batch_size))
        )
    )


def bench(name: str, bundle, split: str, repeats: int, batch: int) -> dict:
    torch.manual_seed(0)
    model = build_model(name, dataset=bundle.train, preset="paper")
    model.prepare(bundle.train)
    data = getattr(bundle, split)
    times: dict[str, list[float]] = {"log_order": [], "longest_first": []}
    for round_ in range(repeats):
        order = (
            ("log_order", "longest_first") if round_ % 2 == 0 else ("longest_first", "log_order")
        )
        for kind in order:
            t = time.perf_counter()
            if kind == "log_order":
                ref = log_order(model, data, batch)
            else:
                new = predict(model, data, batch_size=batch)["prob"]
            times[kind].append(time.perf_counter() - t)
    real = sum(len(s) for s in data.students)
    return {
        "model": name,
        "log_order_s": round(min(times["log_order"]), 3),
        "longest_first_s": round(min(times["longest_first"]), 3),
        "ratio": round(min(times["longest_first"]) / min(times["log_order"]), 3),
        "cells_log_order": padded_cells(data, batch, False),
        "cells_longest_first": padded_cells(data, batch, True),
        "real_steps": real,
        "max_abs_diff": float(np.abs(ref - new).max()),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--format", default="pykt")
    p.add_argument("--fold", type=int, default=None, help="the layout's fold (pykt: 0-4)")
    p.add_argument("--split", default="valid", choices=("valid", "test"))
    p.add_argument("--models", nargs="+", default=["dkt", "sakt", "akt", "gkt"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/eval_order_cpu.json")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: must be >= 1")
    torch.set_num_threads(a.threads)
    bundle = DataSpec(a.data_dir, a.format, fold=a.fold).load()
    rows = []
    for name in a.models:
        row = {
            **bench(name, bundle, a.split, a.repeats, a.batch),
            "data": str(a.data_dir),
            "fold": a.fold,
            "split": a.split,
            "threads": a.threads,
            "cpu": cpu_model(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(out.name + ".tmp")
        part.write_text(json.dumps(rows, indent=1))
        part.replace(out)


if __name__ == "__main__":
    main()
