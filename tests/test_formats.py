"""Data layer: readers and writers, round trips, input errors named by file, line and value,
the rules every reader shares."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kt_lib.data import (
    load_bundle,
    read_line3,
    read_line4,
    read_log,
    read_pykt,
    split_students,
    write_line3,
    write_line4,
)
from tests.formats_support import (
    PYKT_HEADER,
    PYKT_ROW,
    assert_same_dataset,
    toy_dataset,
    write_file,
)

# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 4])
def test_line3_round_trip(tmp_path, K):
    d = toy_dataset(K=K, pid=False)
    write_line3(d, tmp_path / "d.csv")
    assert_same_dataset(d, read_line3(tmp_path / "d.csv", num_c=d.num_c, K=K))


def test_line4_round_trip(tmp_path):
    d = toy_dataset()
    write_line4(d, tmp_path / "d.csv")
    back = read_line4(tmp_path / "d.csv", num_c=d.num_c, num_pid=d.num_pid)
    assert_same_dataset(d, back)
    assert back.meta["raw_uid"] == {s.uid: str(s.uid) for s in d.students}


def test_vocabulary_inferred_from_max_id(tmp_path):
    path = write_file(tmp_path, "a.csv", "3,extra,fields\n1,5,2,\n0,1,1,\n\n\n")
    d = read_line3(path, uid_offset=10)
    assert d.num_c == 5 and d.students[0].uid == 10
    np.testing.assert_array_equal(d.students[0].q, [0, 4, 1])


def test_write_is_atomic(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("old")
    with pytest.raises(ValueError, match="problem ids"):
        write_line4(toy_dataset(pid=False), path)
    assert path.read_text() == "old"  # a failed write leaves the old file intact
    write_line3(toy_dataset(pid=False), path)
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
    path = write_file(tmp_path, "assist_train.csv", text)
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
    path = write_file(tmp_path, "akt.csv", text)
    with pytest.raises(ValueError, match=rf"akt\.csv line {line}\b.*{re.escape(value)}"):
        read_line4(path, **kw)


def test_pykt_minimal_columns(tmp_path):
    write_file(tmp_path, "test.csv", 'concepts,responses\n"0,2","1,0"\n')
    d = read_pykt(tmp_path / "test.csv")
    assert d.num_c == 3 and d.students[0].fold == -1 and d.meta == {}


def test_pykt_reads_pid_fold_and_drops_padding(tmp_path):
    write_file(
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
    write_file(tmp_path, "train_valid.csv", PYKT_HEADER + rows if rows else "")
    with pytest.raises(ValueError, match=rf"train_valid\.csv line {line}\b.*{re.escape(value)}"):
        read_pykt(tmp_path)


LOG = (
    "user,skill,problem,correct,order\n"
    "b,s2,p1,2,3\na,s1,p1,0,2\nb,s1,p2,1,1\na,s3,p3,1,1\nb,s1,p2,0,3\n"
)


def test_log_sorts_and_maps(tmp_path):
    d = read_log(write_file(tmp_path, "log.csv", LOG), problem="problem", K=3)
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
    path = write_file(tmp_path, "log.csv", text)
    with pytest.raises(ValueError, match=rf"log\.csv line {line}\b.*{re.escape(value)}"):
        read_log(path, **kw)


def test_log_with_the_usual_column_names_loads_and_says_what_it_mapped(tmp_path):
    """student/question/skill/correct/timestamp: the common names map without a flag; the same
    log with our names gives the same students; unknown names get the flag that maps them."""
    ours = read_log(write_file(tmp_path, "ours.csv", LOG), K=3)
    theirs_text = LOG.replace(
        "user,skill,problem,correct,order", "Student,skill,question,correct,timestamp"
    )
    theirs = read_log(write_file(tmp_path, "theirs.csv", theirs_text), K=3)
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
    odd = write_file(tmp_path, "odd.csv", theirs_text.replace("Student", "who"))
    with pytest.raises(ValueError, match=r"no column for user .*--columns user=COL"):
        read_log(odd, K=3)
    mapped = read_log(odd, user="who", K=3)  # the Python form of --columns user=who
    assert mapped.meta["columns"]["user"] == "who" and len(mapped) == 2
    no_order = read_log(write_file(tmp_path, "plain.csv", "user,kc,score\na,s,1\na,t,0\n"))
    assert no_order.meta["columns"]["order"] is None  # file order, said in meta
    np.testing.assert_array_equal(no_order.students[0].q, [0, 1])


# --- bad-input audit (issue 15): rules every reader shares ----------------------------------

LOG_HEADER = "user,skill,correct,order\n"


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
    write_file(tmp_path, "test.csv", PYKT_HEADER + PYKT_ROW.replace("0,u", "-1,u"))
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
        ("line3", b"2\r1,2\r0,\xff1\r", 3),  # old Mac line ends: lines counted as read
    ],
    ids=["line3", "line4-bom", "pykt", "log", "line3-cr"],
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
        # int() takes the separators U+001C-U+001F as blanks, numpy does not (a review)
        ("line3", "2\n1,\x1c2\n0,1\n", 2, r"question id '\x1c2' is not an integer"),
        ("pykt", PYKT_HEADER + '0,u,"1,2","1,\x1f2","0,1","1,1"\n', 2, r"concepts '\x1f2' is not"),
    ],
    ids=[
        "line3-1_0",
        "line3-n-1_0",
        "line3-arabic-3",
        "line3-overflow",
        "pykt-1_0",
        "pykt-overflow",
    ]
    + ["pykt-fold-0.0", "log-1.0", "line3-x1c", "pykt-x1f"],
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
    path = write_file(tmp_path, name, PYKT_HEADER + PYKT_ROW if fmt == "pykt" else "1\n1\n1\n")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(path))}: data_format='{fmt}' reads a folder"
    ):
        load_bundle(path, fmt)


def test_tiny_data_refuses_an_empty_split(tmp_path):
    rows = "".join(f"u{i},s,1,1\n" for i in range(3))
    path = write_file(tmp_path, "log.csv", LOG_HEADER + rows)
    msg = r"3 students split by fractions \(0\.7, 0\.1, 0\.2\) leave the valid part \(0\.1 of"
    with pytest.raises(ValueError, match=msg):
        load_bundle(path, "log")
    with pytest.raises(ValueError, match="2 students .* the valid part"):
        split_students(toy_dataset(2), (0.8, 0.2))
    assert [len(p) for p in split_students(toy_dataset(2), (1.0, 0.0))] == [2, 0]  # asked for none


def test_log_columns_are_refused_for_another_layout(tmp_path):
    """`--columns` (the log reader's column roles) given for a folder that reads as pykt, found
    by `auto` or named: one clear error, not the pykt reader's unknown keyword (a review)."""
    write_file(tmp_path, "train_valid.csv", PYKT_HEADER + '0,u7,"3,4","1,2","0,1","1,1"\n')
    for fmt in ("auto", "pykt"):
        with pytest.raises(ValueError, match=r"column names \['user'\] are read from a log file"):
            load_bundle(tmp_path, fmt, user="student")


def test_pykt_refuses_a_padding_concept_beside_a_real_response(tmp_path):
    """-1 is pyKT's padding in concepts and responses alike; a -1 concept with a real answer was
    dropped without a word (an interaction lost)."""
    write_file(tmp_path, "train_valid.csv", PYKT_HEADER + '0,u,"1,-1,3","1,-1,3","1,0,1","1,1,1"\n')
    with pytest.raises(
        ValueError, match=r"train_valid.csv line 2: concept -1 .* with response 0: "
    ):
        read_pykt(tmp_path)


def test_the_id_base_is_the_folders_under_every_fold(tmp_path):
    """Ids are 0-based when any file of the folder holds a 0: a 0 in fold 1's valid file only
    made fold 1 read every file 0-based and fold 2 1-based, shifting the same test file's ids."""
    rec = "2\n{}\n1,0\n"
    files = {"x_train.csv": rec.format("1,2") * 4 + rec.format("2,3"),
             "x_test.csv": rec.format("1,3"),
             "x_train1.csv": rec.format("2,3"), "x_valid1.csv": rec.format("0,2"),
             "x_train2.csv": rec.format("1,2"), "x_valid2.csv": rec.format("2,3")}  # fmt: skip
    for name, text in files.items():
        write_file(tmp_path, name, text)
    tests = [load_bundle(tmp_path, "line3", fold=f).test.students[0].q.tolist() for f in (1, 2)]
    whole = load_bundle(tmp_path, "line3").test.students[0].q.tolist()
    assert tests == [[1, 3], [1, 3]] and whole == [1, 3]  # 0-based everywhere: the folder's 0


@pytest.mark.parametrize(
    ("rows", "line", "value"),
    [
        # pyKT's *_window_sequences.csv: context steps (scored in an earlier window) carry
        # selectmask -1; they were dropped as padding and the window read as a student
        ('0,7,"1,1,1,1","3,4,5,6","1,0,1,1","-1,-1,1,1"\n', 2, "selectmask -1 beside concept 3"),
        # a -1 step before a real one is a gap, not padding: it was dropped unseen
        ('0,7,"1,-1,1","3,-1,5","1,-1,1","1,-1,1"\n', 2, "concept -1 (pyKT's padding) before"),
        # pyKT's *_sequences.csv cut a student into rows: each was read as a student
        (
            '0,7,"1,1","3,4","1,0","1,1"\n1,7,"1","5","1","1"\n',
            3,
            "uid '7' again (first on line 2)",
        ),
    ],
    ids=["window-context", "gap", "chunked"],
)
def test_pykt_refuses_the_layouts_that_are_not_one_row_a_student(tmp_path, rows, line, value):
    _raises("pykt", tmp_path, PYKT_HEADER + rows, line, value)
    trailing = PYKT_HEADER + '0,7,"1,1,-1","3,4,-1","1,0,-1","1,1,-1"\n1,8,"1","5","1","1"\n'
    assert [len(x) for x in _read("pykt", tmp_path, trailing).students] == [2, 1]  # padding ends


def test_a_pykt_folder_whose_test_file_lacks_the_problem_ids_is_refused(tmp_path):
    """train_valid.csv with `questions`, test.csv without: the model trained on problem ids and
    was scored without them, said nowhere (a review)."""
    write_file(tmp_path, "train_valid.csv", PYKT_HEADER + PYKT_ROW + PYKT_ROW.replace("0,u", "1,v"))
    write_file(tmp_path, "test.csv", 'fold,uid,concepts,responses\n-1,w,"1,2","0,1"\n')
    with pytest.raises(
        ValueError, match="train_valid.csv has a 'questions' column .* test.csv has none"
    ):
        load_bundle(tmp_path, "pykt")


def test_log_ids_equal_as_integers_but_not_as_text_are_refused(tmp_path):
    """'007' and '7' were one user when every cell of the column was an integer, two otherwise."""
    text = LOG_HEADER + "007,s1,1,1\n7,s2,0,2\n"
    _raises("log", tmp_path, text, 3, "user '7' is the id '007' of line 2 as an integer")
    same = _read("log", tmp_path, LOG_HEADER + "007,s1,1,1\n007,s2,0,2\n012,s1,1,1\n")
    assert [len(x) for x in same.students] == [2, 1]  # written one way: integers, as before


@pytest.mark.parametrize("num_c", [2.5, "3", -1, True])
def test_a_declared_size_is_a_whole_number(tmp_path, num_c):
    with pytest.raises(ValueError, match=r"num_c=.*: a declared size is a whole number >= 0"):
        _read("line3", tmp_path, "3\n1,2,3\n0,1,1\n", num_c=num_c)
