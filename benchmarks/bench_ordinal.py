"""Cost of the ordinal models: time per variant, memory with gradient checkpointing, eval cache.

    python benchmarks/bench_ordinal.py [--repeats 5] [--device cpu] [--out FILE.json]
    python benchmarks/bench_ordinal.py --memory [--length 500] [--batch 8] [--out FILE.json]
    python benchmarks/bench_ordinal.py --cache [--repeats 5] [--out FILE.json]

Timing (default): ModularAttentionGPCM with each mechanism alone, the seed's combination under
each fusion, and AttentionGPCM, on one training step and one inference pass. Setting: B=64,
L=200, K=4, 100 concepts, paper preset (d=64, 4 heads, 2 layers / stacked pipelines). Figures
are medians over --repeats after a warm-up.

--memory: one training step (forward + backward of the loss) of the seed's combination (four
mechanisms, concat, 2 stacked pipelines, paper sizes) and of AttentionGPCM at L=--length, with
and without `gradient_checkpointing`: the step's median time (what the recomputation costs) and
its memory. On CUDA: peak allocated memory of the step above what was allocated before it
(`torch.cuda.max_memory_allocated`). On CPU, deterministically: the bytes autograd keeps for the
backward pass (saved tensors, parameters excluded, each storage once), plus, with checkpointing,
the largest single mechanism's kept bytes, which its recomputation holds for a moment during the
backward pass (the estimated peak).

--cache: evaluation of the seed's combination (B=64, L=200) on the same batch again and again,
without and inside `model.eval_cache()` (hits), and on two alternating batches with a one-entry
cache (every call a miss: the cost of keying by content).

Each mode prints one JSON object per row and writes them all to --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from timing import is_cuda, median_seconds, step_and_inference_seconds, sync

from kt_lib.audit import random_batch
from kt_lib.heads.ordinal import AttentionContext, AttentionRegistry
from kt_lib.models import build_model

B, L, K, NUM_C = 64, 200, 4, 100
SEED_COMBO = ("modular_attention_gpcm", {})  # the seed's four mechanisms, concat


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


def timing(repeats: int, device: str) -> list[dict]:
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
    variants["ordinal_aware + ordinal_pattern, gated"] = (
        "modular_attention_gpcm",
        {"mechanisms": ["ordinal_aware", "ordinal_pattern"], "fusion": "gated"},
    )
    rows = []
    for label, (name, kw) in variants.items():
        rows.append(bench(label, name, kw, repeats, device))
        print(json.dumps(rows[-1]), flush=True)
    return rows


# --- memory: gradient checkpointing ------------------------------------------------------------


def kept_bytes(loss_fn, params) -> int:
    """Bytes of the tensors autograd saves while `loss_fn()` runs (each storage once, `params`
    excluded); the backward pass then runs and frees them."""
    skip = {p.untyped_storage().data_ptr() for p in params}
    kept: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            kept[s.data_ptr()] = max(kept.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    loss.backward()
    return sum(kept.values())


def largest_mechanism_bytes(model, batch) -> int:
    """Kept bytes of the most expensive single mechanism of the first pipeline, on `batch`."""
    c = model.config
    e = torch.randn(*batch.q.shape, c.d, device=batch.q.device, requires_grad=True)
    ctx = AttentionContext(e, batch.r, batch.mask)
    mechanisms = model.encoder.pipelines[0].mechanisms
    return max(kept_bytes(lambda m=m: m.attend(ctx)[0].sum(), m.parameters()) for m in mechanisms)


def memory_row(label, name, overrides, checkpointing, length, batch_size, device, repeats) -> dict:
    torch.manual_seed(0)
    model = build_model(
        name,
        preset="paper",
        num_c=NUM_C,
        K=K,
        max_len=length,
        gradient_checkpointing=checkpointing,
        **overrides,
    )
    model = model.to(device).train()
    batch = random_batch(NUM_C, B=batch_size, L=length, K=K, seed=0, ragged=False).to(device)
    loss = lambda: model.loss(model(batch), batch)["total"]  # noqa: E731
    row = {"variant": label, "gradient_checkpointing": checkpointing, "B": batch_size}
    row.update(L=length, device=device)
    row["step_s"] = round(median_seconds(lambda: loss().backward(), repeats, device), 3)
    if is_cuda(device):
        loss().backward()  # warm-up: kernels, workspaces
        model.zero_grad(set_to_none=True)
        sync(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        loss().backward()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        row["peak_step_mb"] = round(peak / 2**20, 1)
        return row
    kept = kept_bytes(loss, model.parameters())
    row["kept_for_backward_mb"] = round(kept / 2**20, 1)
    if checkpointing and name == "modular_attention_gpcm":
        extra = largest_mechanism_bytes(model, batch)
        row["largest_mechanism_mb"] = round(extra / 2**20, 1)
        row["estimated_peak_mb"] = round((kept + extra) / 2**20, 1)
    return row


def memory(length: int, batch_size: int, device: str, repeats: int) -> list[dict]:
    rows = []
    for label, (name, kw) in {
        "seed combo, concat": SEED_COMBO,
        "attention_gpcm": ("attention_gpcm", {}),
    }.items():
        for checkpointing in (False, True):
            row = memory_row(label, name, kw, checkpointing, length, batch_size, device, repeats)
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
    return rows


# --- evaluation cache --------------------------------------------------------------------------


def cache(repeats: int, device: str) -> list[dict]:
    torch.manual_seed(0)
    name, kw = SEED_COMBO
    model = build_model(name, preset="paper", num_c=NUM_C, K=K, **kw).to(device).eval()
    one, two = (random_batch(NUM_C, B=B, L=L, K=K, seed=s, ragged=False).to(device) for s in (0, 1))
    calls = [0]

    def alternate():
        calls[0] += 1
        model(two if calls[0] % 2 else one)

    with torch.no_grad():
        plain = median_seconds(lambda: model(one), repeats, device)
        with model.eval_cache() as c:
            hit = median_seconds(lambda: model(one), repeats, device)  # warm-up call: the miss
            hits = (c.hits, c.misses)
        with model.eval_cache(max_entries=1) as c:
            miss = median_seconds(alternate, repeats, device)
            misses = (c.hits, c.misses)
    row = {
        "variant": "seed combo, concat",
        "B": B,
        "L": L,
        "uncached_eval_s": round(plain, 4),
        "cache_hit_eval_s": round(hit, 4),
        "cache_miss_eval_s": round(miss, 4),
        "hit_speedup": round(plain / hit, 1),
        "miss_overhead": round(miss / plain - 1, 3),
        "hits_misses_repeat": hits,
        "hits_misses_alternate": misses,
        "device": device,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(row), flush=True)
    return [row]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--memory", action="store_true", help="gradient checkpointing memory")
    mode.add_argument("--cache", action="store_true", help="evaluation cache timing")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--length", type=int, default=500, help="--memory: sequence length L")
    p.add_argument("--batch", type=int, default=8, help="--memory: batch size B")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if a.memory:
        rows = memory(a.length, a.batch, a.device, a.repeats)
        setting = {"B": a.batch, "L": a.length, "K": K}
    elif a.cache:
        rows = cache(a.repeats, a.device)
        setting = {"B": B, "L": L, "K": K}
    else:
        rows = timing(a.repeats, a.device)
        setting = {"B": B, "L": L, "K": K}
    if a.out:
        Path(a.out).write_text(json.dumps({**setting, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
