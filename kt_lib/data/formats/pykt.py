"""pykt's CSV layout: one row per student (or per window), comma-joined list columns."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from ..dataset import KTDataset
from .lines import _vocab
from .tokens import (
    PathLike,
    _check_ids,
    _check_K,
    _check_responses,
    _int_column,
    _nonempty,
    _read_csv,
    _read_json,
    _students,
    _to_ints,
    _Where,
)

_PYKT_INTS = ("concepts", "responses", "questions", "selectmasks")  # list columns parsed as ints
_PYKT_LISTS = _PYKT_INTS + ("timestamps", "usetimes")  # list columns whose lengths must agree


def _declared_K(keys: dict, K: int | None, key_path: Path) -> int:
    """The K to read with: the one passed, else the one `keyid2idx.json` declares, else 2."""
    declared = keys.get("K") if isinstance(keys, dict) else None
    if declared is not None and (isinstance(declared, bool) or not isinstance(declared, int)):
        raise ValueError(f"{key_path}: K = {declared!r} is not an integer")
    if K is not None and declared is not None and K != declared:
        raise ValueError(
            f"K={K} was passed, but {key_path} declares K={declared} (the responses' categories); "
            "leave K out to read the declared one"
        )
    K = K if K is not None else declared if declared is not None else 2
    _check_K(K)
    return K


def read_pykt(
    data_dir: PathLike,
    which: str = "train_valid",
    num_c: int | None = None,
    num_pid: int | None = None,
    K: int | None = None,
    uid_offset: int = 0,
    name: str | None = None,
    n_folds: int = 5,
) -> KTDataset:
    """Read a pykt CSV (`train_valid.csv` / `test.csv`, 0-based ids, -1 padding dropped).

    `fold` must lie in 0..n_folds-1 in `train_valid*.csv` (every student there is in a fold) and
    in -1..n_folds-1 elsewhere (-1: held out). `K=None`: the `K` that `keyid2idx.json` declares
    (`kt prepare` writes it; ordinal folders such as OULAD's need it), else 2; a `K` passed that
    disagrees with the declared one is an error.
    """
    data_dir = Path(data_dir)
    path = data_dir if data_dir.is_file() else data_dir / f"{which.removesuffix('.csv')}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{data_dir}: no pykt file {path.name!r} (which={which!r})")
    key_path = path.parent / "keyid2idx.json"
    keys = _read_json(key_path) if key_path.is_file() else {}
    K = _declared_K(keys, K, key_path)
    df, lines = _read_csv(path, ("concepts", "responses"), "student rows")
    toks, counts = {}, {}
    for c in (c for c in _PYKT_LISTS if c in df.columns):
        rows = [s.strip().removesuffix(",").split(",") if s.strip() else [] for s in df[c]]
        toks[c], counts[c] = rows, np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        if (bad := counts[c] != counts["concepts"]).any():
            i = int(np.argmax(bad))
            n_c = counts["concepts"][i]
            raise ValueError(
                f"{path} line {lines[i]}: found {counts[c][i]} {c}, but {n_c} concepts"
            )
    offsets = np.concatenate([[0], np.cumsum(counts["concepts"])])
    where = _Where(path, lines, offsets)
    v = {
        c: _to_ints(list(itertools.chain.from_iterable(toks[c])), where, c)
        for c in _PYKT_INTS
        if c in toks
    }
    # pykt pads chunked sequences with -1 (and selectmask -1): padding, not data. Padding has no
    # answer either: a -1 concept beside a real response would drop an interaction unseen.
    where.first(
        (v["concepts"] == -1) & (v["responses"] != -1),
        v["responses"],
        "concept -1 (pykt's padding) with response {v}: an interaction without its concept",
    )
    pad = v["concepts"] == -1
    # padding ends a row: a -1 step before a real one is a gap in the log, not padding
    same_row = np.repeat(np.arange(len(counts["concepts"])), counts["concepts"])
    gap = np.zeros_like(pad)
    gap[:-1] = pad[:-1] & ~pad[1:] & (same_row[:-1] == same_row[1:])
    where.first(gap, v["concepts"], "concept {v} (pyKT's padding) before a real step: padding "
                "ends a row, a gap inside a student's log is not padding")  # fmt: skip
    if "selectmasks" in v:
        # pyKT's *_window_sequences.csv mark a window's context steps (scored in an earlier
        # window) with selectmask -1: each row there is a window, not a student
        where.first(~pad & (v["selectmasks"] == -1), v["concepts"],
                    "selectmask -1 beside concept {v}: a context step of pyKT's window layout "
                    "(*_window_sequences.csv, one row a window); read the file with one row a "
                    "student (train_valid.csv, test.csv)")  # fmt: skip
    keep = ~pad
    vocab = {}
    for c, declared, key in (("concepts", num_c, "num_c"), ("questions", num_pid, "num_pid")):
        if c not in v:
            continue
        if declared is None and isinstance(keys.get(c), dict):
            declared, src = len(keys[c]), f"{key}={len(keys[c])} (from {key_path.name})"
        else:
            src = f"{key}={declared}"
        ids = np.where(keep, v[c], 0)
        _check_ids(ids, where, c.removesuffix("s") + " id", 0, declared, src)
        vocab[c] = _vocab(declared, ids)
    _check_responses(np.where(keep, v["responses"], 0), where, K)
    folds = None
    if "fold" in df.columns:
        folds = _int_column(df, "fold", _Where(path, lines))
        # A train_valid student outside the folds would be in train for every fold.
        lo = 0 if path.stem.startswith("train_valid") else -1
        msg = f"fold '{{v}}' not in {lo}..{n_folds - 1} (n_folds={n_folds})"
        _Where(path, lines).first((folds < lo) | (folds >= n_folds), folds, msg)
    new_offsets = np.concatenate([[0], np.cumsum(keep)])[offsets]
    cut = new_offsets[1:-1]
    q, r = np.split(v["concepts"][keep], cut), np.split(v["responses"][keep], cut)
    pid = np.split(v["questions"][keep], cut) if "questions" in v else None
    rows = _nonempty(path, np.diff(new_offsets), lines)
    students = _students(rows, uid_offset, q, r, pid, folds)
    meta = {}
    if "uid" in df.columns:
        uids = df["uid"].astype(str).str.strip()
        if (dup := uids.duplicated()).any():
            i = int(np.argmax(dup.to_numpy()))
            j = int(np.argmax((uids == uids.iloc[i]).to_numpy()))
            raise ValueError(
                f"{path} line {lines[i]}: uid {uids.iloc[i]!r} again (first on line {lines[j]}): "
                "pyKT's *_sequences.csv files cut a student into rows of 200 steps; read the "
                "file with one row a student (train_valid.csv, test.csv)"
            )
        meta["raw_uid"] = dict(enumerate(df["uid"].to_numpy()[rows].tolist(), start=uid_offset))
    return KTDataset(
        students,
        num_c=vocab["concepts"],
        num_pid=vocab.get("questions", 0),
        K=K,
        name=name or f"{path.parent.name}/{path.stem}",
        source=str(path),
        meta=meta,
    )
