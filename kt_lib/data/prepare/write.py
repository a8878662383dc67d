"""Writing a prepared dataset: pykt CSV, the 3/4-line layout and `prepare.json`, each atomically.

Layout of OUT_DIR:
- `pykt/train_valid.csv` (fold 0..k-1), `pykt/test.csv` (fold -1, `cidxs`), `pykt/keyid2idx.json`:
  pykt-toolkit's un-chunked files (columns fold, uid, questions, concepts, responses, timestamps,
  usetimes, is_repeat where the data has them; 0-based ids, `uid` included, as pykt writes them;
  `keyid2idx.json` maps the raw ids, unescaped, to them, and declares `K`, the responses'
  categories, which `read_pykt` reads when no K is passed);
- `line4/` (datasets with problem ids) or `line3/` (without): `{name}_train.csv` (all train_valid
  students), `{name}_test.csv`, and per fold `{name}_train{k}.csv` / `{name}_valid{k}.csv` for
  k = 1..5 (pykt's fold k - 1; the DKVMN and AKT folders' numbering, which `fold_plan`
  expects); 1-based ids, the header line `n,raw_uid` (both layouts; `read_line3`/`read_line4`
  keep the raw id in `meta["raw_uid"]`), written by kt_lib.data.formats' `write_line4` /
  `write_line3`;
- `prepare.json`: the inputs with their SHA-256, the options, the choices and the counts.

Each file goes to a temp file beside it and is renamed into place, so a reader never sees half of
one; `prepare.json` is written last, so its presence says the folder is complete.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ...fileio import atomic_write_text
from ..dataset import KTDataset, StudentSeq
from ..formats import write_line3, write_line4
from .core import Sequences


def _join(a: np.ndarray) -> str:
    return ",".join(map(str, a.tolist()))


def _pykt_frame(seq: Sequences, students: np.ndarray, test: bool) -> pd.DataFrame:
    cols: dict[str, list] = {
        "fold": seq.fold[students].tolist(),
        "uid": students.tolist(),  # pykt: the student's index; keyid2idx.json maps raw ids
    }
    if seq.pid is not None:
        cols["questions"] = [_join(seq.pid[i]) for i in students]
    cols["concepts"] = [_join(seq.q[i]) for i in students]
    cols["responses"] = [_join(seq.r[i]) for i in students]
    for name, values in seq.extra.items():
        cols[name] = [_join(values[i]) for i in students]
    if seq.pid is not None:
        cols["is_repeat"] = [_join(seq.is_repeat[i]) for i in students]
    if test:  # pykt: a running index over the test interactions
        ends = np.cumsum([len(seq.q[i]) for i in students])
        cols["cidxs"] = [
            _join(np.arange(e - len(seq.q[i]), e)) for e, i in zip(ends, students, strict=True)
        ]
    return pd.DataFrame(cols)


def write_pykt(seq: Sequences, out: Path, K: int = 2) -> Path:
    d = out / "pykt"
    d.mkdir(parents=True, exist_ok=True)
    n_tv = int((seq.fold >= 0).sum())
    tv, test = seq.order[:n_tv], seq.order[n_tv:]
    atomic_write_text(d / "train_valid.csv", _pykt_frame(seq, tv, False).to_csv(index=False))
    atomic_write_text(d / "test.csv", _pykt_frame(seq, test, True).to_csv(index=False))
    keys = {"concepts": {s: i for i, s in enumerate(seq.skills)}}
    if seq.pid is not None:
        keys["questions"] = {p: i for i, p in enumerate(seq.problems)}
    keys["uid"] = {u: i for i, u in enumerate(seq.uid)}
    keys["max_concepts"] = seq.max_concepts
    keys["K"] = K  # not pykt's: ordinal folders read back without being told their K
    atomic_write_text(d / "keyid2idx.json", json.dumps(keys, ensure_ascii=False))
    return d


def _dataset(seq: Sequences, students: np.ndarray, K: int, name: str) -> KTDataset:
    rows = [
        StudentSeq(
            uid=int(i),
            q=seq.q[i],
            r=seq.r[i],
            pid=None if seq.pid is None else seq.pid[i],
            fold=int(seq.fold[i]),
        )
        for i in students
    ]
    return KTDataset(
        rows,
        num_c=len(seq.skills),
        num_pid=len(seq.problems) if seq.pid is not None else 0,
        K=K,
        name=name,
        meta={"raw_uid": {int(i): seq.uid[i] for i in students}},
    )


def write_lines(seq: Sequences, out: Path, name: str, K: int, n_folds: int) -> Path:
    """The 4-line layout (3-line without problem ids), whole train/test plus the folds."""
    fmt = "line4" if seq.pid is not None else "line3"
    d = out / fmt
    d.mkdir(parents=True, exist_ok=True)

    def write(students: np.ndarray, split: str) -> None:
        ds = _dataset(seq, students, K, f"{name}_{split}")
        path = d / f"{name}_{split}.csv"
        if fmt == "line4":
            write_line4(ds, path)
        else:
            write_line3(ds, path)

    n_tv = int((seq.fold >= 0).sum())
    tv, test = seq.order[:n_tv], seq.order[n_tv:]
    write(tv, "train")
    write(test, "test")
    for k in range(n_folds):  # numbered 1..n as the DKVMN and AKT folders (pykt's fold k - 1)
        write(tv[seq.fold[tv] != k], f"train{k + 1}")
        write(tv[seq.fold[tv] == k], f"valid{k + 1}")
    return d


def write_record(out: Path, record: dict) -> Path:
    path = out / "prepare.json"
    atomic_write_text(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return path
