"""Independent training runs, executed in this process, in worker processes or on Ray.

The leaderboard (`runs.leaderboard.run_leaderboard`) and the ablation grids (`runs.grid.run_grid`)
turn their plans into `RunSpec`s that `run_spec`, a top-level function, turns into one
`RunOutcome`. `execute` runs a list of specs (a spec's index in the list is its plan index), as
one `ExecConfig` says (parsed once, from the command line's flags or a notebook's parameters):

    workers=1            in this process, one after the other (the trained model is kept)
    workers=N            N spawned processes sharing the CPU cores (torch threads: `threads`,
                         default cores // N) or one GPU; the model stays in its worker
    executor="ray"       one Ray task per run, with a GPU fraction `gpus_per_run` (default 1/N
                         when training on CUDA); `ray_address` joins a cluster, else a local Ray

Data reaches a worker in one of two ways: the spec's `DataSpec` (data_dir, data_format, fold,
seed and the reader's keyword arguments) that the worker loads and caches for the
next runs, or one shared `Bundle` object sent once per worker process (Ray: put once in the
object store). A run that raises is returned as an outcome with its error and traceback; the
others go on. Outcomes arrive in completion order, each with the index of its spec, so callers
can build their rows in plan order whatever the executor.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from ..fileio import LockHeld
from ..nn import native
from ..provenance import cpu_cores, device_name
from .experiment import ExperimentResult, at_least_one, run_experiment
from .spec import RunSpec

EXECUTORS = ("process", "ray")
BUNDLE_CACHE = 2  # bundles a worker keeps (a leaderboard plan visits each data spec in a row)
_shared_bundle = None  # a worker's copy of the one bundle of a grid (set by `_init_worker`)
_bundles: OrderedDict[str, object] = OrderedDict()  # a worker's bundles loaded from data specs


ON_ERROR = ("record", "raise")


@dataclass(frozen=True)
class ExecConfig:
    """How runs execute: `workers` at a time, in processes or on Ray, each Ray task with
    `gpus_per_run` of a GPU (None: 1/workers when training on CUDA), on the Ray cluster at
    `ray_address` (None: a local Ray), `threads` torch threads per run (None: cores // workers
    in workers, this process's setting left as it is inline); `on_error` "record" keeps a failed
    run's row and goes on, "raise" stops at the first failure. Checked when built."""

    workers: int = 1
    executor: str = "process"
    gpus_per_run: float | None = None
    ray_address: str | None = None
    on_error: str = "record"
    threads: int | None = None

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {self.on_error!r}")
        w = self.workers
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"workers must be an integer >= 1, got {w!r}")
        t = self.threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ValueError(f"threads must be an integer >= 1 or None, got {t!r}")
        if self.gpus_per_run is not None and not self.gpus_per_run >= 0:
            raise ValueError(
                f"gpus_per_run must be >= 0 (a fraction of one GPU), got {self.gpus_per_run}"
            )
        for name in ("ray_address", "gpus_per_run"):  # no setting accepted and ignored
            if getattr(self, name) is not None and self.executor != "ray":
                raise ValueError(f"{name} is read by executor='ray' only")

    @property
    def parallel(self) -> bool:
        """Runs leave this process (their trained models stay in the workers)."""
        return self.workers > 1 or self.executor == "ray"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The command line's flags for each field (`from_args` reads them back)."""
        parser.add_argument("--workers", type=int, default=1, help="runs trained at a time")
        parser.add_argument("--executor", default="process", choices=EXECUTORS)
        parser.add_argument(
            "--gpus-per-run", type=float, default=None, help="Ray: GPU fraction per run"
        )
        parser.add_argument("--ray-address", default=None, help="Ray: cluster to join")
        parser.add_argument("--on-error", default="record", choices=ON_ERROR)
        parser.add_argument(
            "--threads",
            type=at_least_one,
            default=None,
            help="torch threads per run (default: cores / workers; one worker: this process's)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExecConfig:
        return cls(
            args.workers,
            args.executor,
            args.gpus_per_run,
            args.ray_address,
            args.on_error,
            args.threads,
        )


@dataclass
class RunOutcome:
    """One run's result or its failure, with where and how long it ran."""

    index: int  # position of its spec in the plan
    result: ExperimentResult | None  # None when the run failed; .model is None off-process
    figures: dict = field(default_factory=dict)  # result.figures(), taken where the model lives
    protocol: str = ""  # the bundle's split statement
    error: str | None = None  # "ExceptionType: message" of a failed run
    traceback: str | None = None
    wall_seconds: float = 0.0  # data loading excluded, training and evaluation included; a
    # resumed run's earlier processes included
    device_name: str = ""  # GPU name, or the CPU model
    native: str | None = None  # the C kernels the run used (kt_lib.nn.native.track)
    elsewhere: bool = False  # not trained: another process finished it meanwhile (`execute`;
    # such an outcome is `ok` with no result: a caller passing `finished_elsewhere` checks this)
    taken: bool = False  # not trained: another process trains this run now (`fit`'s claim on
    # its checkpoint raised `LockHeld`); neither a failure nor a result, `error` says whose

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


def run_spec(
    index: int, spec: RunSpec, bundle=None, cache: OrderedDict | None = None, threads=None
) -> RunOutcome:
    """One training run; never raises (a failure is returned as an outcome).

    The data is the spec's `DataSpec` (loaded through `cache`, default: this process's), else
    `bundle`, else this worker's shared bundle; `threads`: torch threads to set (None: leave
    them)."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    out = RunOutcome(index, None)
    t0 = time.perf_counter()
    try:
        out.device_name = device_name(spec.train.device)
        if spec.data is not None:
            bundle = _load(spec.data, _bundles if cache is None else cache)
        elif bundle is None:
            bundle = _shared_bundle
        if bundle is None:
            raise ValueError("the run names no DataSpec and no bundle was shared")
        out.protocol = bundle.protocol
        t0 = time.perf_counter()
        with native.track() as used:
            res = run_experiment(spec, bundle)
        out.result, out.figures, out.native = res, res.figures(), native.named(used)
    except Exception as exc:  # the run failed: record it, the plan goes on
        out.error, out.taken = f"{type(exc).__name__}: {exc}", isinstance(exc, LockHeld)
        out.traceback = traceback.format_exc()
    out.wall_seconds = time.perf_counter() - t0
    if out.result is not None:
        out.wall_seconds += out.result.earlier_seconds
    return out


def _run_remote(index: int, spec: RunSpec, threads: int, bundle=None) -> RunOutcome:
    """`run_spec` in a worker: the trained model stays there (its numbers travel back)."""
    out = run_spec(index, spec, bundle, threads=threads)
    if out.result is not None:
        out.result.model = None
    return out


def _init_worker(threads: int, bundle, parent: int | None = None) -> None:
    """Process-pool initializer: torch threads and the grid's shared bundle, once per worker;
    with `parent` (the pid that made the pool), the worker ends when that process is gone."""
    global _shared_bundle
    import torch

    torch.set_num_threads(threads)
    _shared_bundle = bundle
    if parent is not None:
        exit_with_parent(parent)


def exit_with_parent(parent: int, every: float = 1.0) -> None:
    """End this process (`os._exit`) once `parent` is no longer its parent, checked every `every`
    seconds by a daemon thread. A killed study otherwise leaves its workers training on, writing
    the very epoch checkpoints that the restarted study resumes its runs from."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _crashed(index: int, exc: BaseException) -> RunOutcome:
    """The outcome of a run whose worker died or whose result could not come back."""
    text = "".join(traceback.format_exception(exc))
    return RunOutcome(index, None, error=f"{type(exc).__name__}: {exc}", traceback=text)


def _in_process(specs: list[RunSpec], bundle, threads: int | None, gone) -> Iterator[RunOutcome]:
    cache: OrderedDict = OrderedDict()  # this call's bundles, freed when it ends
    for index, spec in enumerate(specs):
        yield (
            RunOutcome(index, None, elsewhere=True)
            if gone(index)
            else run_spec(index, spec, bundle, cache, threads)
        )


def _processes(
    specs: list[RunSpec], bundle, workers: int, threads: int, gone
) -> Iterator[RunOutcome]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads, bundle, os.getpid()),
    )
    finished = False
    queue, pending = list(enumerate(specs)), {}
    try:
        while queue or pending:
            while queue and len(pending) < workers:  # started one by one: `gone` asked late
                index, spec = queue.pop(0)
                if gone(index):
                    yield RunOutcome(index, None, elsewhere=True)
                    continue
                try:
                    pending[pool.submit(_run_remote, index, spec, threads)] = index
                except BrokenProcessPool as exc:  # a worker died: no run starts any more
                    for i in [index, *(i for i, _ in queue)]:
                        yield _crashed(i, exc)
                    queue.clear()
            if not pending:
                continue
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
    specs: list[RunSpec],
    bundle,
    workers: int,
    threads: int,
    gpus_per_run: float,
    ray_address: str | None,
    gone,
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
        else:  # a loaded 2-core machine starts Ray's agents slowly: wait 2 min for them
            os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
            ray.init(include_dashboard=False, log_to_driver=False)
    # Ray would hold a task no live node can take forever (a cluster with no CPU node yet may
    # be an autoscaler's: it gets the task)
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= threads and n.get("GPU", 0) >= gpus_per_run]
    if any(n.get("CPU", 0) for n in nodes) and not fits:
        raise ValueError(f"threads={threads} and gpus_per_run={gpus_per_run:g} per run: no live "
                         "node of the Ray cluster has that many")  # fmt: skip
    remote = ray.remote(_run_remote).options(num_cpus=threads, num_gpus=gpus_per_run)
    shared = ray.put(bundle) if bundle is not None else None
    queue = list(enumerate(specs))
    pending: dict = {}
    try:
        while queue or pending:
            while queue and len(pending) < workers:  # at most `workers` runs in flight
                index, spec = queue.pop(0)
                if gone(index):
                    yield RunOutcome(index, None, elsewhere=True)
                else:
                    pending[remote.remote(index, spec, threads, shared)] = index
            if not pending:
                continue
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


def execute(
    specs: list[RunSpec],
    bundle=None,
    execution: ExecConfig | None = None,
    progress: bool = True,
    desc: str = "runs",
    skipped: int = 0,
    finished_elsewhere: Callable[[int], bool] | None = None,
) -> Iterator[RunOutcome]:
    """Run `specs` (see `run_spec`), yielding outcomes as runs finish (each with its spec's
    index), with one progress bar (ETA) over `skipped` + len(specs) runs. `bundle` is the data
    of specs without a `DataSpec`. `finished_elsewhere(index)`, asked just before a run would
    start, says that another process has finished it meanwhile: it is not trained, and its
    outcome comes back with `elsewhere` set (two processes filling one results file).

    `execution` (default `ExecConfig()`): workers=1 with executor="process" runs in this
    process (models kept; torch threads as `execution.threads` sets them, else untouched);
    otherwise `workers` runs at a time, each with `execution.threads` (default cores // workers)
    torch threads. on_error="record" yields failed runs (a warning counts
    them at the end); "raise" raises `RunFailed` with the run's traceback at the first failure
    and cancels the runs not started.
    """
    how = execution or ExecConfig()
    workers, executor, gpus_per_run = how.workers, how.executor, how.gpus_per_run
    parallel = how.parallel
    prefixes = [spec.train.checkpoint for spec in specs if spec.train.checkpoint]
    shared = sorted({p for p in prefixes if prefixes.count(p) > 1})
    if parallel and shared:
        raise ValueError(
            f"TrainConfig.checkpoint {shared[0]!r} is shared by {prefixes.count(shared[0])} "
            "parallel runs: they would write it at once; give each run its own prefix, run "
            "with workers=1, or checkpoint=None"
        )
    if parallel:  # no training bars from workers: one bar over the runs; idle workers none
        specs = [replace(spec, train=replace(spec.train, progress=False)) for spec in specs]
        workers = max(1, min(workers, len(specs)))
    if executor == "ray" and gpus_per_run is None:
        cuda = any(str(spec.train.device).startswith("cuda") for spec in specs)
        gpus_per_run = 1 / workers if cuda else 0
    mode = executor if parallel else "inline"
    gone = finished_elsewhere or (lambda index: False)
    return _stream(specs, bundle, how, mode, workers, gpus_per_run, progress, desc, skipped, gone)


def _stream(
    specs, bundle, how: ExecConfig, mode, workers, gpus_per_run, progress, desc, skipped, gone
) -> Iterator[RunOutcome]:
    from tqdm.auto import tqdm

    if mode == "inline":  # how.threads None: this process's own
        outcomes = _in_process(specs, bundle, how.threads, gone)
    else:
        threads = how.threads or threads_per_worker(workers)  # a worker's
        if mode == "process":
            outcomes = _processes(specs, bundle, workers, threads, gone)
        else:
            outcomes = _ray(specs, bundle, workers, threads, gpus_per_run, how.ray_address, gone)
    labels = [f"{spec.name} seed {spec.seed}" for spec in specs]
    bar = tqdm(total=skipped + len(specs), initial=skipped, desc=desc, disable=not progress)
    failed = 0
    try:
        for out in outcomes:
            if not out.ok and not out.taken and how.on_error == "raise":
                raise RunFailed(f"{labels[out.index]}: {out.error}\n{out.traceback}")
            failed += not out.ok and not out.taken
            bar.set_postfix_str(labels[out.index] + (f", {failed} failed" if failed else ""))
            bar.update()
            yield out
    finally:
        bar.close()
        outcomes.close()
    if failed:
        warnings.warn(
            f"{failed} of {len(specs)} runs failed; their rows carry 'error' and 'traceback'",
            RuntimeWarning,
            stacklevel=2,
        )
