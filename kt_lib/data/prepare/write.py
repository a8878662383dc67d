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

Re-preparing a folder replaces what an earlier preparation wrote: the pykt files, `prepare.json`
and the line files are overwritten, and before they are written `remove_stale` deletes the line
files this preparation does not write (`stale_line_files`): the folds beyond `n_folds`, the other
of line3/ and line4/, and another dataset's files, so `--fold 5` cannot read a fold of an earlier
split. The writer owns only `{dataset}_train.csv`, `_test.csv`, `_train{k}.csv` and
`_valid{k}.csv` of a `DATASETS` name in `line3/` and `line4/` and the pykt files above; any other
file of OUT_DIR is left alone (a line folder left empty is removed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
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


LINE_LAYOUTS = ("line3", "line4")


def line_layout(seq: Sequences) -> str:
    return "line4" if seq.pid is not None else "line3"


def line_files(name: str, n_folds: int) -> list[str]:
    """The names `write_lines` writes for dataset `name` with `n_folds` folds."""
    folds = [f"{split}{k}" for k in range(1, n_folds + 1) for split in ("train", "valid")]
    return [f"{name}_{split}.csv" for split in ("train", "test", *folds)]


def stale_line_files(out: Path, datasets: Iterable[str], keep: dict[str, list[str]]) -> list[Path]:
    """The files of `out`/line3 and `out`/line4 an earlier preparation of one of `datasets` wrote
    (`{dataset}_train.csv`, `_test.csv`, `_train{k}.csv`, `_valid{k}.csv`) that are not among
    `keep[layout]`, the names this preparation writes."""
    owned = re.compile(
        "(?:" + "|".join(map(re.escape, datasets)) + r")_(?:train\d*|valid\d+|test)\.csv"
    )
    stale = []
    for layout in LINE_LAYOUTS:
        d = out / layout
        if not d.is_dir():
            continue
        mine = set(keep.get(layout, ()))
        stale += [
            f
            for f in sorted(d.iterdir())
            if owned.fullmatch(f.name) and f.name not in mine and not f.is_dir()
        ]
    return stale


def remove_stale(out: Path, datasets: Iterable[str], keep: dict[str, list[str]]) -> list[Path]:
    """Delete `stale_line_files`, then a line folder of another layout they leave empty; the
    paths deleted."""
    stale = stale_line_files(out, datasets, keep)
    for f in stale:
        f.unlink(missing_ok=True)
    for d in {f.parent for f in stale}:
        if d.name not in keep and not any(d.iterdir()):
            d.rmdir()
    return stale


def check_out_dir(out: Path) -> None:
    """Refuse an output path that cannot become a prepared folder, before any raw file is read:
    `out` (or the nearest existing path above it) not a folder, or a path the writer writes
    (pykt/, line3/, line4/, prepare.json) of the wrong kind."""
    for p in (out, *out.parents):
        if p.exists() or p.is_symlink():
            if p == out and not p.is_dir():
                raise ValueError(f"{out}: the output path exists and is not a folder")
            if not p.is_dir():
                raise ValueError(
                    f"{p}: exists and is not a folder, so the output {out} cannot be made"
                )
            break
    for sub in ("pykt", *LINE_LAYOUTS):
        if (out / sub).exists() and not (out / sub).is_dir():
            raise ValueError(f"{out / sub}: exists and is not a folder; the output {out} needs it")
    if (out / "prepare.json").is_dir():
        raise ValueError(f"{out / 'prepare.json'}: is a folder; the output {out} writes this file")


def write_lines(seq: Sequences, out: Path, name: str, K: int, n_folds: int) -> Path:
    """The 4-line layout (3-line without problem ids), whole train/test plus the folds
    (`line_files`)."""
    fmt = line_layout(seq)
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
