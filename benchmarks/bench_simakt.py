"""SimAKT memory-bank speed: farthest-first selection and position-weighted similarity (issue 4).

    python benchmarks/bench_simakt.py [--repeats 5] [--samples 4] [--out FILE.json]

Targets: farthest-first selection of 200 of 5000 encodings (d=256) <= 0.5 s; position-weighted
similarity for B=32, L=200, 100 clusters (S=200 steps each), d=256 <= 100 ms and >= 100x faster
than a straightforward loop implementation of seed 000's formula. That loop is kept here only, as
the reference: it is timed on `--samples` random (row, step) pairs against all clusters and
extrapolated to the B x L grid (each (row, step, cluster) visits all S memory steps, so its cost
does not depend on the step), and its values are checked against the vectorised ones there.

`--prepare DATA_DIR [--format F] [--fold K]` times instead what a SimAKT run spends before its
first step (issue 25): `model.prepare(train)` (Block-2 encodings, KMeans, KNN banks) for each
preset of the evidence study at the paper size, against one training epoch there (training
steps counted by the run's BatchLoader, times the median of 3 timed steps after a warm-up).

Figures are medians over --repeats after a warm-up, on CPU with --threads torch threads (default
1). Each figure is given as wall-clock and as process CPU time: on an idle machine with one
thread they agree; on a shared, oversubscribed machine the wall clock mostly measures waiting,
so the JSON also records the load average and targets are judged on both. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kt_lib.memory import farthest_first, position_weighted_similarity

B, L, M, D = 32, 200, 100, 256
N_ENC, K_SELECT = 5000, 200
DECAY, FUTURE_WEIGHT = 0.95, 0.3


def median_seconds(fn, repeats: int) -> tuple[float, float]:
    """(median wall seconds, median process CPU seconds) over `repeats` calls after a warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def seed_weights(sequence_length: int, current_position: int) -> torch.Tensor:
    """Seed 000's compute_position_weights, as written (loops)."""
    weights = torch.zeros(sequence_length)
    for i in range(min(current_position, sequence_length)):
        weights[i] = DECAY ** (current_position - i - 1)
    for i in range(current_position, sequence_length):
        weights[i] = FUTURE_WEIGHT * DECAY ** (i - current_position)
    return weights


def seed_similarity(current: torch.Tensor, historical: torch.Tensor, current_position: int):
    """Seed 000's compute_weighted_similarity for one current student and one memory sequence."""
    hist_length = historical.shape[0]
    weights = seed_weights(hist_length, current_position)
    sims = torch.zeros(hist_length)
    for i in range(min(current_position, hist_length)):
        sims[i] = F.cosine_similarity(current[i].unsqueeze(0), historical[i].unsqueeze(0)).item()
    for i in range(current_position, hist_length):
        if i > 0:
            sims[i] = F.cosine_similarity(
                historical[i - 1].unsqueeze(0), historical[i].unsqueeze(0)
            ).item()
        else:
            sims[i] = 0.5
    total = weights.sum()
    return float((sims * weights).sum() / total) if total > 0 else 0.0


def main(repeats: int = 5, samples: int = 4, threads: int = 1, out: str | None = None) -> dict:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    enc = torch.randn(N_ENC, D, generator=g)
    ff_wall, ff_cpu = median_seconds(lambda: farthest_first(enc, K_SELECT, first=0), repeats)

    cur = torch.randn(B, L, D, generator=g)
    mem = torch.randn(M, L, D, generator=g)
    valid = torch.ones(M, L, dtype=torch.bool)
    with torch.no_grad():
        fast = position_weighted_similarity(cur, mem, valid, DECAY, FUTURE_WEIGHT)
        pw_wall, pw_cpu = median_seconds(
            lambda: position_weighted_similarity(cur, mem, valid, DECAY, FUTURE_WEIGHT), repeats
        )
    rows = torch.randint(0, B, (samples,), generator=g).tolist()
    steps = torch.randint(0, L, (samples,), generator=g).tolist()
    worst = 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    for b, t in zip(rows, steps, strict=True):
        current = cur[b, : t + 1]  # row t: steps 0..t are known (current_position = t + 1)
        for m in range(M):
            ref = seed_similarity(current, mem[m], t + 1)
            worst = max(worst, abs(ref - float(fast[b, t, m])))
    loop_wall = (time.perf_counter() - w0) / samples * B * L  # extrapolated to the full grid
    loop_cpu = (time.process_time() - c0) / samples * B * L
    assert worst < 1e-4, f"vectorised similarity differs from the seed's loop by {worst:.2e}"

    result = {
        "threads": threads,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "farthest_first": {
            "n": N_ENC,
            "k": K_SELECT,
            "d": D,
            "wall_seconds": round(ff_wall, 4),
            "cpu_seconds": round(ff_cpu, 4),
            "target_seconds": 0.5,
            "ok_wall": ff_wall <= 0.5,
            "ok_cpu": ff_cpu <= 0.5,
        },
        "position_weighted": {
            "B": B,
            "L": L,
            "clusters": M,
            "d": D,
            "wall_ms": round(1000 * pw_wall, 2),
            "cpu_ms": round(1000 * pw_cpu, 2),
            "target_ms": 100.0,
            "loop_wall_seconds_extrapolated": round(loop_wall, 1),
            "loop_cpu_seconds_extrapolated": round(loop_cpu, 1),
            "loop_sampled_pairs": samples,
            "speedup_wall": round(loop_wall / pw_wall, 1),
            "speedup_cpu": round(loop_cpu / pw_cpu, 1),
            "target_speedup": 100.0,
            "max_abs_diff_vs_loop": worst,
            "ok_wall": pw_wall <= 0.1 and loop_wall / pw_wall >= 100,
            "ok_cpu": pw_cpu <= 0.1 and loop_cpu / pw_cpu >= 100,
        },
    }
    print(json.dumps(result))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))
    return result


PREPARE_PRESETS = ("position_weighted_dual", "cluster_only", "knn_only", "dual_modular")


def prepare_vs_epoch(data_dir: str, data_format: str, fold: int | None, threads: int, out=None):
    """{preset: prepare seconds, epoch seconds, ratio} on one fold (see the module docstring)."""
    import warnings

    from kt_lib.data.dataset import BatchLoader
    from kt_lib.data.formats import load_bundle
    from kt_lib.models import build_model
    from kt_lib.runtime import keep_freed_memory

    torch.set_num_threads(threads)
    keep_freed_memory()
    bundle = load_bundle(data_dir, data_format, fold=fold)
    train = bundle.train
    batches = list(BatchLoader(train, 64, 200, shuffle=True, seed=0, bucket=50))
    rows = {}
    for preset in PREPARE_PRESETS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.manual_seed(0)
            model = build_model("simakt", dataset=train, preset="paper", similarity=preset)
        t0 = time.perf_counter()
        model.prepare(train)
        prep = time.perf_counter() - t0
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        times = []
        for i, batch in enumerate(batches[:4]):
            t0 = time.perf_counter()
            opt.zero_grad()
            model.loss(model(batch), batch, 0)["total"].backward()
            opt.step()
            if i:
                times.append(time.perf_counter() - t0)
        epoch = statistics.median(times) * len(batches)
        rows[preset] = {
            "prepare_s": round(prep, 2),
            "epoch_s_estimate": round(epoch, 1),
            "prepare_over_epoch": round(prep / epoch, 4),
            "steps_per_epoch": len(batches),
        }
        print(json.dumps({"preset": preset, **rows[preset]}), flush=True)
    result = {
        "data": bundle.protocol,
        "threads": threads,
        "load_average": os.getloadavg(),
        "presets": rows,
    }
    if out:
        Path(out).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--prepare", default=None, help="a dataset folder: time prepare vs an epoch")
    p.add_argument("--format", default="auto")
    p.add_argument("--fold", type=int, default=1)
    a = p.parse_args()
    if a.prepare:
        prepare_vs_epoch(a.prepare, a.format, a.fold, a.threads, a.out)
    else:
        main(a.repeats, a.samples, a.threads, a.out)
