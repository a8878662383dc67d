"""Speed and memory of every registered model: one training step and one inference pass.

    python benchmarks/bench_models.py [--models sakt dkt] [--repeats 7] [--out FILE.json]
    python benchmarks/bench_models.py --models akt --set bf16=true    # config overrides

Setting (issue 2): B=64, L=200, paper preset (d=256 where the model has it), 100 skills, no
problem ids, CPU; plus seed 004's latency case for the public SAKT class (batch 32, sequence 100).
Each model runs in a fresh subprocess so its peak resident memory (ru_maxrss) is its own. Prints
one JSON object per model and writes them all to --out. Figures are medians over --repeats after a
warm-up.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch
from timing import median_seconds, step_and_inference_seconds

B, L, NUM_C = 64, 200, 100


def bench_one(name: str, repeats: int, overrides: list[str] | None = None) -> dict:
    from kt_lib.audit import random_batch
    from kt_lib.data.synthetic import simulate
    from kt_lib.models import MODELS, build_model

    torch.manual_seed(0)
    K = 4 if MODELS[name].ordinal else 2
    import yaml

    sets = dict(kv.split("=", 1) for kv in overrides or [])
    sets = {k: yaml.safe_load(v) for k, v in sets.items()}
    model = build_model(name, preset="paper", num_c=NUM_C, num_pid=0, K=K, **sets)
    train = simulate(num_students=200, seq_len=L, num_c=NUM_C, K=K, seed=0).data
    train.num_pid = 0
    for s in train.students:
        s.pid = None
    model.prepare(train)
    batch = random_batch(NUM_C, B=B, L=L, K=K, seed=0, ragged=False)
    train_s, infer_s = step_and_inference_seconds(model, batch, repeats)
    return {
        "model": name + "".join(f" {k}={v}" for k, v in sets.items()),
        "params": sum(p.numel() for p in model.parameters()),
        "train_step_s": round(train_s, 4),
        "train_interactions_per_s": round(B * L / train_s),
        "inference_s": round(infer_s, 4),
        "inference_interactions_per_s": round(B * L / infer_s),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": torch.get_num_threads(),
    }


def bench_seed_sakt(repeats: int) -> dict:
    """Seed 004 section 8.3: batch 32, history of 100 interactions, CPU forward < 100 ms.

    Timed two ways: one query per student (the seed's usage, section 5.1: the next question) and
    a query at each of the 100 steps (the whole sequence at once, 100x the FFN work).
    """
    from kt_lib.models.sakt import SAKT

    torch.manual_seed(0)
    model = SAKT(number_questions=NUM_C, d=256, num_heads=8, dropout=0.1).eval()
    q = torch.randint(0, NUM_C, (32, 100))
    r = torch.randint(0, 2, (32, 100))

    def fwd(qry):
        def run():
            with torch.no_grad():
                model(q, r, qry)

        return run

    n = max(repeats, 20)
    return {
        "model": "SAKT seed-004 interface (batch 32, seq 100, forward)",
        "forward_ms_next_query": round(1000 * median_seconds(fwd(q[:, -1:]), n), 2),
        "forward_ms_all_100_queries": round(1000 * median_seconds(fwd(q), n), 2),
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", nargs="*", default=None)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default="benchmarks/results/models.json")
    p.add_argument("--set", nargs="*", default=[], help="model overrides key=value, e.g. bf16=true")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        res = (
            bench_seed_sakt(a.repeats)
            if a.one == "seed_sakt"
            else bench_one(a.one, a.repeats, a.set)
        )
        print(json.dumps(res))
        return
    from kt_lib.models import list_models

    results = []
    for name in (a.models or list_models()) + ["seed_sakt"]:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--repeats", str(a.repeats), "--set", *a.set],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            res = {"model": name, "error": out.stderr.strip().splitlines()[-1]}
        else:
            res = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(res), flush=True)
        results.append(res)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
