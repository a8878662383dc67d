"""Property tests: every importer on damaged copies of a clean file (seeded generator).

Each reader - the 3-line, 4-line, pykt CSV and log readers of `load_bundle`, and every `prepare`
reader on its miniature - gets its clean file truncated inside a row or record, a field dropped
from one row, a column dropped, the columns shuffled, the text re-encoded (UTF-16/UTF-32, with
and without a byte-order mark, and a UTF-16 file cut mid-character) and null bytes written over
it. Every case either reads the same students as the clean file or raises ValueError naming the
file and a line; never another exception type, never a silent partial read.

A cut at a row or record boundary leaves a shorter but well-formed file, and a cut inside the
last field of a CSV row a shorter value: no reader can tell those from clean files, so the cuts
drawn here fall where a field or a line goes missing (what `truncate` draws).
"""

from __future__ import annotations

import csv
import io
import random
import re
from pathlib import Path

import numpy as np
import pytest
from prepare_helpers import write_rows
from test_prepare import A12, A15, A17, _a09, _a12_rows, _filler
from test_prepare_sources import KDD, STATICS, _ednet, _eedi, _kdd_rows, _statics_rows

from kt_lib.data import KTDataset
from kt_lib.data.dataset import StudentSeq
from kt_lib.data.formats import (
    read_line3,
    read_line4,
    read_log,
    read_pykt,
    write_line3,
    write_line4,
)
from kt_lib.data.prepare import DATASETS, PrepareOptions

SEED = 20261125
WIDE = ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")
BOMS = {"utf-16-be": b"\xfe\xff", "utf-32-be": b"\x00\x00\xfe\xff"}  # Python writes LE marks


def encode(text: str, enc: str, bom: bool = False) -> bytes:
    """`text` in `enc`; `bom` puts the big-endian byte-order mark before a -be encoding."""
    return (BOMS[enc] if bom else b"") + text.encode(enc)


def wide_cases(text: str):
    """(label, bytes) of `text` in every UTF-16/UTF-32 form, with and without a BOM."""
    for enc in WIDE:
        yield enc, encode(text, enc)
    for enc in BOMS:
        yield f"{enc}+bom", encode(text, enc, bom=True)


# --- mutations of a CSV text: (label, text, line of the error or None) -----------------------


def _rows(text: str, sep: str) -> list[list[str]]:
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=sep, quoting=quoting))


def _join(rows: list[list[str]], sep: str) -> str:
    if sep == "\t":
        return "".join("\t".join(r) + "\n" for r in rows)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def csv_mutations(text: str, sep: str, rng: random.Random, n: int = 2):
    """Truncations inside a row (a field goes missing), one row short of a field, dropped and
    shuffled columns. The clean text has one row per line."""
    lines = text.splitlines(keepends=True)
    width = len(_rows(lines[0], sep)[0])
    starts = np.cumsum([0] + [len(s) for s in lines])
    for _ in range(n):  # truncate: cut a data row where it loses a field
        while True:
            i = rng.randrange(1, len(lines))
            cut = int(starts[i]) + rng.randrange(1, len(lines[i].rstrip("\r\n")))
            if len(_rows(text[starts[i] : cut], sep)[-1]) < width:
                break
        yield f"truncated in line {i + 1}", text[:cut], i + 1
    rows = _rows(text, sep)
    for _ in range(n):  # one row loses one field
        i, j = rng.randrange(1, len(rows)), rng.randrange(width)
        short = [r[:j] + r[j + 1 :] if k == i else r for k, r in enumerate(rows)]
        yield f"line {i + 1} without field {j + 1}", _join(short, sep), i + 1
    for j in rng.sample(range(width), min(n, width)):
        yield f"column {rows[0][j]!r} dropped", _join([r[:j] + r[j + 1 :] for r in rows], sep), 0
    order = list(range(width))
    rng.shuffle(order)
    yield f"columns shuffled {order}", _join([[r[j] for j in order] for r in rows], sep), None


def check(read, path: Path, data: bytes, same, line: int | None, label: str) -> str:
    """Write `data` to `path`, read it: the same students (`same(result)`), or ValueError naming
    the file and a line (`line`: that line; 0: any line). Returns what happened."""
    path.write_bytes(data)
    try:
        got = read()
    except ValueError as e:
        msg = str(e)
        assert str(path) in msg, f"{label}: the error does not name the file: {msg}"
        at = re.search(r" line (\d+)", msg)
        assert at, f"{label}: the error names no line: {msg}"
        if line:
            assert int(at.group(1)) == line, f"{label}: line {at.group(1)}, not {line}: {msg}"
        return "error"
    assert line is None or line == 0, f"{label}: read a damaged file without an error"
    same(got, label)
    return "same"


# --- the readers of load_bundle --------------------------------------------------------------


def _dataset(rng: random.Random) -> KTDataset:
    students = []
    for u in range(6):
        n = rng.randrange(2, 7)
        q = np.array([rng.randrange(12) for _ in range(n)], dtype=np.int64)
        r = np.array([rng.randrange(2) for _ in range(n)], dtype=np.int64)
        pid = np.array([rng.randrange(30) for _ in range(n)], dtype=np.int64)
        students.append(StudentSeq(uid=u, q=q, r=r, pid=pid))
    return KTDataset(
        students, num_c=12, num_pid=30, meta={"raw_uid": {u: 500 + u for u in range(6)}}
    )


def _seqs(ds: KTDataset, pid: bool) -> list[tuple]:
    return [(s.q.tolist(), s.r.tolist(), s.pid.tolist() if pid else None) for s in ds.students]


def _same_as(clean: KTDataset):
    def same(got: KTDataset, label: str) -> None:
        pid = clean.has_pid and got.has_pid  # a dropped problem column reads no problem ids
        assert _seqs(got, pid) == _seqs(clean, pid), f"{label}: other students than the clean file"

    return same


def _pykt_text(ds: KTDataset) -> str:
    rows = [["fold", "uid", "questions", "concepts", "responses"]]
    for s in ds.students:
        lists = [",".join(map(str, v.tolist())) for v in (s.pid, s.q, s.r)]
        rows.append([str(s.uid % 5), str(s.uid), *lists])
    return _join(rows, ",")


def _log_text(ds: KTDataset) -> str:
    rows, t = [["user", "skill", "problem", "correct", "timestamp"]], 0
    for step in range(max(len(s) for s in ds.students)):  # students interleaved, in time order
        for s in ds.students:
            if step < len(s):
                t += 1
                rows.append(
                    [f"u{s.uid}", f"k{s.q[step]}", f"p{s.pid[step]}", str(s.r[step]), str(t)]
                )
    return _join(rows, ",")


def _line_mutations(text: str, R: int, rng: random.Random, n: int = 3):
    """Truncations inside a record (never at a record boundary) and a value line short of one
    value (an error at that line)."""
    lines = text.splitlines(keepends=True)
    starts = np.cumsum([0] + [len(s) for s in lines])
    bounds = set(starts[::R].tolist()) | {len(text) - 1}  # whole records; all but the last "\n"
    cuts = [c for c in range(1, len(text)) if c not in bounds]
    for cut in rng.sample(cuts, n):
        yield f"cut at byte {cut}", text[:cut], 0
    for _ in range(n):
        i = rng.choice([k for k in range(len(lines)) if k % R and lines[k].count(",") > 0])
        vals = lines[i].rstrip("\n").split(",")
        del vals[rng.randrange(len(vals))]
        yield (
            f"line {i + 1} short of a value",
            "".join(",".join(vals) + "\n" if k == i else s for k, s in enumerate(lines)),
            i + 1,
        )


def _wide_and_null(text: str, rng: random.Random):
    for label, data in wide_cases(text):
        yield label, data, 1
    yield "utf-16 cut mid-character", encode(text, "utf-16")[:-1], 1
    at = rng.randrange(len(text) // 2, len(text) - 1)
    yield f"null bytes at {at}", text[:at].encode() + b"\x00\x00" + text[at + 2 :].encode(), 0


@pytest.mark.parametrize("fmt", ["line3", "line4", "pykt", "log"])
def test_bundle_readers_refuse_damaged_files(tmp_path, fmt):
    rng = random.Random(f"{SEED}-{fmt}")
    ds = _dataset(rng)
    path = tmp_path / ("clean.csv" if fmt != "pykt" else "train_valid.csv")
    if fmt in ("line3", "line4"):
        (write_line3 if fmt == "line3" else write_line4)(ds, path)
        read = {"line3": read_line3, "line4": read_line4}[fmt]
        text = path.read_text()
        cases = _line_mutations(text, 3 if fmt == "line3" else 4, rng)
    else:
        text = _pykt_text(ds) if fmt == "pykt" else _log_text(ds)
        read = read_pykt if fmt == "pykt" else read_log
        cases = csv_mutations(text, ",", rng)
    path.write_text(text)
    clean = read(path)
    if fmt == "log":  # raw labels map to sorted indices: compare through them
        skills = clean.meta["skill_ids"]
        got = [[int(skills[c][1:]) for c in s.q] for s in clean.students]
        assert got == [s.q.tolist() for s in ds.students]
    else:
        _same_as(ds)(clean, "clean")
    seen = {}
    for label, data, line in [*cases, *_wide_and_null(text, rng)]:
        data = data.encode() if isinstance(data, str) else data
        seen[label] = check(lambda: read(path), path, data, _same_as(clean), line, label)
        if "utf" in label:  # these readers read UTF-8: the error names the encoding found
            with pytest.raises(ValueError, match=r"line 1: the file is (UTF-16|UTF-32)"):
                read(path)
    assert seen == {label: "same" if "shuffled" in label else seen[label] for label in seen}


# --- the prepare readers, each on its miniature -------------------------------------------------


def _a15(d: Path) -> Path:
    rows = _filler(
        6,
        3,
        user_id=lambda s, j: s,
        log_id=lambda s, j: 10 * s + j,
        sequence_id=lambda s, j: j,
        correct=lambda s, j: (s + j) % 2,
    )
    return write_rows(d / "2015_100_skill_builders_main_problems.csv", A15, rows)


def _a17(d: Path) -> Path:
    rows = _filler(
        5,
        3,
        studentId=lambda s, j: s,
        problemId=lambda s, j: 90 + j,
        skill=lambda s, j: ("noskill", "area_perimeter")[j % 2],
        startTime=lambda s, j: 1100000000 + 100 * s + j,
        timeTaken=lambda s, j: 1.5 * j,
        correct=lambda s, j: int(j == 0),
    )
    return write_rows(d / "anonymized_full_release_competition_dataset.csv", A17, rows)


def _kdd(d: Path, name: str, file: str, kc: str) -> Path:
    return write_rows(d / file, KDD + [kc], _kdd_rows(kc), sep="\t")


# dataset -> (builder(dir) -> raw path, files to damage below the raw path or "" for itself, sep,
# encoding of the clean file)
MINIATURES = {
    "assist2009": (lambda d: _a09(d), [""], ",", "latin-1"),
    "assist2012": (
        lambda d: write_rows(d / "2012-2013-data-with-predictions-4-final.csv", A12, _a12_rows()),
        [""],
        ",",
        "utf-8",
    ),
    "assist2015": (_a15, [""], ",", "utf-8"),
    "assist2017": (_a17, [""], ",", "utf-8"),
    "algebra2005": (
        lambda d: _kdd(d, "algebra2005", "algebra_2005_2006_train.txt", "KC(Default)"),
        [""],
        "\t",
        "utf-8",
    ),
    "bridge2algebra2006": (
        lambda d: _kdd(d, "b", "bridge_to_algebra_2006_2007_train.txt", "KC(SubSkills)"),
        [""],
        "\t",
        "utf-8",
    ),
    "statics2011": (
        lambda d: write_rows(d / "AllData_student_step_2011F.csv", STATICS, _statics_rows()),
        [""],
        ",",
        "utf-8",
    ),
    "ednet": (lambda d: _ednet(d), ["KT1/u1.csv", "contents/questions.csv"], ",", "utf-8"),
    "eedi": (
        lambda d: _eedi(d),
        ["train_data/train_task_1_2.csv", "metadata/question_metadata_task_1_2.csv"],
        ",",
        "utf-8",
    ),
}
_LOG = ("user", "skill", "problem", "response", "time")


def _same_log(clean):
    def same(got, label: str) -> None:
        cols = [c for c in _LOG if c in clean.frame.columns]
        a, b = got.frame[cols].reset_index(drop=True), clean.frame[cols].reset_index(drop=True)
        assert a.equals(b), f"{label}: other rows than the clean file\n{a}\n{b}"
        assert got.rows_read == clean.rows_read, label

    return same


@pytest.mark.parametrize("name", sorted(MINIATURES))
def test_prepare_readers_refuse_damaged_files(tmp_path, name):
    rng = random.Random(f"{SEED}-{name}")
    build, targets, sep, enc = MINIATURES[name]
    raw = build(tmp_path)
    opts = PrepareOptions(max_users=None)

    def read():
        return DATASETS[name](raw, opts)

    clean = read()
    for target in targets:
        path = raw / target if target else raw
        good = path.read_bytes()
        text = good.decode(enc)
        cases = [(label, t.encode(enc), line) for label, t, line in csv_mutations(text, sep, rng)]
        cases += [(label, data, None) for label, data in wide_cases(text)]  # decoded
        cases += [("utf-16 cut mid-character", encode(text, "utf-16")[:-1], 0)]
        at = rng.randrange(len(good) // 2, len(good) - 1)
        cases += [("null bytes", good[:at] + b"\x00" + good[at + 1 :], 0)]
        for label, data, line in cases:
            label = f"{name} {target or path.name}: {label}"
            check(read, path, data, _same_log(clean), line, label)
            if "utf" in label and "cut" not in label:  # decoded, its encoding recorded
                found = label.split(": ")[1].removesuffix("+bom")
                found = {"utf-16": "utf-16-le", "utf-32": "utf-32-le"}.get(found, found)
                assert any(found in i.encoding.split("/") for i in read().inputs), label
        path.write_bytes(good)
