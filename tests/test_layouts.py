"""Data layer: the real datasets (MANIFEST.md figures) and the published layouts (AKT folds,
DTransformer .txt, pyKT CSV, auto detection)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kt_lib.data import (
    KTDataset,
    load_bundle,
    read_line3,
    read_line4,
    read_pykt,
    write_line3,
    write_line4,
)
from tests.formats_support import (
    DATA,
    PYKT_HEADER,
    PYKT_ROW,
    assert_bundle_disjoint,
    assert_same_dataset,
    needs_data,
    toy_dataset,
    write_file,
)

# --- the real datasets (MANIFEST.md figures) --------------------------------------------------


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
    assert_bundle_disjoint(b)
    b3 = load_bundle(DATA / "statics2011", "line3", fold=3)
    assert len(b3.train) + len(b3.valid) == 229
    assert_bundle_disjoint(b3)


@needs_data
def test_real_pykt_assist2015():
    tv, test = read_pykt(DATA / "assist2015"), read_pykt(DATA / "assist2015", "test")
    assert (len(tv), tv.num_interactions) == (15_275, 544_339)
    assert (len(test), test.num_interactions) == (3818, 138_458)
    b = load_bundle(DATA / "assist2015", "pykt", fold=2)
    assert (len(b.train), len(b.valid), len(b.test)) == (12_220, 3055, 3818) and b.num_c == 100
    assert all(s.fold == 2 for s in b.valid.students)
    assert_bundle_disjoint(b)


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
    path = write_file(tmp_path, "akt.csv", AKT_RECORD)
    d = read_line4(path)  # header="auto": an identifier line
    assert len(d.students[0]) == 10 and d.meta["raw_uid"] == {0: "1274,82295"}
    np.testing.assert_array_equal(d.students[0].q[:3], [6, 8, 6])  # 1-based skill ids 7, 9, 7
    with pytest.raises(
        ValueError, match=r"akt\.csv line 2: found 10 problem ids, but header line 1 says n=1274$"
    ):
        read_line4(path, header="length")  # today's behaviour, on request


def test_akt_4line_per_fold_files(tmp_path):
    ds = toy_dataset(30, seed=2)
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
    assert_bundle_disjoint(b)
    b2 = load_bundle(d, "line4", fold=2)
    _same_students(b2.test, parts[1])  # valid1 is test2
    assert "test = assist2009_pid_test2.csv" in b2.protocol
    auto = load_bundle(d, "auto", fold=1)
    expect = (
        "assist2009_pid (auto -> line4 (id header lines, 1-based, per-fold test files), seed 0)"
    )
    assert auto.protocol.startswith(expect) and auto.data_format == "line4"
    for x, y in ((auto.train, b.train), (auto.valid, b.valid), (auto.test, b.test)):
        assert_same_dataset(x, y)
    with pytest.raises(FileNotFoundError, match=r"per-fold files \(assist2009_pid_train1\.csv"):
        load_bundle(d, "auto")  # no single train file: a fold must be chosen


def test_akt_3line_per_fold_files(tmp_path):
    ds = toy_dataset(25, seed=4, pid=False)
    parts = _akt_folder(tmp_path, "statics", ds, header="length")
    b = load_bundle(tmp_path / "statics", "auto", fold=2)
    expect = "statics (auto -> line3 (length header lines, 1-based, per-fold test files), seed 0)"
    assert b.protocol.startswith(expect) and b.data_format == "line3" and b.num_pid == 0
    assert "test = statics_test2.csv" in b.protocol
    _same_students(b.test, parts[1])
    _same_students(b.valid, parts[2])
    assert_bundle_disjoint(b)


@pytest.mark.parametrize("layout", ["parent-toml", "folder-toml"])
def test_dtransformer_txt_zero_based_with_datasets_toml(tmp_path, layout):
    ds = toy_dataset(12, seed=3)
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
    assert_bundle_disjoint(b)
    toml.write_text(toml.read_text().replace("n_questions = 20", "n_questions = 3"))
    msg = r"train\.txt line \d+: skill id '\d+' is beyond the declared vocabulary num_c=3 \(from"
    with pytest.raises(ValueError, match=msg + rf" datasets\.toml \[{section}\]\)"):
        load_bundle(folder, "auto")
    if layout == "parent-toml":
        with pytest.raises(ValueError, match=r"\[alg\]: inputs .* describe line4 records, but"):
            load_bundle(folder, "line3")


def test_datasets_toml_errors_name_the_file(tmp_path):
    write_file(tmp_path, "x_train.txt", "1\n0\n1\n")
    write_file(tmp_path, "x_test.txt", "1\n0\n1\n")
    toml = write_file(tmp_path, "datasets.toml", "[x]\nn_questions = 4\n\nn_pid = \n")
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
    d = toy_dataset(pid=pid)
    assert min(s.q.min() for s in d.students) == 0  # so the 0-based file shows a 0
    write, read = (write_line4, read_line4) if pid else (write_line3, read_line3)
    kw = {"num_c": d.num_c, **({"num_pid": d.num_pid} if pid else {})}
    write(d, tmp_path / "one.csv")
    write(d, tmp_path / "zero.txt", one_based=False)
    one = read(tmp_path / "one.csv", **kw)
    zero = read(tmp_path / "zero.txt", one_based=None, **kw)  # detected: some id is 0
    assert_same_dataset(d, one)
    assert_same_dataset(one, zero)
    R = 4 if pid else 3  # header, id line(s), responses
    one_text = (tmp_path / "one.csv").read_text().splitlines()
    zero_text = (tmp_path / "zero.txt").read_text().splitlines()
    for i, (x, y) in enumerate(zip(one_text, zero_text, strict=True)):
        shift = 0 if i % R in (0, R - 1) else 1  # only the id lines move
        assert [int(v) for v in x.split(",")] == [int(v) + shift for v in y.split(",")]


def test_identifier_lines_round_trip(tmp_path):
    path = write_file(tmp_path, "akt.csv", AKT_RECORD + AKT_RECORD.replace("1274,", "1275,"))
    d = read_line4(path)
    write_line4(d, tmp_path / "back.csv")  # `n,raw id`: the length, then the identifier line
    back = read_line4(tmp_path / "back.csv")
    assert_same_dataset(d, back)
    assert back.meta["raw_uid"] == d.meta["raw_uid"] == {0: "1274,82295", 1: "1275,82295"}


def test_header_detection_and_override(tmp_path):
    # An index that equals the length by chance (record 1) still reads as an identifier line.
    ids = "2,501\n7,8\n1,1\n0,1\n900,502\n7\n1\n1\n901,503\n7,9\n2,2\n1,0\n"
    d = read_line4(write_file(tmp_path, "ids.csv", ids))
    assert [len(s) for s in d.students] == [2, 1, 2] and d.meta["raw_uid"][1] == "900,502"
    # Integer-pair headers that are mostly lengths: one wrong record is an error, not ids.
    bad = "2,501\n7,8\n1,1\n0,1\n2,502\n7\n1\n1\n"
    msg = r"bad\.csv line 6: found 1 problem ids, but header line 5 says n=2 \(if each record"
    with pytest.raises(ValueError, match=msg):
        read_line4(write_file(tmp_path, "bad.csv", bad))
    assert [len(s) for s in read_line4(tmp_path / "bad.csv", header="id").students] == [2, 1]
    lengths = write_file(tmp_path, "len.csv", "3,u9\n1,2,3\n0,1,1\n")
    a, b = read_line3(lengths), read_line3(lengths, header="id")
    assert_same_dataset(a, b)
    assert a.meta["raw_uid"] == {0: "u9"} and b.meta["raw_uid"] == {0: "3,u9"}
    with pytest.raises(ValueError, match=r"line 1: blank line where a record header \(an id"):
        read_line3(write_file(tmp_path, "blank.csv", "\n1\n1\n"), header="id")
    with pytest.raises(ValueError, match="header must be one of"):
        read_line3(lengths, header="n")


def test_one_based_is_detected_over_the_whole_bundle(tmp_path):
    train = "".join(f"2\n{i + 1},3\n0,1\n" for i in range(5))  # no 0 here ...
    write_file(tmp_path, "t_train.csv", train)
    write_file(
        tmp_path, "t_test.csv", "2\n4,2\n1,1\n2\n0,2\n1,1\n"
    )  # ... but the test file has one
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
    log = write_file(tmp_path, "log.csv", "user,skill,correct,order\n" + "\n".join(rows) + "\n")
    b = load_bundle(log, "auto", seed=2)
    assert b.protocol.startswith("log (auto -> log (one CSV file), seed 2)")
    assert b.data_format == "log" and (len(b.train), len(b.valid), len(b.test)) == (28, 4, 8)
    pykt = tmp_path / "pykt"
    pykt.mkdir()
    write_file(pykt, "train_valid.csv", PYKT_HEADER + PYKT_ROW + PYKT_ROW.replace("0,u", "1,v"))
    write_file(pykt, "test.csv", PYKT_HEADER + PYKT_ROW.replace("0,u", "-1,w"))
    b = load_bundle(pykt, "auto")
    assert b.protocol.startswith("pykt (auto -> pykt (train_valid.csv), seed 0)")
    assert b.data_format == "pykt"
    lines = tmp_path / "lines"
    lines.mkdir()
    write_line3(toy_dataset(10, pid=False), lines / "toy_train.csv")
    write_line3(toy_dataset(3, seed=1, pid=False), lines / "toy_test.csv")
    b = load_bundle(lines, "auto")
    assert b.data_format == "line3"
    assert_bundle_disjoint(b)
    assert b.protocol.startswith("lines (auto -> line3 (length header lines, 1-based, single")
    # A malformed file: auto picks the reading that gets furthest; its reader names the line.
    write_file(lines, "toy_train.csv", "2\n1,2\n0,1\n3\n1,2\n0,1\n")
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
    assert_bundle_disjoint(b)


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
        assert_same_dataset(x, y)
