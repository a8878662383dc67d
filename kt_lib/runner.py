"""Independent training runs, executed in this process, in worker processes or on Ray.

The leaderboard (`leaderboard.run_leaderboard`) and the ablation grids (`ablation.run_grid`) turn
their plans into *tasks*: plain mappings (model, preset, seed, label, model config and overrides,
the `TrainConfig` as a dict, and where the data comes from) that `run_task`, a top-level
function, turns into one `RunOutcome`. `execute` runs a list of tasks:

    workers=1            in this process, one after the other (the trained model is kept)
    workers=N            N spawned processes sharing the CPU cores (torch threads: cores // N)
                         or one GPU; the model stays in its worker
    executor="ray"       one Ray task per run, with a GPU fraction `gpus_per_run` (default 1/N
                         when training on CUDA); `ray_address` joins a cluster, else a local Ray

Data reaches a worker in one of two ways: a `DataSpec` (data_dir, data_format, fold, seed and
the reader's keyword arguments) that the worker loads and caches for the
next tasks, or one shared `Bundle` object sent once per worker process (Ray: put once in the
object store). A run that raises is returned as an outcome with its error and traceback; the
others go on. Outcomes arrive in completion order, each with the index of its task, so callers
can build their rows in plan order whatever the executor.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from .experiment import ExperimentResult
from .provenance import cpu_cores, device_name

EXECUTORS = ("process", "ray")
BUNDLE_CACHE = 2  # bundles a worker keeps (a leaderboard plan visits each data spec in a row)
# TrainConfig fields that do not change a run's numbers
BOOKKEEPING = (
    "device",
    "checkpoint",
    "resume",
    "progress",
    "verbose",
    "eval_batch_size",
    "keep_freed_memory",
)

_shared_bundle = None  # a worker's copy of the one bundle of a grid (set by `_init_worker`)
_bundles: OrderedDict[str, object] = OrderedDict()  # a worker's bundles loaded from data specs


@dataclass
class RunOutcome:
    """One run's result or its failure, with where and how long it ran."""

    index: int  # position of its task in the plan
    result: ExperimentResult | None  # None when the run failed; .model is None off-process
    ordinal: bool = False  # the model predicts K > 2 categories
    row: dict = field(default_factory=dict)  # result.row(), taken where the model lives
    protocol: str = ""  # the bundle's split statement
    error: str | None = None  # "ExceptionType: message" of a failed run
    traceback: str | None = None
    wall_seconds: float = 0.0  # data loading excluded, training and evaluation included
    device_name: str = ""  # GPU name, or the CPU model

    @property
    def ok(self) -> bool:
        return self.error is None


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads of each of `workers` processes sharing the cores."""
    return max(1, (cores or cpu_cores()) // max(1, workers))


def _load(spec, cache: OrderedDict):
    """The bundle of a `DataSpec`, from `cache` (least recently used ones dropped)."""
    key = spec.key()
    if key not in cache:
        cache[key] = spec.load()
        while len(cache) > BUNDLE_CACHE:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return cache[key]


def run_task(task: dict, bundle=None, cache: OrderedDict | None = None) -> RunOutcome:
    """One training run from plain data; never raises (a failure is returned as an outcome).

    task: index, model, preset, seed, label, config (model config: dataclass, mapping, path or
    None), overrides (mapping), train (TrainConfig fields), histories (evaluation histories of
    the test set; default window), threads (torch threads to set; None: leave them) and data
    (a `runs.data.DataSpec`, or None for `bundle` or this worker's shared bundle).
    `cache` holds bundles loaded from data specs (default: this process's).
    """
    import torch

    from . import experiment
    from .train import TrainConfig

    if task.get("threads"):
        torch.set_num_threads(int(task["threads"]))
    out = RunOutcome(task["index"], None)
    t0 = time.perf_counter()
    try:
        out.device_name = device_name(task["train"].get("device", "cpu"))
        train = TrainConfig(**task["train"])
        if task.get("data") is not None:
            bundle = _load(task["data"], _bundles if cache is None else cache)
        elif bundle is None:
            bundle = _shared_bundle
        if bundle is None:
            raise ValueError("the task names no data spec and no bundle was shared")
        out.protocol = bundle.protocol
        t0 = time.perf_counter()
        res = experiment.run_experiment(
            task["model"],
            bundle.train,
            bundle.valid,
            bundle.test,
            preset=task.get("preset", "tiny"),
            model_config=task.get("config"),
            train_config=train,
            seed=task["seed"],
            label=task.get("label"),
            histories=tuple(task.get("histories") or ("window",)),
            **(task.get("overrides") or {}),
        )
        out.result, out.ordinal, out.row = res, bool(res.model.ordinal), res.row()
    except Exception as exc:  # the run failed: record it, the plan goes on
        out.error = f"{type(exc).__name__}: {exc}"
        out.traceback = traceback.format_exc()
    out.wall_seconds = time.perf_counter() - t0
    return out


def _run_remote(task: dict, bundle=None) -> RunOutcome:
    """`run_task` in a worker: the trained model stays there (its numbers travel back)."""
    out = run_task(task, bundle)
    if out.result is not None:
        out.result.model = None
    return out


def _init_worker(threads: int, bundle) -> None:
    """Process-pool initializer: torch threads and the grid's shared bundle, once per worker."""
    global _shared_bundle
    import torch

    torch.set_num_threads(threads)
    _shared_bundle = bundle


def _crashed(index: int, exc: BaseException) -> RunOutcome:
    """The outcome of a run whose worker died or whose result could not come back."""
    text = "".join(traceback.format_exception(exc))
    return RunOutcome(index, None, error=f"{type(exc).__name__}: {exc}", traceback=text)


def _in_process(tasks: list[dict], bundle) -> Iterator[RunOutcome]:
    cache: OrderedDict = OrderedDict()  # this call's bundles, freed when it ends
    for task in tasks:
        yield run_task({**task, "threads": None}, bundle, cache)


def _processes(tasks: list[dict], bundle, workers: int, threads: int) -> Iterator[RunOutcome]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads, bundle),
    )
    finished = False
    try:
        pending = {pool.submit(_run_remote, {**t, "threads": threads}): t["index"] for t in tasks}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                index = pending.pop(fut)
                try:
                    yield fut.result()
                except Exception as exc:  # a worker died (e.g. out of memory): pool broken
                    yield _crashed(index, exc)
        finished = True
    finally:  # stopped early (error, interrupt): runs not started are dropped, none awaited
        pool.shutdown(wait=finished, cancel_futures=True)


def _ray(
    tasks: list[dict],
    bundle,
    workers: int,
    threads: int,
    gpus_per_run: float,
    ray_address: str | None,
) -> Iterator[RunOutcome]:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "executor='ray' needs Ray: pip install -c constraints.txt '.[ray]'"
        ) from exc
    if not ray.is_initialized():  # left running for the next grid; a caller's init is kept
        if ray_address:
            ray.init(address=ray_address)
        else:
            ray.init(include_dashboard=False, log_to_driver=False)
    remote = ray.remote(_run_remote).options(num_cpus=threads, num_gpus=gpus_per_run)
    shared = ray.put(bundle) if bundle is not None else None
    queue = list(tasks)
    pending: dict = {}
    try:
        while queue or pending:
            while queue and len(pending) < workers:  # at most `workers` runs in flight
                task = queue.pop(0)
                pending[remote.remote({**task, "threads": threads}, shared)] = task["index"]
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                index = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the worker died or the task could not run
                    yield _crashed(index, exc)
    finally:
        for ref in pending:
            ray.cancel(ref)


class RunFailed(RuntimeError):
    """A run failed and the caller asked for on_error="raise"."""


ON_ERROR = ("record", "raise")


def execute(
    tasks: list[dict],
    bundle=None,
    workers: int = 1,
    executor: str = "process",
    gpus_per_run: float | None = None,
    ray_address: str | None = None,
    progress: bool = True,
    desc: str = "runs",
    skipped: int = 0,
    on_error: str = "record",
) -> Iterator[RunOutcome]:
    """Run `tasks` (see `run_task`), yielding outcomes as runs finish, with one progress bar
    (ETA) over `skipped` + len(tasks) runs. `bundle` is the data of tasks without a data spec.

    workers=1 with executor="process" runs in this process (torch threads untouched, models
    kept); otherwise `workers` runs at a time, each with cores // workers torch threads.
    on_error="record" yields failed runs (a warning counts them at the end); "raise" raises
    `RunFailed` with the run's traceback at the first failure and cancels the runs not started.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if gpus_per_run is not None and not gpus_per_run >= 0:
        raise ValueError(f"gpus_per_run must be >= 0 (a fraction of one GPU), got {gpus_per_run}")
    if any("index" not in t for t in tasks):
        raise ValueError("every task needs its plan 'index'")
    parallel = workers > 1 or executor == "ray"
    if parallel and any(t["train"].get("checkpoint") for t in tasks):
        raise ValueError(
            "TrainConfig.checkpoint with parallel runs: they would write one checkpoint prefix "
            "at once; run with workers=1 or checkpoint=None"
        )
    if parallel:  # no training bars from workers: one bar over the runs; idle workers none
        tasks = [{**t, "train": {**t["train"], "progress": False}} for t in tasks]
        workers = max(1, min(workers, len(tasks)))
    if executor == "ray" and gpus_per_run is None:
        cuda = any(str(t["train"].get("device", "cpu")).startswith("cuda") for t in tasks)
        gpus_per_run = 1 / workers if cuda else 0
    return _stream(
        tasks,
        bundle,
        workers,
        executor if parallel else "inline",
        gpus_per_run,
        ray_address,
        progress,
        desc,
        skipped,
        on_error,
    )


def _stream(
    tasks, bundle, workers, how, gpus_per_run, ray_address, progress, desc, skipped, on_error
) -> Iterator[RunOutcome]:
    from tqdm.auto import tqdm

    threads = threads_per_worker(workers)
    if how == "inline":
        outcomes = _in_process(tasks, bundle)
    elif how == "process":
        outcomes = _processes(tasks, bundle, workers, threads)
    else:
        outcomes = _ray(tasks, bundle, workers, threads, gpus_per_run, ray_address)
    labels = {t["index"]: f"{t.get('label') or t['model']} seed {t['seed']}" for t in tasks}
    bar = tqdm(total=skipped + len(tasks), initial=skipped, desc=desc, disable=not progress)
    failed = 0
    try:
        for out in outcomes:
            if not out.ok and on_error == "raise":
                raise RunFailed(f"{labels[out.index]}: {out.error}\n{out.traceback}")
            failed += not out.ok
            bar.set_postfix_str(labels[out.index] + (f", {failed} failed" if failed else ""))
            bar.update()
            yield out
    finally:
        bar.close()
        outcomes.close()
    if failed:
        warnings.warn(
            f"{failed} of {len(tasks)} runs failed; their rows carry 'error' and 'traceback'",
            RuntimeWarning,
            stacklevel=2,
        )


def train_dict(train_config) -> dict:
    """A `TrainConfig` (default one for None) as plain data for `run_task`."""
    from .train import TrainConfig

    return asdict(train_config or TrainConfig())


def train_settings(train_config) -> dict:
    """The fields of a `TrainConfig` that change a run's numbers (for run identities)."""
    return {k: v for k, v in train_dict(train_config).items() if k not in BOOKKEEPING}
