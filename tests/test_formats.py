"""Data layer: readers/writers, input errors, chunking/collation, loaders, splits, bundles."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from kt_lib.data import (
    PAD,
    BatchLoader,
    KTDataset,
    StudentSeq,
    chunk,
    collate,
    file_folds,
    kfold,
    load_bundle,
    read_line3,
    read_line4,
    read_log,
    read_pykt,
    split_students,
    write_line3,
    write_line4,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _toy(n_students: int = 5, K: int = 2, seed: int = 0, pid: bool = True) -> KTDataset:
    rng = np.random.default_rng(seed)
    students = []
    for i in range(n_students):
        n = int(rng.integers(1, 40))
        students.append(
            StudentSeq(
                uid=i,
                q=rng.integers(0, 7, n),
                r=rng.integers(0, K, n),
                pid=rng.integers(0, 12, n) if pid else None,
            )
        )
    return KTDataset(students, num_c=9, num_pid=13 if pid else 0, K=K, name="toy")


def _assert_same(a: KTDataset, b: KTDataset) -> None:
    assert (a.num_c, a.num_pid, a.K, len(a)) == (b.num_c, b.num_pid, b.K, len(b))
    for s, t in zip(a.students, b.students, strict=True):
        assert s.uid == t.uid and s.fold == t.fold
        np.testing.assert_array_equal(s.q, t.q)
        np.testing.assert_array_equal(s.r, t.r)
        assert (s.pid is None) == (t.pid is None)
        if s.pid is not None:
            np.testing.assert_array_equal(s.pid, t.pid)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 4])
def test_line3_round_trip(tmp_path, K):
    d = _toy(K=K, pid=False)
    write_line3(d, tmp_path / "d.csv")
    _assert_same(d, read_line3(tmp_path / "d.csv", num_c=d.num_c, K=K))


def test_line4_round_trip(tmp_path):
    d = _toy()
    write_line4(d, tmp_path / "d.csv")
    back = read_line4(tmp_path / "d.csv", num_c=d.num_c, num_pid=d.num_pid)
    _assert_same(d, back)
    assert back.meta["raw_uid"] == {s.uid: str(s.uid) for s in d.students}


def test_vocabulary_inferred_from_max_id(tmp_path):
    path = _write(tmp_path, "a.csv", "3,extra,fields\n1,5,2,\n0,1,1,\n\n\n")
    d = read_line3(path, uid_offset=10)
    assert d.num_c == 5 and d.students[0].uid == 10
    np.testing.assert_array_equal(d.students[0].q, [0, 4, 1])


def test_write_is_atomic(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("old")
    with pytest.raises(ValueError, match="problem ids"):
        write_line4(_toy(pid=False), path)
    assert path.read_text() == "old"  # a failed write leaves the old file intact
    write_line3(_toy(pid=False), path)
    assert [p.name for p in tmp_path.iterdir()] == ["d.csv"]  # no temp file left behind


# --- malformed input: file, line and value named ----------------------------------------------

LINE3_ERRORS = [
    ("", {}, 1, "empty file"),
    ("\n\n", {}, 1, "empty file"),
    ("2\n1,2\n0,1\n3\n1,2,3\n", {}, 4, "'3'"),  # truncated record
    ("3\n1,2\n0,1\n", {}, 2, "found 2 question ids"),  # header n vs ids
    ("2\n1,2\n0\n", {}, 3, "found 1 responses"),  # ids vs responses
    ("x\n1\n0\n", {}, 1, "'x'"),
    ("2\n1,2\n0,1\n2\n1,q7\n0,1\n", {}, 5, "'q7'"),
    ("2\n1,2\n0,1.0\n", {}, 3, "'1.0'"),
    ("2\n1,2\n0,1\n2\n3,4\n2,0\n", {}, 6, "response '2' not in {0, 1}"),
    ("2\n1,2\n0,3\n", {"K": 3}, 3, "response '3' not in {0, 1, 2}"),
    ("2\n1,0\n0,1\n", {}, 2, "question id '0'"),
    ("2\n1,6\n0,1\n", {"num_c": 5}, 2, "question id '6' is beyond the declared vocabulary num_c=5"),
]


@pytest.mark.parametrize(("text", "kw", "line", "value"), LINE3_ERRORS)
def test_line3_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "assist_train.csv", text)
    with pytest.raises(ValueError, match=rf"assist_train\.csv line {line}\b.*{re.escape(value)}"):
        read_line3(path, **kw)


LINE4_ERRORS = [
    ("2,u1\n1,2\n1,1\n0,1\n2\n1\n1\n0\n", {}, 6, "found 1 problem ids"),
    ("2\n1,9\n1,1\n0,1\n", {"num_pid": 8}, 2, "problem id '9'"),
    ("2\n1,2\n0,1\n0,1\n", {}, 3, "skill id '0'"),
    ("2\n1,2\n1,1\n0,-1\n", {}, 4, "response '-1'"),
    ("2\n1,2\n1,1\n", {}, 1, "truncated"),
]


@pytest.mark.parametrize(("text", "kw", "line", "value"), LINE4_ERRORS)
def test_line4_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "akt.csv", text)
    with pytest.raises(ValueError, match=rf"akt\.csv line {line}\b.*{re.escape(value)}"):
        read_line4(path, **kw)


PYKT_HEADER = "fold,uid,questions,concepts,responses,selectmasks\n"


def test_pykt_minimal_columns(tmp_path):
    _write(tmp_path, "test.csv", 'concepts,responses\n"0,2","1,0"\n')
    d = read_pykt(tmp_path / "test.csv")
    assert d.num_c == 3 and d.students[0].fold == -1 and d.meta == {}


def test_pykt_reads_pid_fold_and_drops_padding(tmp_path):
    _write(
        tmp_path,
        "train_valid.csv",
        PYKT_HEADER + '0,u7,"3,4,-1","1,2,-1","0,1,-1","1,1,-1"\n1,u8,"0","0","1","1"\n',
    )
    d = read_pykt(tmp_path, uid_offset=5)
    assert [len(s) for s in d.students] == [2, 1] and [s.fold for s in d.students] == [0, 1]
    np.testing.assert_array_equal(d.students[0].pid, [3, 4])
    assert d.num_c == 3 and d.num_pid == 5 and d.meta["raw_uid"] == {5: "u7", 6: "u8"}


PYKT_ERRORS = [
    ("", 1, "empty file"),
    ('0,u,"1,2","1,2","0,1","1,1"\n1,u,"1,2,3","1,2,3","0,1","1,1,1"\n', 3, "found 2 responses"),
    ('0,u,"1,2","1,a","0,1","1,1"\n', 2, "concepts 'a'"),
    ('0,u,"1,2","1,2","0,5","1,1"\n', 2, "response '5'"),
    ('0,u,"1,-2","1,2","0,1","1,1"\n', 2, "question id '-2'"),
]


@pytest.mark.parametrize(("rows", "line", "value"), PYKT_ERRORS)
def test_pykt_errors(tmp_path, rows, line, value):
    _write(tmp_path, "train_valid.csv", PYKT_HEADER + rows if rows else "")
    with pytest.raises(ValueError, match=rf"train_valid\.csv line {line}\b.*{re.escape(value)}"):
        read_pykt(tmp_path)


LOG = (
    "user,skill,problem,correct,order\n"
    "b,s2,p1,2,3\na,s1,p1,0,2\nb,s1,p2,1,1\na,s3,p3,1,1\nb,s1,p2,0,3\n"
)


def test_log_sorts_and_maps(tmp_path):
    d = read_log(_write(tmp_path, "log.csv", LOG), problem="problem", K=3)
    assert (len(d), d.num_c, d.num_pid, d.K) == (2, 3, 3, 3)
    assert d.meta["skill_ids"] == ["s1", "s2", "s3"] and d.meta["raw_uid"] == {0: "a", 1: "b"}
    a, b = d.students
    np.testing.assert_array_equal(a.q, [2, 0])  # a sorted by order: s3 then s1
    np.testing.assert_array_equal(b.q, [0, 1, 0])  # tie at order 3 keeps the file order
    np.testing.assert_array_equal(b.r, [1, 2, 0])
    np.testing.assert_array_equal(b.pid, [1, 0, 1])


@pytest.mark.parametrize(
    ("text", "kw", "line", "value"),
    [
        ("user,skil,correct,order\na,s,1,1\n", {}, 1, "no column for skill (any of skill,"),
        ("user,skill,correct\na,s,1\n", {"order": "t"}, 1, "no column for order='t'"),
        ("user,skill,correct,order\na,s,1,1\na,s,yes,2\n", {}, 3, "correct 'yes'"),
        ("user,skill,correct,order\na,s,1,1\na,s,0.5,2\n", {}, 3, "correct '0.5'"),
        ("user,skill,correct,order\na,s,1,1\na,s,2,2\n", {"K": 2}, 3, "correct '2' not in {0, 1}"),
        ("user,skill,correct,order\na,s,1,1\n,s,0,2\n", {}, 3, "empty value in column 'user'"),
        ("", {}, 1, "empty file"),
    ],
)
def test_log_errors(tmp_path, text, kw, line, value):
    path = _write(tmp_path, "log.csv", text)
    with pytest.raises(ValueError, match=rf"log\.csv line {line}\b.*{re.escape(value)}"):
        read_log(path, **kw)


def test_log_with_the_usual_column_names_loads_and_says_what_it_mapped(tmp_path):
    """student/question/skill/correct/timestamp: the common names map without a flag; the same
    log with our names gives the same students; unknown names get the flag that maps them."""
    ours = read_log(_write(tmp_path, "ours.csv", LOG), K=3)
    theirs_text = LOG.replace(
        "user,skill,problem,correct,order", "Student,skill,question,correct,timestamp"
    )
    theirs = read_log(_write(tmp_path, "theirs.csv", theirs_text), K=3)
    assert theirs.meta["columns"] == {
        "user": "Student",
        "skill": "skill",
        "problem": "question",
        "correct": "correct",
        "order": "timestamp",
    }
    for a, b in zip(ours.students, theirs.students, strict=True):
        np.testing.assert_array_equal(a.q, b.q)
        np.testing.assert_array_equal(a.r, b.r)
        np.testing.assert_array_equal(a.pid, b.pid)
    odd = _write(tmp_path, "odd.csv", theirs_text.replace("Student", "who"))
    with pytest.raises(ValueError, match=r"no column for user .*--columns user=COL"):
        read_log(odd, K=3)
    mapped = read_log(odd, user="who", K=3)  # the Python form of --columns user=who
    assert mapped.meta["columns"]["user"] == "who" and len(mapped) == 2
    no_order = read_log(_write(tmp_path, "plain.csv", "user,kc,score\na,s,1\na,t,0\n"))
    assert no_order.meta["columns"]["order"] is None  # file order, said in meta
    np.testing.assert_array_equal(no_order.students[0].q, [0, 1])


# --- bad-input audit (issue 15): rules every reader shares ----------------------------------

LOG_HEADER = "user,skill,correct,order\n"
PYKT_ROW = '0,u,"1,2","1,2","0,1","1,1"\n'


def _read(reader, tmp_path: Path, text: str | bytes, **kw):
    """Write `text` where `reader` looks for it and read it back."""
    name = {"pykt": "train_valid.csv", "log": "log.csv"}.get(reader, "data.csv")
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    fn = {"line3": read_line3, "line4": read_line4, "pykt": read_pykt, "log": read_log}[reader]
    return fn(tmp_path if reader == "pykt" else path, **kw)


def _raises(reader, tmp_path, text, line, value, **kw):
    name = {"pykt": "train_valid", "log": "log"}.get(reader, "data")
    with pytest.raises(ValueError, match=rf"{name}\.csv line {line}\b.*{re.escape(value)}"):
        _read(reader, tmp_path, text, **kw)


WIDTH = "fields, but the header (line 1) has"


@pytest.mark.parametrize(
    ("reader", "text", "line", "value"),
    [
        pytest.param("pykt", PYKT_HEADER + "x," + PYKT_ROW, 2, f"7 {WIDTH} 6", id="pykt-extra"),
        pytest.param(
            "pykt",
            PYKT_HEADER + PYKT_ROW.strip() + ",\n",
            2,
            f"7 {WIDTH} 6 (a trailing",
            id="pykt-comma",
        ),
        pytest.param("log", LOG_HEADER + "a,s,1,1\nb,x,s,1,2\n", 3, f"5 {WIDTH} 4", id="log-extra"),
        pytest.param(
            "log", LOG_HEADER + "a,s,1,1,\n", 2, f"5 {WIDTH} 4 (a trailing", id="log-comma"
        ),
        pytest.param("log", LOG_HEADER + "a,s,1\n", 2, f"3 {WIDTH} 4", id="log-short"),
    ],
)
def test_csv_rows_must_match_the_header_width(tmp_path, reader, text, line, value):
    _raises(reader, tmp_path, text, line, value)  # pandas shifted extra leading fields silently


def test_csv_parser_errors_name_the_file(tmp_path):
    unquoted = PYKT_ROW + "1,u,3,4,3,4,0,1,1,1\n"  # pandas: ParserError naming no file
    _raises("pykt", tmp_path, PYKT_HEADER + unquoted, 3, f"10 {WIDTH} 6")


def test_log_K_defaults_to_binary(tmp_path):
    text = LOG_HEADER + "a,s,1,1\na,s,2,2\nb,s,0,1\n"  # a stray 2 in a binary log
    _raises("log", tmp_path, text, 3, "correct '2' not in {0, 1} (K=2; ordinal data must declare")
    assert _read("log", tmp_path, text, K=3).K == 3


def test_log_order_is_numbers_or_dates(tmp_path):
    text = LOG_HEADER + "a,s1,1,10\na,s2,1,9\na,s3,0,x\n"  # text order would put 10 before 9
    _raises("log", tmp_path, text, 4, "order 'x' is neither a number nor a date")
    dates = LOG_HEADER + "a,s1,1,1/10/2020\na,s2,1,1/9/2020\nb,s1,0,2020-01-01\n"
    _raises("log", tmp_path, dates, 4, "order '2020-01-01' is neither a number nor a date")
    d = _read("log", tmp_path, dates.replace("2020-01-01", "1/1/2020"))
    np.testing.assert_array_equal(d.students[0].q, [1, 0])  # 9 Jan before 10 Jan
    iso = LOG_HEADER + "a,s1,1,2020-01-10\na,s2,1,2020-01-09T08:00\n"  # mixed ISO precision
    np.testing.assert_array_equal(_read("log", tmp_path, iso).students[0].q, [1, 0])


@pytest.mark.parametrize(("fold", "allowed"), [(7, "0..4"), (-1, "0..4")])
def test_pykt_fold_outside_the_folds(tmp_path, fold, allowed):
    text = PYKT_HEADER + PYKT_ROW + PYKT_ROW.replace("0,u", f"{fold},u")
    _raises("pykt", tmp_path, text, 3, f"fold '{fold}' not in {allowed} (n_folds=5)")
    _write(tmp_path, "test.csv", PYKT_HEADER + PYKT_ROW.replace("0,u", "-1,u"))
    assert read_pykt(tmp_path, "test").students[0].fold == -1  # held-out students: fold -1
    with pytest.raises(ValueError, match=rf"line 3\b.*fold '{fold}'"):
        load_bundle(tmp_path, "pykt")


EMPTY_PYKT = '0,u0,"","","",""\n' + PYKT_ROW + '1,u2,"-1","-1","-1","-1"\n'  # empty, padding


@pytest.mark.parametrize(
    ("reader", "text", "dropped", "line", "raw_uid"),
    [
        pytest.param("line3", "0\n\n\n2\n1,2\n0,1\n0\n\n\n", 2, 1, None, id="line3-first-last"),
        pytest.param("line3", "2\n1,2\n0,1\n0\n", 1, 4, None, id="line3-last-short"),
        pytest.param("line4", "0,u0\n\n\n\n2,u1\n1,2\n1,1\n0,1\n0,u2\n", 2, 1, "u1", id="line4"),
        pytest.param("pykt", PYKT_HEADER + EMPTY_PYKT, 2, 2, "u", id="pykt"),
    ],
)
def test_students_without_interactions_are_dropped(tmp_path, reader, text, dropped, line, raw_uid):
    match = rf"dropped {dropped} student\(s\) without interactions \(the first at line {line}\)"
    with pytest.warns(UserWarning, match=match):
        d = _read(reader, tmp_path, text, uid_offset=3)
    assert len(d) == 1 and len(d.students[0]) == 2 and d.students[0].uid == 3
    assert d.meta.get("raw_uid") == (raw_uid and {3: raw_uid})


@pytest.mark.parametrize(
    ("reader", "text", "line"),
    [
        ("line3", b"2\n1,2\n0,\xff1\n", 3),
        ("line4", b"\xef\xbb\xbf2\n1,2\n\xe91,1\n0,1\n", 3),  # after a BOM
        ("pykt", PYKT_HEADER.encode() + b'0,\xc3(,"1","1","0","1"\n', 2),
        ("log", LOG_HEADER.encode() + b"a,s,1,1\nb,caf\xe9,0,2\n", 3),
    ],
    ids=["line3", "line4-bom", "pykt", "log"],
)
def test_non_utf8_bytes_are_named(tmp_path, reader, text, line):
    bad = re.search(rb"[\x80-\xff]", text.removeprefix(b"\xef\xbb\xbf")).group()
    _raises(reader, tmp_path, text, line, f"bytes {bad!r} are not valid UTF-8")


@pytest.mark.parametrize(
    ("reader", "text", "line", "value"),
    [
        ("line3", "1\n1_0\n1\n", 2, "question id '1_0' is not an integer"),
        ("line3", "1_0\n1\n1\n", 1, "sequence length '1_0' is not an integer"),
        ("line3", "1\n\u0663\n1\n", 2, "question id '\u0663' is not an integer"),
        ("line3", "1\n99999999999999999999\n1\n", 2, "'99999999999999999999' does not fit in 64"),
        ("pykt", PYKT_HEADER + '0,u,"1,2","1,1_0","0,1","1,1"\n', 2, "concepts '1_0' is not an"),
        ("pykt", PYKT_HEADER + '0,u,"1","99999999999999999999","0","1"\n', 2, "does not fit"),
        ("pykt", PYKT_HEADER + PYKT_ROW.replace("0,u", "0.0,u"), 2, "fold '0.0' is not an"),
        ("log", LOG_HEADER + "a,s,1,1\na,s,1.0,2\n", 3, "correct '1.0' is not an integer"),
    ],
    ids=[
        "line3-1_0",
        "line3-n-1_0",
        "line3-arabic-3",
        "line3-overflow",
        "pykt-1_0",
        "pykt-overflow",
    ]
    + ["pykt-fold-0.0", "log-1.0"],
)
def test_integers_are_sign_and_ascii_digits_within_int64(tmp_path, reader, text, line, value):
    _raises(reader, tmp_path, text, line, value)


@pytest.mark.parametrize(
    ("reader", "text", "line", "value"),
    [
        ("line3", "2\n1,2\n0,1\n\n2\n1,2\n0,1\n", 4, "blank line where a record header"),
        ("pykt", PYKT_HEADER + PYKT_ROW + "\n" + PYKT_ROW.replace('"0,1"', '"0,a"'), 4, "'a'"),
        ("log", LOG_HEADER + "a,s,1,1\n\n \na,s,yes,2\n", 5, "correct 'yes'"),
    ],
    ids=["line3", "pykt", "log"],
)
def test_blank_lines_keep_their_line_numbers(tmp_path, reader, text, line, value):
    _raises(reader, tmp_path, text, line, value)


@pytest.mark.parametrize(("fmt", "name"), [("pykt", "train_valid.csv"), ("line3", "t_train.csv")])
def test_bundle_refuses_a_file_for_a_folder(tmp_path, fmt, name):
    path = _write(tmp_path, name, PYKT_HEADER + PYKT_ROW if fmt == "pykt" else "1\n1\n1\n")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(path))}: data_format='{fmt}' reads a folder"
    ):
        load_bundle(path, fmt)


def test_tiny_data_refuses_an_empty_split(tmp_path):
    rows = "".join(f"u{i},s,1,1\n" for i in range(3))
    path = _write(tmp_path, "log.csv", LOG_HEADER + rows)
    msg = r"3 students split by fractions \(0\.7, 0\.1, 0\.2\) leave the valid part \(0\.1 of"
    with pytest.raises(ValueError, match=msg):
        load_bundle(path, "log")
    with pytest.raises(ValueError, match="2 students .* the valid part"):
        split_students(_toy(2), (0.8, 0.2))
    assert [len(p) for p in split_students(_toy(2), (1.0, 0.0))] == [2, 0]  # asked for none


# --- chunking, collation, loader --------------------------------------------------------------


def test_chunk_keeps_every_interaction():
    d = _toy(20)
    d.students.append(StudentSeq(uid=99, q=np.zeros(450, np.int64), r=np.ones(450, np.int64)))
    windows = chunk(d, max_len=200)
    assert sum(w.stop - w.start for w in windows) == d.num_interactions
    assert [w.stop - w.start for w in windows if w.student == len(d) - 1] == [200, 200, 50]


def test_collate_pads_and_masks():
    d = _toy(3)
    windows = chunk(d, max_len=10)[:4]
    b = collate(d, windows)
    lengths = [w.stop - w.start for w in windows]
    assert b.q.shape == (4, max(lengths)) and b.pid is not None
    for i, (w, n) in enumerate(zip(windows, lengths, strict=True)):
        s = d.students[w.student]
        assert b.mask[i].sum() == n and not b.mask[i, n:].any()
        assert torch.equal(b.q[i, :n], torch.from_numpy(s.q[w.start : w.stop]))
        assert (b.q[i, n:] == PAD).all() and (b.r[i, n:] == PAD).all()
        assert b.uid[i] == s.uid and b.start[i] == w.start


def test_loader_is_deterministic_and_covers_all():
    d = _toy(30)

    def run(seed, epoch):
        loader = BatchLoader(d, batch_size=4, max_len=8, shuffle=True, seed=seed)
        loader.set_epoch(epoch)
        return [(b.uid.tolist(), b.start.tolist()) for b in loader]

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1) and run(1, 0) != run(2, 0)
    loader = BatchLoader(d, batch_size=4, max_len=8, shuffle=True, seed=1)
    assert sum(int(b.mask.sum()) for b in loader) == d.num_interactions


def test_bucketed_loader_covers_all_and_pads_less():
    from tests.conftest import make_tiny_dataset

    d = make_tiny_dataset(n=200, L=60, seed=1)  # ragged: 30..60 steps, some windows of 1..19

    def batches(bucket, epoch=0):
        loader = BatchLoader(d, batch_size=8, max_len=20, shuffle=True, seed=3, bucket=bucket)
        loader.set_epoch(epoch)
        return loader, [b for b in loader]

    loader, plain = batches(0)
    _, pooled = batches(4)
    keys = lambda bs: sorted(
        (u, s) for b in bs for u, s in zip(b.uid.tolist(), b.start.tolist(), strict=True)
    )
    assert keys(pooled) == keys(plain) and len(keys(plain)) == len(loader.windows)
    assert sum(int(b.mask.sum()) for b in pooled) == d.num_interactions
    padded = lambda bs: sum(b.q.numel() for b in bs)
    assert padded(pooled) < padded(plain)
    budget = 8 * loader.lengths.mean()  # each bucketed batch: about a plain batch's interactions
    sizes = np.array([int(b.mask.sum()) for b in pooled])
    assert sizes.max() <= budget + 20 and np.median(sizes) >= budget - 20
    pools = -(-len(loader.windows) // 32)  # at most one short batch more per pool of 4 x 8
    assert len(plain) - pools <= len(pooled) <= len(plain) + pools
    assert len(pooled) == len(batches(4)[0])
    assert max(len(b.uid) for b in pooled) > 8  # short windows come in bigger batches
    same = lambda a, b: [x.uid.tolist() for x in a] == [x.uid.tolist() for x in b]
    assert same(batches(4)[1], pooled) and not same(batches(4, epoch=1)[1], pooled)
    equal = KTDataset(  # every window 10 long
        [StudentSeq(i, np.arange(20) % 7, np.arange(20) % 2) for i in range(50)], num_c=7
    )
    runs = [BatchLoader(equal, 4, 10, shuffle=True, seed=5, bucket=b) for b in (0, 3)]
    assert same(*[list(r) for r in runs])
    with pytest.raises(ValueError, match="bucket"):
        BatchLoader(d, 4, 10, bucket=-1)


# --- splits -----------------------------------------------------------------------------------


def test_split_students_disjoint_covering_reproducible():
    d = _toy(50)
    parts = split_students(d, (0.7, 0.1, 0.2), seed=3)
    uids = [set(p.uids.tolist()) for p in parts]
    assert [len(u) for u in uids] == [35, 5, 10]
    assert set.union(*uids) == set(d.uids.tolist()) and sum(map(len, uids)) == len(d)
    again = split_students(d, (0.7, 0.1, 0.2), seed=3)
    assert all((p.uids == q.uids).all() for p, q in zip(parts, again, strict=True))
    assert (split_students(d, seed=4)[0].uids != parts[0].uids).any()
    with pytest.raises(ValueError, match="fractions"):
        split_students(d, (0.5, 0.2))


def test_kfold_and_file_folds():
    d = _toy(23)
    folds = kfold(d, k=5, seed=0)
    valid = [set(v.uids.tolist()) for _, v in folds]
    assert sum(map(len, valid)) == len(d) and set.union(*valid) == set(d.uids.tolist())
    for (t, v), vs in zip(folds, valid, strict=True):
        assert not set(t.uids.tolist()) & vs and len(t) + len(v) == len(d)
    for i, s in enumerate(d.students):
        s.fold = i % 3 if i < 20 else -1  # the last three have no fold
    ff = file_folds(d)
    assert len(ff) == 3 and all(len(t) + len(v) == 20 for t, v in ff)
    assert all(s.fold == 1 for s in ff[1][1].students)


# --- bundles ----------------------------------------------------------------------------------


def _assert_bundle(b):
    uids = [set(x.uids.tolist()) for x in (b.train, b.valid, b.test)]
    assert sum(map(len, uids)) == len(set.union(*uids)), "uids must be unique across splits"
    assert len({(x.num_c, x.num_pid, x.K) for x in (b.train, b.valid, b.test)}) == 1


def test_bundle_line3_folder(tmp_path):
    d = _toy(20, pid=False)
    train, valid = kfold(d, k=2)[0]
    write_line3(d, tmp_path / "toy_train.csv")
    write_line3(train, tmp_path / "toy_train1.csv")
    write_line3(valid, tmp_path / "toy_valid1.csv")
    write_line3(_toy(6, seed=1, pid=False), tmp_path / "toy_test.csv")
    b = load_bundle(tmp_path, "line3", valid_frac=0.25, seed=1)
    assert (len(b.train), len(b.valid), len(b.test)) == (15, 5, 6) and b.fold is None
    assert "toy_train.csv" in b.protocol and b.data_format == "line3"
    _assert_bundle(b)
    b1 = load_bundle(tmp_path, "line3", fold=1)
    assert (len(b1.train), len(b1.valid)) == (len(train), len(valid))
    _assert_bundle(b1)
    with pytest.raises(FileNotFoundError, match=rf"{re.escape(str(tmp_path))}.*\*_train2\.csv"):
        load_bundle(tmp_path, "line3", fold=2)
    with pytest.raises(ValueError, match="unknown data_format"):
        load_bundle(tmp_path, "line5")


def test_bundle_log(tmp_path):
    rows = [f"u{i % 40},s{i % 7},{i % 2},{i}" for i in range(400)]
    path = _write(tmp_path, "log.csv", "user,skill,correct,order\n" + "\n".join(rows) + "\n")
    b = load_bundle(path, "log", seed=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (28, 4, 8)
    _assert_bundle(b)


def test_bundle_synthetic():
    pytest.importorskip("kt_lib.data.synthetic")
    b = load_bundle(num_students=100, seed=0)
    assert (len(b.train), len(b.valid), len(b.test)) == (70, 10, 20)
    assert b.truth is not None and b.data_dir is None and b.data_format == "synthetic"
    _assert_bundle(b)


def test_bundle_refuses_a_folder_with_synthetic(tmp_path):
    """The simulator would ignore the folder, and the runs would carry the folder's name."""
    with pytest.raises(ValueError, match="with data_format='synthetic': the simulator would"):
        load_bundle(tmp_path, "synthetic")


# --- the real datasets (MANIFEST.md figures) --------------------------------------------------

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} absent")


@needs_data
@pytest.mark.parametrize(
    ("path", "students", "interactions"),
    [
        ("assist2009/assist2009_updated_train.csv", 2921, 224_218),
        ("assist2009/assist2009_updated_test.csv", 1230, 101_419),
        ("statics2011/STATICS_train.csv", 229, 130_184),
        ("statics2011/STATICS_test.csv", 104, 59_113),
    ],
)
def test_real_line3_counts(path, students, interactions):
    d = read_line3(DATA / path)
    assert (len(d), d.num_interactions) == (students, interactions)


@needs_data
def test_real_assist2009_bundle():
    b = load_bundle(DATA / "assist2009", "line3")
    assert len(b.train) + len(b.valid) == 2921 and len(b.test) == 1230 and b.num_c == 110
    assert max(b.train.stats()["max_len"], b.valid.stats()["max_len"]) == 1261  # kept whole
    _assert_bundle(b)
    b3 = load_bundle(DATA / "statics2011", "line3", fold=3)
    assert len(b3.train) + len(b3.valid) == 229
    _assert_bundle(b3)


@needs_data
def test_real_pykt_assist2015():
    tv, test = read_pykt(DATA / "assist2015"), read_pykt(DATA / "assist2015", "test")
    assert (len(tv), tv.num_interactions) == (15_275, 544_339)
    assert (len(test), test.num_interactions) == (3818, 138_458)
    b = load_bundle(DATA / "assist2015", "pykt", fold=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (12_220, 3055, 3818) and b.num_c == 100
    assert all(s.fold == 2 for s in b.valid.students)
    _assert_bundle(b)


# --- published layouts (issue 13): AKT folds, DTransformer .txt, auto detection --------------

# The first record of arghosh/AKT data/assist2009_pid/assist2009_pid_test3.csv: its first line is
# an identifier pair (index, student id), not the length.
AKT_RECORD = (
    "1274,82295\n1366,1366,1424,1424,1413,1413,2985,2976,2993,2975\n"
    "7,9,7,9,7,9,15,15,15,15\n1,1,0,0,1,1,0,1,1,1\n"
)


def _records_text(ds: KTDataset, header: str = "id", base: int = 1, comma: str = "") -> str:
    """`ds` in the 3-line (no pid) or 4-line layout, with AKT-style identifier lines or lengths."""
    out = []
    for i, s in enumerate(ds.students):
        out.append(f"{1000 + 7 * i},{80000 + s.uid}" if header == "id" else str(len(s)))
        ids = [s.q] if s.pid is None else [s.pid, s.q]
        out += [",".join(map(str, v + base)) + comma for v in ids]
        out.append(",".join(map(str, s.r)) + comma)
    return "\n".join(out) + "\n"


def _akt_folder(root: Path, name: str, ds: KTDataset, header: str) -> list[KTDataset]:
    """AKT's per-fold files for folds 1 and 2: test{k} is part k, valid{k} = test{k+1}."""
    folder = root / name
    folder.mkdir()
    parts = [ds.subset(range(i, len(ds), 5)) for i in range(5)]
    for k in (1, 2):
        test, valid = parts[k - 1], parts[k % 5]
        train = ds.subset([i for i in range(len(ds)) if i % 5 not in (k - 1, k % 5)])
        for split, part in (("train", train), ("valid", valid), ("test", test)):
            (folder / f"{name}_{split}{k}.csv").write_text(_records_text(part, header))
    return parts


def _same_students(a: KTDataset, b: KTDataset) -> None:
    """The same interactions in the same order (uids may differ)."""
    assert len(a) == len(b)
    for s, t in zip(a.students, b.students, strict=True):
        np.testing.assert_array_equal(s.q, t.q)
        np.testing.assert_array_equal(s.r, t.r)
        assert (s.pid is None) == (t.pid is None)
        if s.pid is not None:
            np.testing.assert_array_equal(s.pid, t.pid)


def test_akt_identifier_line_is_not_the_length(tmp_path):
    path = _write(tmp_path, "akt.csv", AKT_RECORD)
    d = read_line4(path)  # header="auto": an identifier line
    assert len(d.students[0]) == 10 and d.meta["raw_uid"] == {0: "1274,82295"}
    np.testing.assert_array_equal(d.students[0].q[:3], [6, 8, 6])  # 1-based skill ids 7, 9, 7
    with pytest.raises(
        ValueError, match=r"akt\.csv line 2: found 10 problem ids, but header line 1 says n=1274$"
    ):
        read_line4(path, header="length")  # today's behaviour, on request


def test_akt_4line_per_fold_files(tmp_path):
    ds = _toy(30, seed=2)
    parts = _akt_folder(tmp_path, "assist2009_pid", ds, header="id")
    d = tmp_path / "assist2009_pid"
    b = load_bundle(d, "line4", fold=1)
    _same_students(b.test, parts[0])
    _same_students(b.valid, parts[1])
    assert len(b.train) == 18 and b.data_format == "line4"
    assert b.test.meta["raw_uid"][b.test.students[0].uid] == "1000,80000"  # the id line, kept
    assert "line4 (id header lines, 1-based, per-fold test files)" in b.protocol
    files = "assist2009_pid_train1.csv, valid = assist2009_pid_valid1.csv"
    assert files in b.protocol and "test = assist2009_pid_test1.csv" in b.protocol
    _assert_bundle(b)
    b2 = load_bundle(d, "line4", fold=2)
    _same_students(b2.test, parts[1])  # valid1 is test2
    assert "test = assist2009_pid_test2.csv" in b2.protocol
    auto = load_bundle(d, "auto", fold=1)
    expect = (
        "assist2009_pid (auto -> line4 (id header lines, 1-based, per-fold test files), seed 0)"
    )
    assert auto.protocol.startswith(expect) and auto.data_format == "line4"
    for x, y in ((auto.train, b.train), (auto.valid, b.valid), (auto.test, b.test)):
        _assert_same(x, y)
    with pytest.raises(FileNotFoundError, match=r"per-fold files \(assist2009_pid_train1\.csv"):
        load_bundle(d, "auto")  # no single train file: a fold must be chosen


def test_akt_3line_per_fold_files(tmp_path):
    ds = _toy(25, seed=4, pid=False)
    parts = _akt_folder(tmp_path, "statics", ds, header="length")
    b = load_bundle(tmp_path / "statics", "auto", fold=2)
    expect = "statics (auto -> line3 (length header lines, 1-based, per-fold test files), seed 0)"
    assert b.protocol.startswith(expect) and b.data_format == "line3" and b.num_pid == 0
    assert "test = statics_test2.csv" in b.protocol
    _same_students(b.test, parts[1])
    _same_students(b.valid, parts[2])
    _assert_bundle(b)


@pytest.mark.parametrize("layout", ["parent-toml", "folder-toml"])
def test_dtransformer_txt_zero_based_with_datasets_toml(tmp_path, layout):
    ds = _toy(12, seed=3)
    assert min(min(s.q.min(), s.pid.min()) for s in ds.students) == 0
    train, test = ds.subset(range(9)), ds.subset(range(9, 12))
    folder = tmp_path / "data" / "algebra"
    folder.mkdir(parents=True)
    if layout == "parent-toml":  # DTransformer's data/datasets.toml; the section names the files
        names, toml = ("train.txt", "test.txt"), folder.parent / "datasets.toml"
        toml.write_text(
            '[other]\ntrain = "other/train.txt"\nn_questions = 5\n\n[alg]\n'
            'train = "algebra/train.txt"\ntest = "algebra/test.txt"\n'
            'n_questions = 20\nn_pid = 30\ninputs = ["pid", "q", "s"]\n'
        )
        section = "alg"
    else:  # a toml beside `<name>_train.txt`, no inputs: the records tell line4
        names, toml = ("algebra_train.txt", "algebra_test.txt"), folder / "datasets.toml"
        toml.write_text("[algebra05]\nn_questions = 20\nn_pid = 30\n")
        section = "algebra05"
    for part, file in zip((train, test), names, strict=True):
        (folder / file).write_text(_records_text(part, "length", base=0, comma=","))
    b = load_bundle(folder, "auto", seed=1)
    expect = (
        "algebra (auto -> line4 (length header lines, 0-based, single test file, sizes from "
        f"datasets.toml [{section}]), seed 1): train = {names[0]} minus a seeded 20%"
    )
    assert b.protocol.startswith(expect) and b.protocol.endswith(f"test = {names[1]}")
    assert (b.data_format, b.num_c, b.num_pid) == ("line4", 20, 30)  # sizes from the toml
    assert len(b.train) + len(b.valid) == 9
    _same_students(b.test, test)
    _assert_bundle(b)
    toml.write_text(toml.read_text().replace("n_questions = 20", "n_questions = 3"))
    msg = r"train\.txt line \d+: skill id '\d+' is beyond the declared vocabulary num_c=3 \(from"
    with pytest.raises(ValueError, match=msg + rf" datasets\.toml \[{section}\]\)"):
        load_bundle(folder, "auto")
    if layout == "parent-toml":
        with pytest.raises(ValueError, match=r"\[alg\]: inputs .* describe line4 records, but"):
            load_bundle(folder, "line3")


def test_datasets_toml_errors_name_the_file(tmp_path):
    _write(tmp_path, "x_train.txt", "1\n0\n1\n")
    _write(tmp_path, "x_test.txt", "1\n0\n1\n")
    toml = _write(tmp_path, "datasets.toml", "[x]\nn_questions = 4\n\nn_pid = \n")
    with pytest.raises(ValueError, match=r"datasets\.toml line 4: Invalid value"):
        load_bundle(tmp_path, "auto")
    toml.write_text('[x]\nn_questions = "many"\n')
    with pytest.raises(ValueError, match=r"datasets\.toml \[x\]: n_questions = 'many' is not a"):
        load_bundle(tmp_path, "line3")
    toml.write_text('[x]\ninputs = ["q", "s", "pid", "it", "at"]\n')
    with pytest.raises(ValueError, match=r"\[x\]: inputs \['q', 's', 'pid', 'it', 'at'\] is a"):
        load_bundle(tmp_path, "auto")


@pytest.mark.parametrize("pid", [False, True], ids=["line3", "line4"])
def test_zero_based_file_reads_as_the_one_based_one_shifted(tmp_path, pid):
    d = _toy(pid=pid)
    assert min(s.q.min() for s in d.students) == 0  # so the 0-based file shows a 0
    write, read = (write_line4, read_line4) if pid else (write_line3, read_line3)
    kw = {"num_c": d.num_c, **({"num_pid": d.num_pid} if pid else {})}
    write(d, tmp_path / "one.csv")
    write(d, tmp_path / "zero.txt", one_based=False)
    one = read(tmp_path / "one.csv", **kw)
    zero = read(tmp_path / "zero.txt", one_based=None, **kw)  # detected: some id is 0
    _assert_same(d, one)
    _assert_same(one, zero)
    R = 4 if pid else 3  # header, id line(s), responses
    one_text = (tmp_path / "one.csv").read_text().splitlines()
    zero_text = (tmp_path / "zero.txt").read_text().splitlines()
    for i, (x, y) in enumerate(zip(one_text, zero_text, strict=True)):
        shift = 0 if i % R in (0, R - 1) else 1  # only the id lines move
        assert [int(v) for v in x.split(",")] == [int(v) + shift for v in y.split(",")]


def test_identifier_lines_round_trip(tmp_path):
    path = _write(tmp_path, "akt.csv", AKT_RECORD + AKT_RECORD.replace("1274,", "1275,"))
    d = read_line4(path)
    write_line4(d, tmp_path / "back.csv")  # `n,raw id`: the length, then the identifier line
    back = read_line4(tmp_path / "back.csv")
    _assert_same(d, back)
    assert back.meta["raw_uid"] == d.meta["raw_uid"] == {0: "1274,82295", 1: "1275,82295"}


def test_header_detection_and_override(tmp_path):
    # An index that equals the length by chance (record 1) still reads as an identifier line.
    ids = "2,501\n7,8\n1,1\n0,1\n900,502\n7\n1\n1\n901,503\n7,9\n2,2\n1,0\n"
    d = read_line4(_write(tmp_path, "ids.csv", ids))
    assert [len(s) for s in d.students] == [2, 1, 2] and d.meta["raw_uid"][1] == "900,502"
    # Integer-pair headers that are mostly lengths: one wrong record is an error, not ids.
    bad = "2,501\n7,8\n1,1\n0,1\n2,502\n7\n1\n1\n"
    msg = r"bad\.csv line 6: found 1 problem ids, but header line 5 says n=2 \(if each record"
    with pytest.raises(ValueError, match=msg):
        read_line4(_write(tmp_path, "bad.csv", bad))
    assert [len(s) for s in read_line4(tmp_path / "bad.csv", header="id").students] == [2, 1]
    lengths = _write(tmp_path, "len.csv", "3,u9\n1,2,3\n0,1,1\n")
    a, b = read_line3(lengths), read_line3(lengths, header="id")
    _assert_same(a, b)
    assert a.meta["raw_uid"] == {0: "u9"} and b.meta["raw_uid"] == {0: "3,u9"}
    with pytest.raises(ValueError, match=r"line 1: blank line where a record header \(an id"):
        read_line3(_write(tmp_path, "blank.csv", "\n1\n1\n"), header="id")
    with pytest.raises(ValueError, match="header must be one of"):
        read_line3(lengths, header="n")


def test_one_based_is_detected_over_the_whole_bundle(tmp_path):
    train = "".join(f"2\n{i + 1},3\n0,1\n" for i in range(5))  # no 0 here ...
    _write(tmp_path, "t_train.csv", train)
    _write(tmp_path, "t_test.csv", "2\n4,2\n1,1\n2\n0,2\n1,1\n")  # ... but the test file has one
    b = load_bundle(tmp_path, "line3")
    assert "0-based" in b.protocol and b.num_c == 6
    assert sorted(s.q[0] for s in (*b.train.students, *b.valid.students)) == [1, 2, 3, 4, 5]
    assert read_line3(tmp_path / "t_train.csv", one_based=None).num_c == 5  # alone: 1-based
    with pytest.raises(
        ValueError, match=r"t_test\.csv line 5: question id '0' is below 1 \(ids are 1-based; 0-"
    ):
        load_bundle(tmp_path, "auto", one_based=True)


def test_auto_detects_each_layout(tmp_path):
    rows = [f"u{i % 40},s{i % 7},{i % 2},{i}" for i in range(400)]
    log = _write(tmp_path, "log.csv", "user,skill,correct,order\n" + "\n".join(rows) + "\n")
    b = load_bundle(log, "auto", seed=2)
    assert b.protocol.startswith("log (auto -> log (one CSV file), seed 2)")
    assert b.data_format == "log" and (len(b.train), len(b.valid), len(b.test)) == (28, 4, 8)
    pykt = tmp_path / "pykt"
    pykt.mkdir()
    _write(pykt, "train_valid.csv", PYKT_HEADER + PYKT_ROW + PYKT_ROW.replace("0,u", "1,u"))
    _write(pykt, "test.csv", PYKT_HEADER + PYKT_ROW.replace("0,u", "-1,u"))
    b = load_bundle(pykt, "auto")
    assert b.protocol.startswith("pykt (auto -> pykt (train_valid.csv), seed 0)")
    assert b.data_format == "pykt"
    lines = tmp_path / "lines"
    lines.mkdir()
    write_line3(_toy(10, pid=False), lines / "toy_train.csv")
    write_line3(_toy(3, seed=1, pid=False), lines / "toy_test.csv")
    b = load_bundle(lines, "auto")
    assert b.data_format == "line3"
    _assert_bundle(b)
    assert b.protocol.startswith("lines (auto -> line3 (length header lines, 1-based, single")
    # A malformed file: auto picks the reading that gets furthest; its reader names the line.
    _write(lines, "toy_train.csv", "2\n1,2\n0,1\n3\n1,2\n0,1\n")
    with pytest.raises(ValueError, match=r"toy_train\.csv line 5: found 2 question ids, but"):
        load_bundle(lines, "auto")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="found no layout it knows"):
        load_bundle(empty, "auto")


@needs_data
@pytest.mark.skipif(not (DATA / "algebra05").is_dir(), reason="algebra05 absent")
def test_real_algebra05_auto():
    b = load_bundle(DATA / "algebra05", "auto")
    assert b.data_format == "line4" and "0-based" in b.protocol
    assert len(b.train) + len(b.valid) == 570
    assert b.train.num_interactions + b.valid.num_interactions == 59_224
    assert (len(b.test), b.test.num_interactions) == (145, 15_351)
    assert (b.num_c, b.num_pid) == (138, 1084)
    _assert_bundle(b)


@needs_data
def test_real_assist2009_auto_is_line3():
    auto, line3 = (
        load_bundle(DATA / "assist2009", "auto"),
        load_bundle(DATA / "assist2009", "line3"),
    )
    assert auto.data_format == "line3" and auto.protocol == line3.protocol.replace(
        "(line3", "(auto -> line3", 1
    )
    for x, y in ((auto.train, line3.train), (auto.valid, line3.valid), (auto.test, line3.test)):
        _assert_same(x, y)
