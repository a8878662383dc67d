"""Timing shared by the benchmark scripts: medians after a warm-up, one training step and one
inference pass of a model on a fixed batch."""

from __future__ import annotations

import statistics
import time

import torch


def median_seconds(fn, repeats: int, device: str = "cpu") -> float:
    """Median wall-clock seconds of `fn()` over `repeats` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_and_inference_seconds(model, batch, repeats: int, device: str = "cpu"):
    """(training step, inference pass) medians: AdamW step on `model.loss`, then no-grad forward."""
    from kt_lib.runtime import keep_freed_memory

    keep_freed_memory()  # as fit() does by default (TrainConfig.keep_freed_memory)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        model.train()
        terms = model.loss(model(batch), batch, 0)
        opt.zero_grad()
        terms["total"].backward()
        opt.step()

    def infer():
        model.eval()
        with torch.no_grad():
            model(batch)

    return median_seconds(step, repeats, device), median_seconds(infer, repeats, device)
