"""Parked epoch checkpoints: a study run longer than a session crosses sessions through git.

A study's runs write epoch checkpoints under `runs/checkpoints/<study>/` (git-ignored), so a run
killed mid-way resumes from its last finished epoch when the study is started again on the same
checkout. A session that ends loses that folder with its machine; a run that needs more CPU-hours
than a session has (GKT on ASSIST2015: about 25 epochs of 10-17 minutes) would restart from epoch
0 each time and never finish. `park` copies each unfinished run's `_last` and `_best` pairs into
`results/inflight/<study>/` (committed with the results; a size cap keeps large models out), and
drops the parked copies of runs whose row has landed; `unpark`, called by `studies.run` before
it trains, puts back every parked run that this checkout has at an older epoch or not at all.

    python -m kt_lib.runs.studies park baselines     # before the session ends, then commit

A pair is copied whole or not at all: its `.pt` bytes are checked against the SHA-256 its `.json`
records (a study writing the pair meanwhile is read again), and both files are written atomically,
`.pt` first, so a reader of the parked folder finds a whole pair at any instant.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

from ..checkpoint import remove_checkpoint
from ..fileio import atomic_write_bytes, load_json, sha256_bytes
from .leaderboard import checkpoint_name
from .study import CHECKPOINTS, RESULTS

PARKED = RESULTS / "inflight"  # committed: the epoch checkpoints of runs still in flight
KINDS = ("last", "best")  # the pairs a resumed run reads (train.fit: `_last`, then `_best`)
MAX_MB = 1.0  # a parked run's files at most this size, MiB: a tracked file stays under 1 MiB
# (git holds every parked version; a larger run stays behind, and `park` names it)


@dataclasses.dataclass(frozen=True)
class Parked:
    """One run's epoch checkpoint, as `park` found or wrote it."""

    name: str  # the checkpoint prefix's file name (the run key, sanitised)
    epoch: int  # the last finished epoch
    best_epoch: int
    best_metric: float
    mb: float  # size of its files
    epoch_seconds: float = math.nan  # mean training seconds of its finished epochs
    waited: int = 0  # epochs since its best one (early stopping's count)

    def line(self) -> str:
        pace = (
            ""
            if math.isnan(self.epoch_seconds)
            else f", {self.epoch_seconds / 60:.1f} min an epoch"
        )
        return (
            f"{self.name}: epoch {self.epoch} finished (best {self.best_metric:.4f} at epoch "
            f"{self.best_epoch}{pace}), {self.mb:.2f} MB"
        )


def _read_pair(prefix: Path, tries: int = 5) -> tuple[bytes, bytes] | None:
    """(.pt bytes, .json bytes) of a consistent pair at `prefix`, None if there is none. A pair
    being rewritten while it is read (a study still training) is read again."""
    pt, js = prefix.with_suffix(".pt"), prefix.with_suffix(".json")
    for _ in range(tries):
        if not (pt.is_file() and js.is_file()):
            return None
        meta_bytes = js.read_bytes()
        data = pt.read_bytes()
        try:
            expected = json.loads(meta_bytes).get("pt_sha256")
        except ValueError:
            expected = None  # a .json mid-write: read again
        if expected is not None and sha256_bytes(data) == expected:
            return data, meta_bytes
        time.sleep(0.2)
    raise ValueError(
        f"{pt} does not match {js} after {tries} reads: the pair is inconsistent or corrupted"
    )


def _runs(folder: Path) -> dict[str, Parked]:
    """The runs with a `_last` pair in `folder`, by checkpoint name."""
    out = {}
    for js in sorted(folder.glob("*_last.json")) if folder.is_dir() else []:
        name = js.name[: -len("_last.json")]
        meta = load_json(js)
        files = [folder / f"{name}_{k}{s}" for k in KINDS for s in (".pt", ".json")]
        mb = sum(f.stat().st_size for f in files if f.is_file()) / 2**20
        best = meta.get("best_metric")
        seconds = [h["train_seconds"] for h in meta.get("history", []) if "train_seconds" in h]
        out[name] = Parked(
            name,
            int(meta["epoch"]),
            int(meta.get("best_epoch", -1)),
            math.nan if best is None else float(best),
            mb,
            sum(seconds) / len(seconds) if seconds else math.nan,
            int(meta.get("waited", 0)),
        )
    return out


def _copy_run(name: str, src: Path, dst: Path) -> None:
    """Copy the run's pairs from `src` to `dst` (`.pt` before `.json` in each)."""
    pairs = {k: _read_pair(src / f"{name}_{k}") for k in KINDS}
    for kind, pair in pairs.items():
        if pair is None:
            continue
        data, meta = pair
        atomic_write_bytes(dst / f"{name}_{kind}.pt", lambda f, d=data: f.write(d))
        atomic_write_bytes(dst / f"{name}_{kind}.json", lambda f, m=meta: f.write(m))


def _remove_run(name: str, folder: Path) -> None:
    for kind in KINDS:
        for suffix in (".pt", ".json"):
            (folder / f"{name}_{kind}{suffix}").unlink(missing_ok=True)


def drop(study: str, name: str, parked_root: str | Path = PARKED) -> None:
    """Remove run `name`'s parked pairs of `study` (none: nothing)."""
    _remove_run(name, Path(parked_root) / study)


def parked(study: str, parked_root: str | Path = PARKED) -> list[Parked]:
    """The runs parked for `study`."""
    return list(_runs(Path(parked_root) / study).values())


def in_flight(study: str, checkpoints: str | Path = CHECKPOINTS) -> list[Parked]:
    """The unfinished runs of `study` with an epoch checkpoint in this checkout."""
    return list(_runs(Path(checkpoints) / study).values())


def held(study: str, checkpoints=CHECKPOINTS, parked_root=PARKED) -> set[str]:
    """The names of `study`'s runs with an epoch checkpoint here or parked."""
    here = {r.name for r in in_flight(study, checkpoints)}
    return here | {r.name for r in parked(study, parked_root)}


def discard(study: str, name: str, checkpoints=CHECKPOINTS, parked_root=PARKED) -> None:
    """Remove run `name`'s epoch checkpoint of `study` here and its parked pairs (a run whose
    row was retired or adopted must not resume from them)."""
    remove_checkpoint(Path(checkpoints) / study / name)
    drop(study, name, parked_root)


def park(
    study: str,
    finished: set[str],
    checkpoints: str | Path = CHECKPOINTS,
    parked_root: str | Path = PARKED,
    max_mb: float = MAX_MB,
    planned: set[str] | None = None,
) -> tuple[list[Parked], list[Parked]]:
    """Park the epoch checkpoint of every unfinished run of `study` whose files are at most
    `max_mb`, and remove the parked copies of the runs named in `finished` (checkpoint names of
    the runs whose row is in the results file) or, given `planned` (the checkpoint names of the
    study's runs), not in it (a run whose key changed: its parked epochs would never resume). A
    parked run that this checkout holds at an older epoch keeps its parked copy. Returns (parked,
    too large to park)."""
    src, dst = Path(checkpoints) / study, Path(parked_root) / study
    here, there = _runs(src), _runs(dst)
    for name in there:
        if name in finished or (planned is not None and name not in planned):
            _remove_run(name, dst)
    done, skipped = [], []
    for name, run in here.items():
        if name in finished or (planned is not None and name not in planned):
            continue
        if run.mb > max_mb:
            skipped.append(run)
            continue
        if name not in there or there[name].epoch < run.epoch:
            _copy_run(name, src, dst)
        done.append(run)
    return done, skipped


def unpark(
    study: str, checkpoints: str | Path = CHECKPOINTS, parked_root: str | Path = PARKED
) -> list[Parked]:
    """Put back the parked runs of `study` that this checkout lacks or holds at an older epoch;
    returns them. A parked run that has finished meanwhile is dropped by the study's plan
    (`run_plan` removes the epoch checkpoint of a run whose row is in the results file)."""
    src, dst = Path(parked_root) / study, Path(checkpoints) / study
    here, there = _runs(dst), _runs(src)
    back = []
    for name, run in there.items():
        if name not in here or here[name].epoch < run.epoch:
            _remove_run(name, dst)  # no stale `_best` beside the parked `_last`
            _copy_run(name, src, dst)
            back.append(run)
    return back


def price_in_flight(
    study: str,
    epochs: int,
    left: list[dict],
    checkpoints: str | Path = CHECKPOINTS,
    parked_root: str | Path = PARKED,
    patience: int | None = None,
) -> None:
    """Give each plan entry of `left` whose run has an epoch checkpoint (this checkout's or
    parked, whichever is further: the one a run resumes from) an "in_flight" cost: the seconds
    its epochs left to the `epochs` cap take at its own pace (mean training seconds of its
    finished epochs; early stopping may end it sooner), none for a run whose early stopping has
    already ended it (`waited` >= `patience`: killed before its row landed); an entry's own
    "epochs" (a variant's cap) stands for `epochs`."""
    flying: dict[str, Parked] = {}
    for r in [*parked(study, parked_root), *in_flight(study, checkpoints)]:
        if r.name not in flying or flying[r.name].epoch < r.epoch:
            flying[r.name] = r
    for p in left:
        r = flying.get(checkpoint_name(p["key"]))
        if r is not None and not math.isnan(r.epoch_seconds):
            ended = patience is not None and r.waited >= patience
            todo = 0 if ended else max(p.get("epochs", epochs) - r.epoch - 1, 0)
            p["in_flight"] = todo * r.epoch_seconds
