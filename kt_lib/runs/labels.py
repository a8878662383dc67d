"""A tuning budget's labels searched side by side: one process per label, at most `workers` at a
time (`kt budget search NAME --workers N`).

Each label's search is independent (its own Optuna study in the budget's storage, its own lock
and trial checkpoints, its own entry of the committed record, written under a file lock), so
labels can run at once: on a machine with spare cores, or several small trainings sharing one
GPU. Each child is `kt budget search NAME --labels LABEL ...` with the parent's other options,
one torch thread per core it gets (cores // workers, unless OMP_NUM_THREADS is set), its output
in `runs/logs/budget_<NAME>/<LABEL>.log` (appended: a resumed search continues its log), and it
ends with the parent (`execute.exit_with_parent`), so a killed search leaves no orphan training.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ..provenance import ROOT

LOGS = ROOT / "runs" / "logs"


def child_argv(budget: str, label: str, options: list[str]) -> list[str]:
    """The command of one label's search (this interpreter, this package)."""
    return [sys.executable, "-m", "kt_lib.runs.budget", "search", budget, "--labels", label,
            *options, "--parent", str(os.getpid())]  # fmt: skip


def run_side_by_side(
    commands: dict[str, list[str]],
    workers: int,
    logs: Path = LOGS,
    threads: int | None = None,
    poll: float = 1.0,
) -> dict[str, int]:
    """Run `commands` (label -> argv), at most `workers` at once, each writing to
    `logs/<label>.log`; -> each label's exit status. A label that fails is reported and the
    others go on."""
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        n = threads or max(1, (os.cpu_count() or 1) // max(1, workers))
        env["OMP_NUM_THREADS"] = str(n)
    queue, running, status = list(commands), {}, {}
    try:
        while queue or running:
            while queue and len(running) < workers:
                label = queue.pop(0)
                log = open(logs / f"{label}.log", "a")  # noqa: SIM115 (closed when it ends)
                # its own session: a terminal's Ctrl-C reaches the parent alone, which stops
                # the children below (SIGTERM: their trials stay RUNNING, to be resumed)
                proc = subprocess.Popen(commands[label], stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)  # fmt: skip
                running[label] = (proc, log)
                print(f"{label}: started (pid {proc.pid}, log {log.name})", flush=True)
            for label, (proc, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                status[label] = proc.returncode
                del running[label]
                end = "ended" if proc.returncode == 0 else f"failed ({proc.returncode})"
                print(f"{label}: {end}, log {log.name}", flush=True)
            time.sleep(poll)
    finally:  # interrupted: no search goes on without its parent
        for proc, _ in running.values():
            proc.terminate()
        for proc, log in running.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    return status


def search_side_by_side(budget: str, labels: list[str], options: list[str], workers: int) -> None:
    """`kt budget search BUDGET --workers N`: each label's search in its own process; exits
    naming the labels that failed, if any."""
    commands = {label: child_argv(budget, label, options) for label in labels}
    status = run_side_by_side(commands, workers, LOGS / f"budget_{budget}")
    failed = [label for label, code in status.items() if code]
    if failed:
        sys.exit(f"budget {budget}: the search of {failed} failed (see their logs)")
