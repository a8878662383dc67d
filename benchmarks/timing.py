"""Timing shared by the benchmark scripts: medians after a warm-up, one training step and one
inference pass of a model on a fixed batch, device operations per step, peak GPU memory; for
two implementations compared (bench_peers), alternating rounds (`alternate`, `measure_pair`)
and each side's peak memory in a process of its own (`peak_in_fresh_process`)."""

from __future__ import annotations

import statistics
import time

import torch

from kt_lib.train import TrainConfig

GRAD_CLIP = TrainConfig.grad_clip  # ours: the gradient norm `fit` clips at, by default


def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def sync(device) -> None:
    """Wait for the device's queued work (CUDA); nothing elsewhere."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def seconds(fn, device: str = "cpu") -> float:
    """Wall-clock seconds of one `fn()`; on CUDA the device is synchronised before the clock
    starts and before it stops."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def median_seconds(fn, repeats: int, device: str = "cpu") -> float:
    """Median `seconds` of `fn()` over `repeats` calls after one warm-up call."""
    fn()
    return statistics.median(seconds(fn, device) for _ in range(repeats))


def model_step_and_inference(model, batch, forward=None, grad_clip=GRAD_CLIP):
    """(step, infer) closures: the training step `fit` runs (AdamW on `model.loss`, the gradient
    norm clipped at `grad_clip`, TrainConfig's default; None: no clipping), and a no-grad
    forward; `forward` (e.g. `torch.compile(model)`) runs the model's forward in both, if
    given."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = model if forward is None else forward

    def step():
        model.train()
        terms = model.loss(forward(batch), batch, 0)
        opt.zero_grad()
        terms["total"].backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()

    def infer():
        model.eval()
        with torch.no_grad():
            forward(batch)

    return step, infer


def step_and_inference_seconds(model, batch, repeats: int, device: str = "cpu"):
    """(training step, inference pass) medians: AdamW step on `model.loss`, then no-grad forward."""
    from kt_lib.runtime import keep_freed_memory

    keep_freed_memory()  # as fit() does by default (TrainConfig.keep_freed_memory)
    step, infer = model_step_and_inference(model, batch)
    return median_seconds(step, repeats, device), median_seconds(infer, repeats, device)


# aten operators whose self time is BLAS matrix products (a Linear is addmm or mm; matmul and
# linear themselves only dispatch to these), and the fused recurrent layers (oneDNN's LSTM/GRU
# layer and torch's fused cells: their gates' products, which the profiler cannot split off)
MATRIX_PRODUCTS = frozenset(
    ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::addmv",
     "aten::mv", "aten::dot", "aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward",
     "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
     "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward")
)  # fmt: skip


def count_per_step(fn, device) -> dict:
    """What one call of `fn` launches, counted with torch.profiler (call `fn` once before, so
    one-time work such as the optimizer's state allocation is not counted).

    CUDA: `kernels_per_step`, the device events that are kernels (device_type CUDA, not user
    annotations, not copies), and `copies_per_step` (Memcpy/Memset). Elsewhere: `ops_per_step`,
    the aten operator calls (nested calls included, i.e. every dispatch), and `matmul_share`,
    the share of the aten operators' self time spent in `MATRIX_PRODUCTS`.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = is_cuda(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with profile(activities=acts) as prof:
        fn()
        sync(device)
    events = list(prof.events())
    if cuda:
        dev = [
            e
            for e in events
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
        ]
        copies = sum(1 for e in dev if e.name.startswith(("Memcpy", "Memset")))
        return {
            "kernels_per_step": len(dev) - copies,
            "copies_per_step": copies,
            "counted": "CUDA kernels of one training step (torch.profiler device events)",
        }
    cpu = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]
    self_us = sum(e.self_cpu_time_total for e in cpu)
    gemm_us = sum(e.self_cpu_time_total for e in cpu if e.name in MATRIX_PRODUCTS)
    return {
        "ops_per_step": len(cpu),
        "counted": "aten operator calls of one training step, nested included (torch.profiler)",
        # the share of the profiled step spent in the matrix products themselves (BLAS): work
        # two implementations of one model at the same sizes both do, whatever else they do
        "matmul_share": round(gemm_us / self_us, 4) if self_us else None,
    }


def measure(step, infer, repeats: int, device, count: bool = True) -> dict:
    """Train-step and inference medians of the closures, plus (with `count`) the device kernels
    (CUDA) or aten calls (CPU) of one step, and on CUDA the peak allocated memory of the timed
    training steps (`torch.cuda.max_memory_allocated`, reset before; `peak_memory`)."""
    res: dict = {}
    if is_cuda(device):
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
    res["train_step_s"] = median_seconds(step, repeats, device)
    # on CPU the process's high-water mark so far: building, preparing and training steps only
    res.update(peak_memory(device))
    if count:  # after the timing: the profiler's own records never count as the step's memory
        res.update(count_per_step(step, device))
    res["inference_s"] = median_seconds(infer, repeats, device)
    return res


def alternate(fns, rounds: int, device: str = "cpu") -> list[list[float]]:
    """`seconds` of each of `fns` over `rounds` rounds, one call of each per round, after one
    warm-up call each: the first in the given order on even rounds (0, 2, ...), reversed on odd
    ones, so load that comes and goes lands on every side alike. Per fn, its seconds by round."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            times[i].append(seconds(fns[i], device))
    return times


def median_ratio(a: list[float], b: list[float]) -> float:
    """The median over rounds of a[r] / b[r] (each round's ratio, the two timed together)."""
    assert len(a) == len(b) and a, (len(a), len(b))
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def measure_pair(a, b, rounds: int, device, count: bool = True) -> tuple[dict, dict, dict]:
    """Two (step, infer) pairs timed in alternating rounds (`alternate`): the training steps
    first, then the inference passes. Per side: `train_step_s` and `inference_s` (medians over
    the rounds), the rounds' seconds (`train_step_rounds_s`, `inference_rounds_s`) and, with
    `count`, `count_per_step` of its step (after the timing). Also {"train_step", "inference"}:
    the median of the rounds' ratios a / b. No peak memory: in one process each side's would
    include the other's (see `peak_in_fresh_process`)."""
    sides: tuple[dict, dict] = ({}, {})
    ratio = {}
    for key, i in (("train_step", 0), ("inference", 1)):
        times = alternate([a[i], b[i]], rounds, device)
        for side, t in zip(sides, times, strict=True):
            side[f"{key}_s"] = statistics.median(t)
            side[f"{key}_rounds_s"] = [round(x, 4) for x in t]
        ratio[key] = median_ratio(*times)
        if count and key == "train_step":  # after the timing, as in `measure`
            for side, fns in zip(sides, (a, b), strict=True):
                side.update(count_per_step(fns[0], device))
    return sides[0], sides[1], ratio


def peak_rss_mb() -> float:
    """This process's resident-memory high-water mark, MB: Linux's VmHWM (/proc/self/status),
    the peak of this process's own memory since it started its program; elsewhere ru_maxrss.
    Not ru_maxrss on Linux: a process started by fork + exec keeps its parent's mark there, so
    a child of a process holding 6 GB reports at least 6 GB whatever it allocates itself."""
    try:
        with open("/proc/self/status") as f:
            hwm = next((ln.split()[1] for ln in f if ln.startswith("VmHWM:")), None)
    except OSError:
        hwm = None
    if hwm is not None:
        return round(int(hwm) / 1024, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def peak_memory(device) -> dict:
    """{"peak_gpu_mb": torch.cuda.max_memory_allocated} on CUDA, else {"peak_rss_mb": ...}."""
    if is_cuda(device):
        sync(device)
        return {"peak_gpu_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}
    return {"peak_rss_mb": peak_rss_mb()}


def _run_then_peak(fn, args: tuple, device) -> dict:
    fn(*args)
    return peak_memory(device)


def peak_in_fresh_process(fn, *args, device="cpu") -> dict:
    """`fn(*args)` in a fresh interpreter (multiprocessing's spawn: nothing of this process's
    memory, models or allocator pools is there), then that process's `peak_memory`. `fn` must be
    importable by name (a module-level function); on CUDA it resets the peak statistics itself
    where building should not count. Its exceptions are raised here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_run_then_peak, fn, args, device).result()
