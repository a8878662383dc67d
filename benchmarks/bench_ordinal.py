"""Cost of the ordinal mechanisms: ModularAttentionGPCM with each mechanism alone, the seed's
combination under each fusion, and AttentionGPCM, on one training step and one inference pass.

    python benchmarks/bench_ordinal.py [--repeats 5] [--device cpu] [--out FILE.json]

Setting: B=64, L=200, K=4, 100 concepts, paper preset (d=64, 4 heads, 2 layers / stacked
pipelines). Prints one JSON object per variant and writes them all to --out. Figures are medians
over --repeats after a warm-up.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from timing import step_and_inference_seconds

from kt_lib.audit import random_batch
from kt_lib.heads.ordinal import AttentionRegistry
from kt_lib.models import build_model

B, L, K, NUM_C = 64, 200, 4, 100


def bench(label: str, name: str, overrides: dict, repeats: int, device: str) -> dict:
    torch.manual_seed(0)
    model = build_model(name, preset="paper", num_c=NUM_C, K=K, **overrides).to(device)
    batch = random_batch(NUM_C, B=B, L=L, K=K, seed=0, ragged=False).to(device)
    train_s, infer_s = step_and_inference_seconds(model, batch, repeats, device)
    return {
        "variant": label,
        "params": sum(p.numel() for p in model.parameters()),
        "train_step_s": round(train_s, 4),
        "inference_s": round(infer_s, 4),
        "train_interactions_per_s": round(B * L / train_s),
        "device": device,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    variants = {"attention_gpcm": ("attention_gpcm", {})}
    variants.update(
        {
            f"only {m}": ("modular_attention_gpcm", {"mechanisms": [m]})
            for m in AttentionRegistry.list_available()
        }
    )
    variants.update(
        {
            f"seed combo, {f}": ("modular_attention_gpcm", {"fusion": f})
            for f in ("concat", "weighted", "mean")
        }
    )
    rows = []
    for label, (name, kw) in variants.items():
        rows.append(bench(label, name, kw, a.repeats, a.device))
        print(json.dumps(rows[-1]), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"B": B, "L": L, "K": K, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
