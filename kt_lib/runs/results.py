"""The results store: files of `RunRecord` rows, read as one table, merged by `run_key` under a
file lock with atomic rewrites (several processes may fill one file).

A results file is {"args", "protocol", "results": [row]}: `kt run` writes
one per call (its args name the data); the leaderboard and the studies keep one per plan
(results/<study>.json), each row naming its own dataset, fold, preset and run_key.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from ..fileio import locked, save_json
from .data import SYNTHETIC, dataset_name
from .record import NESTED


def expand(paths: str | Path | Iterable[str | Path], root: str | Path | None = None) -> list[Path]:
    """Results files from paths and glob patterns (a string with * ? or [, e.g.
    "results/*.json", in sorted order); relative ones are read under `root` (default: the
    current folder). A pattern that matches nothing is an error."""
    base = Path(root) if root is not None else Path()
    out = []
    for p in [paths] if isinstance(paths, (str, Path)) else list(paths):
        full = base / p  # an absolute p stays itself
        if isinstance(p, str) and any(c in p for c in "*?["):
            found = sorted(Path(f) for f in glob.glob(str(full)))
            if not found:
                raise ValueError(f"no results file matches {str(full)!r}")
            out += found
        else:
            out.append(full)
    return out


def load_results(
    paths: str | Path | Iterable[str | Path], root: str | Path | None = None
) -> pd.DataFrame:
    """One row per run from one or more results files (paths or glob patterns, relative ones
    under `root`: see `expand`), with dataset, fold, preset and file."""
    paths = expand(paths, root)
    if not paths:
        raise ValueError("load_results needs at least one results file")
    rows = []
    for path in paths:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a results file ({exc})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ValueError(
                f"{path}: not a `kt run` results file (expected a mapping with "
                "'args', 'protocol' and a 'results' list)"
            )
        args = data.get("args") or {}
        for r in data["results"]:
            # a file of one experiment keeps dataset, fold and preset in its args; a leaderboard
            # file (several datasets) keeps them in each row, and the row wins
            row = dict(
                dataset=dataset_name(args.get("data_dir"), args.get("data_format", SYNTHETIC)),
                data_format=args.get("data_format", SYNTHETIC),
                fold=args.get("fold"),
                preset=args.get("preset"),
                protocol=data.get("protocol", ""),
            )
            row.update({k: v for k, v in r.items() if k not in NESTED})
            row["file"] = path.name
            rows.append(row)
    first = ["dataset", "model", "fold", "seed"]
    table = pd.DataFrame(rows)
    return table[[c for c in first if c in table] + [c for c in table if c not in first]]


def read_runs(path: str | Path) -> list[dict]:
    """Rows of a leaderboard results file ([] when it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        rows = data["results"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: cannot resume from this results file ({exc}); move it away to start afresh"
        ) from exc
    if not isinstance(rows, list) or any(not isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: 'results' must be a list of rows to resume from")
    return rows


def finished_runs(path: str | Path | None) -> dict[str, dict]:
    """The rows of `path` that a resumed plan skips: run_key -> row, failed runs left out."""
    rows = read_runs(path) if path is not None else []
    return {r["run_key"]: r for r in rows if r.get("run_key") and not r.get("error")}


def _save_rows(path: Path, rows: list[dict], kind: str = "leaderboard") -> None:
    """Rewrite a results file with `rows` (atomically; the caller holds its lock)."""
    save_json(path, {"args": {"kind": kind}, "protocol": "", "results": rows})


def add_runs(path: str | Path, new_rows: Iterable[dict]) -> int:
    """Merge rows into a leaderboard results file by `run_key` (a new row replaces one with the
    same key, except that a failed row never replaces a finished one), under a file lock and with
    an atomic rewrite, so several processes can fill one file. Returns the number of rows in
    the file."""
    path = Path(path)
    with locked(path):
        merged = {}
        for r in [*read_runs(path), *new_rows]:
            key = r.get("run_key") or f"unkeyed-{len(merged)}"
            if r.get("error") and key in merged and not merged[key].get("error"):
                continue  # a failed copy never replaces a finished run (two processes, a merge)
            merged[key] = r
        rows = list(merged.values())
        _save_rows(path, rows)
    return len(rows)


def add_missing(path: str | Path, new_rows: Iterable[dict]) -> list[dict]:
    """Add to a leaderboard results file, under its lock, the finished rows whose `run_key` it
    has no finished row of (a failed row there is replaced); returns the rows added. Unlike
    `add_runs`, a row the file holds is never replaced, so a run that finished here meanwhile
    stays as it was written."""
    path = Path(path)
    with locked(path):
        rows = read_runs(path)
        have = {r.get("run_key") for r in rows if not r.get("error")}
        added, seen = [], set()
        for r in new_rows:
            key = r.get("run_key")
            if key and not r.get("error") and key not in have | seen:
                added.append(r)
                seen.add(key)
        if added:
            kept = [r for r in rows if r.get("run_key") not in seen]  # failed rows of those keys
            _save_rows(path, kept + added)
    return added


def merge_files(files: Iterable[str | Path], into: str | Path) -> int:
    """Merge the leaderboard runs of `files` into `into` by run_key (e.g. runs filled in
    separate files, into a profile's resume file); returns its number of rows."""
    rows = [r for f in files if Path(f) != Path(into) for r in read_runs(f)]
    if any(not r.get("run_key") for r in rows):
        raise ValueError("merging takes leaderboard files (rows with a run_key) only")
    return add_runs(into, rows)


def retire_runs(
    path: str | Path, retired: str | Path, select: Callable[[dict], bool], note: dict
) -> list[dict]:
    """Move the rows of `path` for which `select(row)` holds into `retired` (a results file of
    the same layout), each with `row["retired"] = note`, and return them. For rows that a later
    change of the code made wrong while their run keys stayed the same (their settings did not
    change): once retired, a resumed plan trains them again. Both files are rewritten atomically
    under their locks, the retired file first: a cut between the writes leaves a row in both
    files (retiring it again is then a no-op for the retired file), never in neither."""
    path, retired = Path(path), Path(retired)
    with locked(path), locked(retired):
        rows = read_runs(path)
        chosen = [select(r) for r in rows]
        moved = [r for r, c in zip(rows, chosen, strict=True) if c]
        if not moved:
            return []
        # one row per (key, date): a run retired again after a cut is not doubled, two runs
        # of one setting (retired, rerun, retired again) are both kept
        old = {(r.get("run_key"), r.get("date")): r for r in read_runs(retired)}
        old.update({(r.get("run_key"), r.get("date")): {**r, "retired": note} for r in moved})
        _save_rows(retired, list(old.values()), kind="retired")
        _save_rows(path, [r for r, c in zip(rows, chosen, strict=True) if not c])
    return moved
