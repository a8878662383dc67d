"""Speed and memory of every registered model: one training step and one inference pass.

    python benchmarks/bench_models.py [--models sakt dkt] [--repeats 7] [--out FILE.json]
    python benchmarks/bench_models.py --device cuda [--precision bf16] [--backend reference]
    python benchmarks/bench_models.py --models akt --set d_ff=256        # config overrides
    python benchmarks/bench_models.py --models dkt sakt --batch 8 --len 50 --repeats 2  # smoke

Setting (issue 2): B=64, L=200, paper preset (d=256 where the model has it), 100 skills, no
problem ids; plus seed 004's latency case for the public SAKT class (batch 32, sequence 100,
forward; section 8.3: under 100 ms on CPU, under 10 ms on `--device cuda`): its JSON has the
median latency `median_ms`, `target_ms` and `meets_target`. It runs with every model (no
`--models`, and no `--set`/`--batch`/`--len`: its sizes are the seed's) or when named
(`--models seed_sakt` runs it alone; with a size flag it is refused).
`--device` (default cpu) holds the model, the batch and the timing; `--precision` (fp32, tf32,
bf16; default the device's: tf32 on CUDA, fp32 elsewhere) and `--backend` (attention backend
reference | cpu | cuda; default by device) wrap everything in `kt_lib.runtime.precision_context`
and `kt_lib.nn.use_backend`, as `train.fit` does. CUDA timings synchronise before starting and
before stopping the clock.

Each model runs in a fresh subprocess so its peak memory is its own, except on CUDA, where they
all run in this process (`--process shared`, the default there: CUDA's start and the profiler's
cost about 10 s a process, most of a model's time on a GPU, and `torch.cuda.max_memory_allocated`
is reset per model, so the peak stays each model's own; `--process fresh` restores one process a
model). On CPU `--process shared` drops `peak_rss_mb` (a process's high-water mark cannot be one
model's) and records `"process": "shared"`. Prints one JSON object per
model and writes them all to --out. Figures are medians over --repeats after a warm-up. Besides
train_step_s / inference_s: on CUDA `kernels_per_step` (CUDA kernels launched by one training
step, counted with torch.profiler; `copies_per_step` the Memcpy/Memset) and `peak_gpu_mb`
(torch.cuda.max_memory_allocated over the timed training steps); on CPU `ops_per_step` (aten
operator calls of one training step, nested included) and `peak_rss_mb` (ru_maxrss after the timed
training steps, before the profiler count and inference: the step's own high-water mark). The key
`counted` says which count it is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import torch
from timing import is_cuda, measure, median_seconds, model_step_and_inference, seconds

B, L, NUM_C = 64, 200, 100
NUM_PID = 10 * NUM_C  # problem ids of the batch for a model that needs them (`needs` holds "pid")


@contextlib.contextmanager
def on_device(device: str, precision: str | None, backend: str | None):
    """precision_context and use_backend, as fit() wraps training; yields the resolved precision."""
    from kt_lib.nn import use_backend
    from kt_lib.runtime import keep_freed_memory, precision_context

    keep_freed_memory()  # as fit() does by default (TrainConfig.keep_freed_memory)
    with use_backend(backend), precision_context(precision, device) as prec:
        yield prec


def setting(device: str, prec: str, backend: str | None, b: int, n: int) -> dict:
    out = {"device": device, "precision": prec, "backend": backend or "by device", "B": b, "L": n}
    if is_cuda(device):
        out["gpu"] = torch.cuda.get_device_name(device)
    else:
        out["threads"] = torch.get_num_threads()
        out["cpu"] = cpu_model()
    return out


def cpuinfo(key: str) -> str | None:
    """The first `key` field of /proc/cpuinfo (Linux), or None where there is none."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(key)), None)


def cpu_model() -> str | None:
    """The CPU's model name, or None: CPU timings differ by machine."""
    return cpuinfo("model name")


def parse_sets(overrides: list[str] | None) -> dict:
    import yaml

    sets = dict(kv.split("=", 1) for kv in overrides or [])
    return {k: yaml.safe_load(v) for k, v in sets.items()}


def build_ours(
    name: str, device: str, sets: dict | None = None, b: int = B, n: int = L, num_pid: int = 0
):
    """Our registered model `name` at the paper preset (seed 0, prepared on a simulated training
    set, on `device`) and the benchmark batch: `random_batch(NUM_C, b, n, seed=0)`, full rows;
    with `num_pid` (a multiple of NUM_C) problem ids in both (else none).
    Call inside `on_device` (prepare runs there, as in fit)."""
    from kt_lib.audit import random_batch
    from kt_lib.data.synthetic import simulate
    from kt_lib.models import MODELS, build_model

    torch.manual_seed(0)
    K = 4 if MODELS[name].ordinal else 2
    model = build_model(name, preset="paper", num_c=NUM_C, num_pid=num_pid, K=K, **(sets or {}))
    model.to(device)
    per_c = {"problems_per_c": num_pid // NUM_C} if num_pid else {}
    train = simulate(num_students=200, seq_len=n, num_c=NUM_C, K=K, seed=0, **per_c).data
    if not num_pid:
        train.num_pid = 0
        for s in train.students:
            s.pid = None
    assert train.num_pid == num_pid, (train.num_pid, num_pid)
    model.prepare(train)
    batch = random_batch(NUM_C, B=b, L=n, num_pid=num_pid, K=K, seed=0, ragged=False)
    batch = batch.to(device)
    return model, batch


def time_ours(
    name: str,
    repeats: int,
    device: str,
    sets: dict | None,
    b: int,
    n: int,
    num_pid: int = 0,
    compile_backend: str | None = None,
):
    """(model, batch, timings) of one of our models' training step and inference pass (inside
    `on_device`). With `compile_backend` the steps run `torch.compile(model, backend=...)`; the
    timings then add the first compiled step and inference (compilation included) and how far
    the compiled eval logits are from the eager ones."""
    model, batch = build_ours(name, device, sets, b, n, num_pid)
    if compile_backend is None:
        step, infer = model_step_and_inference(model, batch)
        return model, batch, measure(step, infer, repeats, device)
    compiled = torch.compile(model, backend=compile_backend)
    step, infer = model_step_and_inference(model, batch, forward=compiled)
    first = {"first_step_s": seconds(step, device), "first_inference_s": seconds(infer, device)}
    model.eval()
    with torch.no_grad():
        diff = (compiled(batch).logits - model(batch).logits).abs().max().item()
    m = measure(step, infer, repeats, device)
    return model, batch, {**m, **first, "compiled": compile_backend, "compiled_max_abs_diff": diff}


def bench_one(
    name: str,
    repeats: int,
    overrides: list[str] | None = None,
    device: str = "cpu",
    precision: str | None = None,
    backend: str | None = None,
    b: int = B,
    n: int = L,
    compile_backend: str | None = None,
) -> dict:
    from kt_lib.models import MODELS

    sets = parse_sets(overrides)
    num_pid = NUM_PID if "pid" in MODELS[name].needs else 0
    with on_device(device, precision, backend) as prec:
        model, batch, m = time_ours(name, repeats, device, sets, b, n, num_pid, compile_backend)
    res = {
        "model": name + "".join(f" {k}={v}" for k, v in sets.items()),
        "params": sum(p.numel() for p in model.parameters()),
        "train_step_s": round(m["train_step_s"], 4),
        "train_interactions_per_s": round(b * n / m["train_step_s"]),
        "inference_s": round(m["inference_s"], 4),
        "inference_interactions_per_s": round(b * n / m["inference_s"]),
    }
    res.update({k: v for k, v in m.items() if k not in res})
    res.update(setting(device, prec, backend, b, n))
    if num_pid:
        res["num_pid"] = num_pid
    return res


SEED_LATENCY_MS = {"cpu": 100.0, "cuda": 10.0}  # seed 004 section 8.3 targets by device type


def bench_seed_sakt(
    repeats: int, device: str = "cpu", precision: str | None = None, backend: str | None = None
) -> dict:
    """Seed 004 section 8.3: batch 32, history of 100 interactions, forward of the public SAKT
    class at the seed's defaults; target < 100 ms on CPU, < 10 ms on a GPU (`--device cuda`).

    `median_ms` (against `target_ms`) is one query per student, the seed's usage (section 5.1:
    the next question). Also timed: the same with a padded batch (`mask`, lengths 50..100,
    left-padded) and a query at each of the 100 steps (100x the FFN work).
    """
    from kt_lib.models.sakt_interface import SAKT

    with on_device(device, precision, backend) as prec:
        torch.manual_seed(0)
        model = SAKT(number_questions=NUM_C, d=256, num_heads=8, dropout=0.1).to(device).eval()
        q = torch.randint(0, NUM_C, (32, 100)).to(device)
        r = torch.randint(0, 2, (32, 100)).to(device)
        lengths = torch.randint(50, 101, (32, 1)).to(device)
        padded = torch.arange(100, device=device) >= 100 - lengths  # [32, 100] left padding

        def fwd(qry, mask=None):
            def run():
                with torch.no_grad():
                    model(q, r, qry, mask)

            return run

        n = max(repeats, 20)
        next_ms = 1000 * median_seconds(fwd(q[:, -1:]), n, device)
        padded_ms = 1000 * median_seconds(fwd(q[:, -1:], padded), n, device)
        all_ms = 1000 * median_seconds(fwd(q), n, device)
    kind = torch.device(device).type
    target = SEED_LATENCY_MS.get(kind)
    where = "GPU latency" if is_cuda(device) else kind.upper()
    out = {
        "model": f"SAKT seed-004 interface, section 8.3 {where} (batch 32, seq 100, forward)",
        "median_ms": round(next_ms, 2),
        "target_ms": target,
        "meets_target": None if target is None else next_ms < target,
        "forward_ms_next_query_padded": round(padded_ms, 2),
        "forward_ms_all_100_queries": round(all_ms, 2),
        "repeats": n,
    }
    out.update(setting(device, prec, backend, 32, 100))
    return out


def add_device_args(p: argparse.ArgumentParser) -> None:
    """The flags bench_models and bench_peers share."""
    from kt_lib.nn import BACKENDS
    from kt_lib.runtime import PRECISIONS

    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="default: the device's (tf32 on CUDA, fp32 elsewhere)",
    )
    p.add_argument("--backend", choices=BACKENDS, default=None, help="attention backend")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=B, help=f"batch size (default {B})")
    p.add_argument("--len", type=int, default=L, help=f"sequence length (default {L})")


def device_argv(a: argparse.Namespace) -> list[str]:
    """The shared flags again, for the per-model subprocess."""
    argv = ["--device", a.device, "--repeats", str(a.repeats)]
    argv += ["--batch", str(a.batch), "--len", str(a.len)]
    if getattr(a, "compile", None):
        argv += ["--compile", a.compile]
    if a.precision:
        argv += ["--precision", a.precision]
    if a.backend:
        argv += ["--backend", a.backend]
    return argv


def run_subprocess(script: str, name: str, argv: list[str]) -> dict:
    """`script --one name argv` in a fresh interpreter; its last stdout line as JSON."""
    out = subprocess.run(
        [sys.executable, script, "--one", name, *argv], capture_output=True, text=True
    )
    if out.returncode:  # the profiler's own log lines (USDT:...) are not the error
        lines = [x for x in out.stderr.strip().splitlines() if not x.startswith("USDT:")]
        code = out.returncode
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return {"model": name, "error": f"{status}: {lines[-1]}" if lines else status}
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_named(name: str, a: argparse.Namespace) -> dict:
    """One name's JSON: a registered model, or seed 004's SAKT latency case (`seed_sakt`)."""
    if name == "seed_sakt":
        if getattr(a, "compile", None):
            raise ValueError("--compile times the registered models; seed_sakt is not compiled")
        return bench_seed_sakt(a.repeats, a.device, a.precision, a.backend)
    return bench_one(
        name, a.repeats, a.set, a.device, a.precision, a.backend, a.batch, a.len, a.compile
    )


def run_shared(name: str, a: argparse.Namespace) -> dict:
    """`bench_named` in this process: an error becomes the row's `error` (as a failed subprocess's
    does), and the model's memory is released before the next one."""
    import gc

    try:
        res = bench_named(name, a)
    except Exception as exc:  # one model's failure must not stop the others
        res = {"model": name, "error": f"{type(exc).__name__}: {exc}"}
    gc.collect()
    if is_cuda(a.device):
        torch.cuda.empty_cache()
    else:
        res.pop("peak_rss_mb", None)  # the process's, not the model's
    res["process"] = "shared"
    return res


def run_all(script: str, names: list[str], a: argparse.Namespace, shared: bool) -> None:
    """Each name in its own subprocess (or, `shared`, in this one); print each JSON line and
    write them all to `a.out` after each (a cut-off run keeps what finished)."""
    argv = [*device_argv(a), "--set", *a.set]
    results = []
    for name in names:
        res = run_shared(name, a) if shared else run_subprocess(script, name, argv)
        print(json.dumps(res), flush=True)
        results.append(res)
        write_rows(a.out, results)


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """All rows so far to `path`, atomically (a benchmark cut off keeps what finished)."""
    from kt_lib.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(rows, indent=2))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=None)
    add_device_args(p)
    p.add_argument("--out", default="benchmarks/results/models.json")
    p.add_argument("--set", nargs="*", default=[], help="model overrides key=value, e.g. d=128")
    p.add_argument(
        "--process",
        choices=("fresh", "shared"),
        default=None,
        help="fresh: one process a model (the default on CPU); shared: all in this one "
        "(the default on CUDA)",
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default=None,
        metavar="BACKEND",
        help="time torch.compile(model, backend=BACKEND) (default inductor): adds the first "
        "compiled step and inference, compilation included, and the compiled eval logits' "
        "largest distance from the eager ones",
    )
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(namespace=argparse.Namespace(batch=None, len=None))  # None: not given
    given = (("--set", a.set or None), ("--batch", a.batch), ("--len", a.len))
    sized = [flag for flag, v in given if v is not None]
    a.batch, a.len = (B if a.batch is None else a.batch), (L if a.len is None else a.len)
    if a.batch < 1 or a.len < 1:
        p.error(f"--batch {a.batch} --len {a.len}: both must be >= 1")
    if a.compile and a.backend not in (None, "reference"):
        p.error(f"--compile runs the reference attention; --backend {a.backend} would be ignored")
    if a.one:
        print(json.dumps(bench_named(a.one, a)))
        return
    if sized and "seed_sakt" in (a.models or []):
        p.error(
            f"{', '.join(sized)}: seed_sakt times seed 004's fixed case (batch 32, 100 steps, "
            "d 256) and would ignore them; run it without them"
        )
    from kt_lib.models import list_models

    fixed_case = [] if a.compile or sized else ["seed_sakt"]  # its sizes are the seed's
    names = a.models or [*list_models(), *fixed_case]
    process = a.process or ("shared" if is_cuda(a.device) else "fresh")
    run_all(__file__, names, a, process == "shared")


if __name__ == "__main__":
    main()
