"""Shared checks of the raw-dataset tests: miniature raw files and the pykt / 3/4-line agreement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kt_lib.data import KTDataset
from kt_lib.data.prepare import PrepareResult


def write_rows(path: Path, header: list[str], rows: list[dict], sep: str = ",", enc="utf-8"):
    """A raw file with `header`; a row gives the cells it names, the others stay empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [sep.join(header)]
    for row in rows:
        if unknown := set(row) - set(header):
            raise KeyError(f"not in the header: {unknown}")
        lines.append(sep.join(str(row.get(c, "")) for c in header))
    path.write_bytes(("\n".join(lines) + "\n").encode(enc))
    return path


def record(result: PrepareResult) -> dict:
    return json.loads((result.out_dir / "prepare.json").read_text(encoding="utf-8"))


def uid_names(result: PrepareResult) -> dict[str, str]:
    """pykt's student index (as text) -> raw student id, from keyid2idx.json."""
    keys = json.loads((result.pykt_dir / "keyid2idx.json").read_text(encoding="utf-8"))
    return {str(i): raw for raw, i in keys["uid"].items()}


def raw_uids(ds: KTDataset, names: dict[str, str] | None = None) -> list[str]:
    """Raw student ids: the 4-line header's, or pykt's `uid` index mapped through `names`."""
    raw = ds.meta.get("raw_uid", {})
    ids = [str(raw.get(s.uid, s.uid)) for s in ds.students]
    return [names[u] for u in ids] if names else ids


def sequences(ds: KTDataset, names: dict[str, str] | None = None) -> dict[str, tuple]:
    """Raw uid -> (skills, responses, problems) of each student."""
    return {
        u: (s.q.tolist(), s.r.tolist(), None if s.pid is None else s.pid.tolist())
        for u, s in zip(raw_uids(ds, names), ds.students, strict=True)
    }


def pykt_rows(result: PrepareResult):
    """train_valid.csv and test.csv as one frame of text indexed by the raw student id."""
    names = uid_names(result)
    frames = [pd.read_csv(result.pykt_dir / f, dtype=str) for f in ("train_valid.csv", "test.csv")]
    rows = pd.concat(frames, ignore_index=True)
    return rows.set_index(rows["uid"].map(names))


def assert_layouts_agree(result: PrepareResult, n_folds: int) -> None:
    """Every fold read from pykt CSV and from the 3/4-line files: same students, same data; the
    line files' folds are numbered 1..n, as `fold_plan` plans them for those layouts."""
    from kt_lib.runs.plan import fold_plan

    name = result.line_dir.name
    planned = [fold for fold, _ in fold_plan(name, n_folds, [0], str(result.line_dir))]
    assert planned == list(range(1, n_folds + 1)), planned
    for k in planned:
        assert len(list(result.line_dir.glob(f"*_train{k}.csv"))) == 1
    assert not list(result.line_dir.glob("*_train0.csv"))
    for fold in range(n_folds):
        a, b = result.bundle(fold, "pykt"), result.bundle(fold, "lines")
        assert (a.num_c, a.num_pid, a.K) == (b.num_c, b.num_pid, b.K)
        for x, y in ((a.train, b.train), (a.valid, b.valid), (a.test, b.test)):
            assert len(x) == len(y) > 0
            assert x.num_interactions == y.num_interactions
            for s, t in zip(x.students, y.students, strict=True):
                np.testing.assert_array_equal(s.q, t.q)
                np.testing.assert_array_equal(s.r, t.r)
                if s.pid is not None or t.pid is not None:
                    np.testing.assert_array_equal(s.pid, t.pid)
            assert raw_uids(x, uid_names(result)) == raw_uids(y)  # `n,raw_uid` headers


def all_students(result: PrepareResult) -> dict[str, tuple]:
    """Raw uid -> sequence over train_valid and test (fold 0's bundle read from pykt CSV)."""
    b, names = result.bundle(0, "pykt"), uid_names(result)
    out = {}
    for ds in (b.train, b.valid, b.test):
        out.update(sequences(ds, names))
    return out


def check_counts(result: PrepareResult, n_test_frac: float = 0.2) -> None:
    """Counts in prepare.json agree with the files."""
    c = record(result)["counts"]
    seqs = all_students(result)
    assert c["students"] == len(seqs)
    assert c["interactions"] == sum(len(q) for q, _, _ in seqs.values())
    assert c["test_students"] == int(c["students"] * n_test_frac)
    assert sum(c["folds"]) == c["train_valid_students"] == c["students"] - c["test_students"]
    assert c["rows_read"] == c["rows"] + sum(c["dropped"].values()) + c["dropped_rows_short"]
