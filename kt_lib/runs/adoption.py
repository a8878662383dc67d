"""One run, trained once, in every study that plans it: `kt study adopt NAME`.

Two studies may plan the same run: the leaderboard's ASSIST2015 fold 0 of a baseline and the
baselines study's row, the leaderboard's DTransformer folds and the simakt study's. The run key
says so (dataset, model, fold, seed, preset and the hash of every setting that changes the
numbers: `plan.run_key`), so a run one study finished is copied into the other's results file,
with `adopted_from`, instead of being trained again. `studies` below is the registry of studies
by name (`kt_lib.runs.studies.STUDIES`), passed in so that this module imports none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from ..provenance import contains, device_kind
from .leaderboard import checkpoint_name
from .parking import PARKED, discard, held
from .record import stale_preset_rows, utc
from .results import add_missing, read_runs
from .study import CHECKPOINTS, DATA_ROOT, Study


def adoptable(
    study: Study, studies: Mapping[str, Study], data_root=DATA_ROOT, path=None, sources=None,
    planned: set[str] | None = None,
) -> list[dict]:  # fmt: skip
    """The finished rows of the other studies (`sources`: their names; None: all of `studies`)
    that `study` plans under the same run key and its file (`path`, default its own) has no
    finished row of, each with `adopted_from` (the study that trained it); the newest where
    several hold one (`planned`: the study's run keys where the caller has its plan). Left out:
    - a key any study has retired, unless the row's commit holds every retirement's commit of
      that key (git ancestry: it ran the fixed code; `retire` dropped the old epoch
      checkpoints): a row merely dated after a retirement may have started before the fix;
    - a row made on another kind of device (CPU, GPU) than every run the study already has in
      its cell: `precision` None resolves to fp32 on a CPU and tf32 on a GPU under one key, and
      a cell whose runs are on one kind stays so (an empty cell takes either);
    - a row made under another version of its preset (`stale_preset_rows`): retire it there."""
    names = list(studies) if sources is None else list(sources)
    for n in names:
        if n not in studies:  # a misspelt name is refused, not matched by nothing
            raise ValueError(f"--from {n}: no such study; the studies are {sorted(studies)}")
        if n == study.name and sources is not None:
            raise ValueError(f"--from {n}: a study adopts from the others, not from itself")
    if planned is None:
        planned = {p["key"] for p in study.plan(data_root)}
    mine = [r for r in read_runs(Path(path or study.path)) if not r.get("error")]
    have = {r.get("run_key") for r in mine}
    kinds: dict[tuple, set[str]] = {}
    for r in mine:
        kinds.setdefault(_cell(r), set()).add(device_kind(r.get("device_name")))
    retired: dict[str, set] = {}  # key -> the commits its retirements were made at
    for s in studies.values():
        for r in read_runs(s.retired_path):
            retired.setdefault(r.get("run_key"), set()).add((r.get("retired") or {}).get("commit"))
    best: dict[str, dict] = {}
    for n in (n for n in names if n != study.name):
        rows = read_runs(studies[n].path)
        stale = {id(r) for r in stale_preset_rows(rows)}
        for r in rows:
            key, kind = r.get("run_key"), device_kind(r.get("device_name"))
            if r.get("error") or key not in planned or key in have or id(r) in stale:
                continue
            if key in retired and not all(contains(r.get("commit"), c) for c in retired[key]):
                continue
            if kind not in kinds.get(_cell(r), {kind}):
                continue
            if key not in best or _when(r) > _when(best[key]):
                best[key] = {**r, "adopted_from": r.get("adopted_from", n)}
    return sorted(best.values(), key=lambda r: r["run_key"])


def adopt(
    study: Study, studies: Mapping[str, Study], data_root=DATA_ROOT, path=None, sources=None,
    dry_run: bool = False, checkpoints=CHECKPOINTS, parked_root=PARKED,
) -> tuple[list[dict], list[str]]:  # fmt: skip
    """Copy `adoptable`'s rows into the study's file (`results.add_missing`: under its lock,
    never over a finished row) and drop their epoch checkpoints here and parked
    (results/inflight/: tracked files); returns (the rows added, the dropped checkpoints'
    names). `dry_run`: the rows it would add; nothing written or dropped."""
    rows = adoptable(study, studies, data_root, path, sources)
    if dry_run or not rows:
        return rows, []
    added = add_missing(Path(path or study.path), rows)
    names = {checkpoint_name(r["run_key"]) for r in added}
    dropped = sorted(names & held(study.name, checkpoints, parked_root))
    for name in dropped:
        discard(study.name, name, checkpoints, parked_root)
    return added, dropped


def adopted_copies(name: str, keys, studies: Mapping[str, Study]) -> dict[str, int]:
    """{study: rows} of the copies of `name`'s runs under `keys` that other studies adopted:
    what retiring those runs from `name` leaves behind elsewhere."""
    keys, out = set(keys), {}
    for s in studies.values():
        n = sum(
            r.get("adopted_from") == name and r.get("run_key") in keys
            for r in read_runs(s.path)
            if s.name != name
        )
        if n:
            out[s.name] = n
    return out


def _cell(row: dict) -> tuple:
    return row.get("dataset"), row.get("model")


def _when(row: dict) -> datetime:
    """A row's date (UTC; a row without one is older than any)."""
    return utc(row["date"]) if row.get("date") else datetime.min.replace(tzinfo=UTC)
