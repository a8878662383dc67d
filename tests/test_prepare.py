"""kt_lib.data.prepare on miniature ASSISTments files: counts, ids, order, multi-skill rows, the
pykt split, the ordinal option, both layouts agreeing, errors naming file/line/column, the CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from prepare_helpers import (
    all_students,
    assert_layouts_agree,
    check_counts,
    pykt_rows,
    record,
    write_rows,
)

from kt_lib.data.__main__ import main
from kt_lib.data.formats import load_bundle
from kt_lib.data.prepare import DATASETS, prepare
from kt_lib.data.prepare.core import split_folds

A09 = (
    "order_id,assignment_id,user_id,assistment_id,problem_id,original,correct,attempt_count,"
    "ms_first_response,tutor_mode,answer_type,sequence_id,student_class_id,position,type,"
    "base_sequence_id,skill_id,skill_name,teacher_id,school_id,hint_count,hint_total,"
    "overlap_time,template_id,answer_id,answer_text,first_action,bottom_hint,opportunity,"
    "opportunity_original"
).split(",")
A12 = (
    "problem_log_id,skill,problem_id,user_id,assignment_id,assistment_id,start_time,end_time,"
    "problem_type,original,correct,bottom_hint,hint_count,actions,attempt_count,"
    "ms_first_response,tutor_mode,sequence_id,student_class_id,position,type,base_sequence_id,"
    "skill_id,teacher_id,school_id,overlap_time,template_id,answer_id,answer_text,first_action"
).split(",")
A15 = ["user_id", "log_id", "sequence_id", "correct"]
A17 = (
    "studentId,MiddleSchoolId,InferredGender,action_num,skill,problemId,assignmentId,"
    "assistmentId,startTime,endTime,timeTaken,correct,original,hint,hintCount,hintTotal,"
    "scaffold,bottomHint,attemptCount,problemType"
).split(",")


def _filler(n_students: int, rows: int, **row) -> list[dict]:
    """Regular students 1..n (ids 70001...) of `rows` rows each; `row` maps columns to callables
    of (student, step)."""
    return [
        {k: f(s, j) for k, f in row.items()} for s in range(1, n_students + 1) for j in range(rows)
    ]


def _a09(tmp_path, extra: list[dict] | None = None):
    first = [  # student 70000, in file order; order_id sorts it
        {
            "order_id": 30,
            "user_id": 70000,
            "problem_id": 501,
            "correct": 1,
            "skill_id": "10_13",
            "skill_name": "Équations",
            "answer_text": "½",
        },
        {"order_id": 10, "user_id": 70000, "problem_id": 502, "correct": 0, "skill_id": 13},
        {"order_id": 20, "user_id": 70000, "problem_id": 503, "correct": 1, "skill_id": ""},
        {"order_id": 40, "user_id": 70000, "problem_id": 504, "correct": 1, "skill_id": 20},
    ]
    rest = _filler(
        8,
        3,
        order_id=lambda s, j: 100 + 10 * s + j,
        user_id=lambda s, j: 70000 + s,
        problem_id=lambda s, j: 600 + j,
        correct=lambda s, j: (s + j) % 2,
        skill_id=lambda s, j: 20 if j % 2 else 13,
        attempt_count=lambda s, j: 1,
    )
    short = [
        {"order_id": 900 + j, "user_id": 79999, "problem_id": 700, "correct": 1, "skill_id": 13}
        for j in range(2)
    ]
    rows = first + rest + short + (extra or [])
    return write_rows(
        tmp_path / "skill_builder_data_corrected_collapsed.csv", A09, rows, enc="latin-1"
    )


def test_assist2009_counts_ids_order_and_multi_skill(tmp_path):
    raw = _a09(tmp_path)
    res = prepare("assist2009", raw, tmp_path / "out")
    rec = record(res)
    c = rec["counts"]
    assert c["rows_read"] == 30
    assert c["dropped"]["missing skill_id"] == 1 and sum(c["dropped"].values()) == 1
    assert (c["dropped_students_short"], c["dropped_rows_short"]) == (1, 2)
    assert (c["students"], c["rows"], c["multi_skill_rows"], c["interactions"]) == (9, 27, 1, 28)
    assert (c["skills"], c["problems"], c["test_students"], c["folds"]) == (
        3,
        6,
        1,
        [2, 2, 2, 1, 1],
    )
    check_counts(res)
    assert rec["inputs"][0]["encoding"] == "latin-1"
    assert rec["inputs"][0]["sha256"] == hashlib.sha256(raw.read_bytes()).hexdigest()
    keys = (res.pykt_dir / "keyid2idx.json").read_text()
    assert '"concepts": {"13": 0, "10": 1, "20": 2}' in keys
    q, r, pid = all_students(res)["70000"]
    assert (q, r, pid) == ([0, 1, 0, 2], [0, 1, 1, 1], [0, 1, 1, 2])  # by order_id, 10_13 split
    tv = pd.read_csv(res.pykt_dir / "train_valid.csv", dtype=str)
    assert list(tv.columns) == ["fold", "uid", "questions", "concepts", "responses", "is_repeat"]
    rows = pykt_rows(res)
    assert sorted(rows.index) == [str(70000 + s) for s in range(9)]
    assert rows.loc["70000", "uid"] == "0"  # pykt's uid: the index of first appearance
    assert rows.loc["70000", "is_repeat"] == "0,0,1,0"
    assert res.line_format == "line4"
    assert_layouts_agree(res, 5)


def test_split_is_pykts_sample_then_kfold():
    for n in (7, 17, 23, 40):
        frame = pd.DataFrame({"s": np.arange(n)})
        shuffled = frame.sample(frac=1.0, random_state=1024)
        n_test = int(n * 0.2)
        tv = shuffled[: n - n_test].sample(frac=1.0, random_state=1024)
        sizes = [len(tv) // 5 + (k < len(tv) % 5) for k in range(5)]
        want = np.full(n, -1)
        want[tv["s"].to_numpy()] = np.repeat(np.arange(5), sizes)
        fold, order = split_folds(n, 1024, 0.2, 5)
        np.testing.assert_array_equal(fold, want)
        assert order[: n - n_test].tolist() == tv["s"].tolist()
        assert sorted(order[n - n_test :].tolist()) == sorted(shuffled["s"][n - n_test :])


def test_split_refuses_too_few_students():
    with pytest.raises(ValueError, match="4 students give 0 test students"):
        split_folds(4, 0, 0.2, 5)


def test_assist2009_ordinal(tmp_path):
    cases = [  # (correct, attempt_count, hint_count, bottom_hint) -> K=4 response
        ((1, 1, 0, ""), 3),
        ((0, 2, 0, 0), 2),
        ((0, 1, 1, 0), 1),
        ((0, 3, 0, ""), 1),
        ((0, 4, 3, 1), 0),
        ((0, "", "", ""), 2),
    ]
    extra = [
        {
            "order_id": 2000 + i,
            "user_id": 80000,
            "problem_id": 800 + i,
            "skill_id": 13,
            "correct": c,
            "attempt_count": a,
            "hint_count": h,
            "bottom_hint": b,
        }
        for i, ((c, a, h, b), _) in enumerate(cases)
    ]
    res = prepare("assist2009", _a09(tmp_path, extra), tmp_path / "out", ordinal=True)
    assert res.K == 4 and record(res)["K"] == 4
    assert all_students(res)["80000"][1] == [want for _, want in cases]
    assert_layouts_agree(res, 5)


def _a12_rows():
    rows = _filler(
        9,
        3,
        user_id=lambda s, j: s,
        problem_id=lambda s, j: 40 + j,
        skill_id=lambda s, j: 7 + j % 2,
        start_time=lambda s, j: f"2012-09-{10 + s:02d} 10:0{3 - j}:00.0",
        correct=lambda s, j: j % 2,
        ms_first_response=lambda s, j: 1000 * (j + 1),
    )
    rows[0]["ms_first_response"] = ""  # pykt drops rows without it
    rows[3]["correct"] = "0.5"  # not 0/1
    rows[4]["start_time"] = "2012-09-11 10:02:00"  # no fraction of a second
    return rows


def test_assist2012_time_order_usetimes_and_drops(tmp_path):
    raw = write_rows(tmp_path / "2012-2013-data-with-predictions-4-final.csv", A12, _a12_rows())
    res = prepare("assist2012", raw, tmp_path / "out")
    c = record(res)["counts"]
    assert c["dropped"]["missing ms_first_response"] == 1
    assert c["dropped"]["correct not 0/1"] == 1
    assert (c["students"], c["dropped_students_short"], c["interactions"]) == (7, 2, 21)
    check_counts(res)
    row = pykt_rows(res).loc["3"]
    assert row["usetimes"] == "3000,2000,1000"  # start_time runs backwards in the file
    stamps = [int(t) for t in row["timestamps"].split(",")]
    assert stamps == sorted(stamps) and stamps[1] - stamps[0] == 60_000
    assert_layouts_agree(res, 5)


def test_assist2015_fractional_correct_and_no_problems(tmp_path):
    rows = _filler(
        8,
        5,
        user_id=lambda s, j: 50 + s,
        log_id=lambda s, j: 1000 - 10 * s - j,
        sequence_id=lambda s, j: 5965 + j % 3,
        correct=lambda s, j: int(j in (0, 3)),
    )
    rows[1]["correct"] = "0.25"
    rows[2]["correct"] = "0.75"
    raw = write_rows(tmp_path / "2015_100_skill_builders_main_problems.csv", A15, rows)
    res = prepare("assist2015", raw, tmp_path / "out")
    c = record(res)["counts"]
    assert c["dropped"]["correct not 0/1"] == 2
    assert (c["students"], c["interactions"], c["problems"]) == (8, 38, 0)
    check_counts(res)
    assert res.line_format == "line3"
    assert (res.line_dir / "assist2015_valid4.csv").is_file()
    head = (res.line_dir / "assist2015_test.csv").read_text().splitlines()[0]
    assert head.split(",")[1] in {str(50 + s) for s in range(1, 9)}  # `n,raw_uid`
    assert all_students(res)["51"][1] == [0, 1, 1]  # j = 4, 3, 0: log_id falls as j rises
    assert_layouts_agree(res, 5)


def test_assist2017_seconds_skills_and_ordinal(tmp_path):
    rows = _filler(
        7,
        3,
        studentId=lambda s, j: s,
        problemId=lambda s, j: 90 + j,
        skill=lambda s, j: ("noskill", "area_perimeter", "properties-of-geometric-figures")[2 - j],
        startTime=lambda s, j: 1100000000 + 100 * s - j,
        timeTaken=lambda s, j: 1.5 * j,
        correct=lambda s, j: int(j == 0),
        hintCount=lambda s, j: j,
        attemptCount=lambda s, j: 1,
        bottomHint=lambda s, j: int(j == 2),
    )
    raw = write_rows(tmp_path / "anonymized_full_release_competition_dataset.csv", A17, rows)
    res = prepare("assist2017", raw, tmp_path / "out", ordinal=True)
    q, r, pid = all_students(res)["1"]
    assert r == [0, 1, 1, 3]  # startTime falls with j: bottom hint, hint (2 skills), right
    c = record(res)["counts"]
    assert (c["skills"], c["multi_skill_rows"], c["interactions"]) == (4, 7, 7 * 4)
    assert q == [0, 1, 2, 3] and pid[1] == pid[2]  # area_perimeter: split on "_" as pykt does
    keys = json.loads((res.pykt_dir / "keyid2idx.json").read_text())
    assert list(keys["concepts"])[:3] == ["noskill", "area", "perimeter"]
    check_counts(res)
    assert_layouts_agree(res, 5)


def test_errors_name_file_line_and_column(tmp_path):
    raw = write_rows(tmp_path / "a15.csv", ["user_id", "log_id", "sequence_id"], [{}])
    with pytest.raises(ValueError, match=r"a15.csv line 1: missing column\(s\) \['correct'\]"):
        prepare("assist2015", raw, tmp_path / "o")
    rows = [{"user_id": 1, "log_id": j, "sequence_id": 3, "correct": 1} for j in range(4)]
    rows[3]["correct"] = "yes"
    raw = write_rows(tmp_path / "b15.csv", A15, rows)
    with pytest.raises(ValueError, match=r"b15.csv line 5, column 'correct': 'yes' is not a num"):
        prepare("assist2015", raw, tmp_path / "o")
    rows = _a12_rows()
    rows[6]["start_time"] = "yesterday"
    raw = write_rows(tmp_path / "c12.csv", A12, rows)
    with pytest.raises(ValueError, match=r"c12.csv line 8, column 'start_time': 'yesterday'"):
        prepare("assist2012", raw, tmp_path / "o")
    path = tmp_path / "f15.csv"  # a row of empty cells is a row; a blank line is not
    path.write_text("user_id,log_id,sequence_id,correct\n1,1,3,1\n,,,\n3,1,1,x\n")
    with pytest.raises(ValueError, match=r"f15.csv line 4, column 'correct': 'x' is not a"):
        prepare("assist2015", path, tmp_path / "o")
    path.write_text("user_id,log_id,sequence_id,correct\n1,1,3,1\n,,,\n \t\n\n3,1,1,x\n")
    with pytest.raises(ValueError, match=r"f15.csv line 6, column 'correct': 'x' is not a"):
        prepare("assist2015", path, tmp_path / "o")
    path.write_text("user_id\tlog_id\tsequence_id\tcorrect\n1\t1\t3\t1\n\t\t\t\n \n3\t1\t1\tx\n")
    with pytest.raises(ValueError, match=r"f15.csv line 5, column 'correct': 'x' is not a"):
        prepare("assist2015", path, tmp_path / "o")  # tabs: a line of empty cells is a row
    path.write_text("user_id\tlog_id\tsequence_id\tcorrect\n1\t1\t3\t1\n\t\n3\t1\t1\t1\n")
    with pytest.raises(
        ValueError, match=r"f15.csv line 3: 2 fields, but the header \(line 1\) has 4: "
    ):
        prepare("assist2015", path, tmp_path / "o")  # a line of one tab: a row of 2 fields
    (tmp_path / "e15.csv").write_text("user_id,log_id,sequence_id,correct\n")
    with pytest.raises(ValueError, match=r"e15.csv line 2: no data rows after the header"):
        prepare("assist2015", tmp_path / "e15.csv", tmp_path / "o")
    path = tmp_path / "d15.csv"
    path.write_text("user_id,log_id,sequence_id,correct\n1,1,3,1\n1,2,3,1,7\n")
    with pytest.raises(
        ValueError, match=r"d15.csv line 3: 5 fields, but the header \(line 1\) has 4"
    ):
        prepare("assist2015", path, tmp_path / "o")
    with pytest.raises(ValueError, match="assist2015 has no partial-credit columns"):
        prepare("assist2015", raw, tmp_path / "o", ordinal=True)
    with pytest.raises(ValueError, match="unknown dataset 'assist2010'"):
        prepare("assist2010", raw, tmp_path / "o")
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['folds'\]"):
        prepare("assist2015", raw, tmp_path / "o", folds=3)
    with pytest.raises(FileNotFoundError, match="no assist2009"):
        prepare("assist2009", tmp_path, tmp_path / "o")


def test_cli_prepares_and_reports_errors(tmp_path, capsys):
    rows = _filler(
        6,
        3,
        user_id=lambda s, j: s,
        log_id=lambda s, j: j,
        sequence_id=lambda s, j: j,
        correct=lambda s, j: 1,
    )
    raw = write_rows(tmp_path / "2015_100_skill_builders_main_problems.csv", A15, rows)
    out = tmp_path / "out"
    assert main(["prepare", "assist2015", str(tmp_path), str(out), "--folds", "2"]) == 0
    assert "assist2015: 18 rows read" in capsys.readouterr().out
    assert record_path_ok(out)
    assert main(["prepare", "assist2009", str(raw), str(out)]) == 2
    assert "missing column(s)" in capsys.readouterr().err
    cmd = [sys.executable, "-m", "kt_lib.data", "prepare", "--help"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "NAME" not in done.stdout and "assist2009" in done.stdout and "--ordinal" in done.stdout


def record_path_ok(out) -> bool:
    return (out / "prepare.json").is_file() and (out / "pykt" / "train_valid.csv").is_file()


def _a15_rows(n_students: int = 10) -> list[dict]:
    return _filler(
        n_students,
        4,
        user_id=lambda s, j: s,
        log_id=lambda s, j: 10 * s + j,
        sequence_id=lambda s, j: j,
        correct=lambda s, j: (s + j) % 2,
    )


def test_auto_reads_the_pykt_subfolder_of_a_prepared_folder(tmp_path):
    raw = write_rows(tmp_path / "raw.csv", A15, _a15_rows())
    res = prepare("assist2015", raw, tmp_path / "a15", n_folds=2, min_seq_len=1)
    b = load_bundle(tmp_path / "a15", "auto")
    assert "auto -> pykt (subfolder pykt/ of a folder of layouts: line3/ (3/4-line), " in b.protocol
    assert b.name == "a15/pykt" and b.data_dir == str(res.pykt_dir)
    want = res.bundle(0)
    assert [s.q.tolist() for s in b.test.students] == [s.q.tolist() for s in want.test.students]
    (tmp_path / "a15" / "old").mkdir()
    (tmp_path / "a15" / "old" / "train_valid.csv").write_text("fold,concepts,responses\n0,1,1\n")
    with pytest.raises(
        ValueError,
        match=r"subfolders holding layouts: line3/ \(3/4-line\), "
        r"old/ \(pykt\), pykt/ \(pykt\); pass one of them",
    ):
        load_bundle(tmp_path / "a15", "auto")


def test_reprepare_with_fewer_folds_leaves_no_file_of_the_old_split(tmp_path, capsys):
    raw = write_rows(tmp_path / "raw.csv", A15, _a15_rows())
    out = tmp_path / "out"
    res = prepare("assist2015", raw, out, n_folds=5)
    assert (res.line_dir / "assist2015_valid5.csv").is_file()
    (res.line_dir / "notes.txt").write_text("mine")  # not the writer's: kept
    (res.line_dir / "mydata_train9.csv").write_text("1\n1\n1\n")  # no dataset's name: kept
    (out / "line4").mkdir()  # an earlier preparation's other layout
    (out / "line4" / "assist2009_train.csv").write_text("1\n1\n1\n1\n")
    argv = ["prepare", "assist2015", str(raw), str(out), "--folds", "3", "--seed", "7"]
    assert main(argv) == 0
    capsys.readouterr()
    names = sorted(f.name for f in res.line_dir.iterdir())
    want = ["assist2015_test.csv", "assist2015_train.csv"]
    want += [f"assist2015_{s}{k}.csv" for k in (1, 2, 3) for s in ("train", "valid")]
    assert names == sorted([*want, "notes.txt", "mydata_train9.csv"])
    assert not (out / "line4").exists()
    for fold in (4, 5):
        with pytest.raises(
            FileNotFoundError, match=f"no file matching 'assist2015_train{fold}.csv'"
        ):
            load_bundle(res.line_dir, "line3", fold=fold, prefix="assist2015")
    res3 = prepare("assist2015", raw, out, n_folds=3, seed=7)
    assert len(record(res3)["counts"]["folds"]) == 3
    assert_layouts_agree(res3, 3)
    with pytest.raises(ValueError, match="has no fold 3"):
        res3.bundle(3, "pykt")


def test_a_reprepare_stopped_midway_leaves_the_earlier_split_whole(tmp_path, monkeypatch):
    """Files were written in place one by one: stopped midway, a folder held train files of one
    seed beside test files of another, sharing students, and loaded without a word (a review).
    Now everything is staged and moved in once written."""
    from kt_lib.data.prepare import write as write_module

    write_line3 = write_module.write_line3
    raw = write_rows(tmp_path / "raw.csv", A15, _a15_rows())
    out = tmp_path / "out"
    first = prepare("assist2015", raw, out, seed=1024)
    before = {f.relative_to(out): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    calls = []

    def stop_at_the_third(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return write_line3(*args, **kw)

    monkeypatch.setattr(write_module, "write_line3", stop_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        prepare("assist2015", raw, out, seed=7)
    after = {f.relative_to(out): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    assert after == before  # the first preparation, whole; no staging folder left
    b = first.bundle(1, "lines")
    test = {s.uid for s in b.test.students}
    assert not test & {s.uid for s in b.train.students}
    monkeypatch.undo()
    again = prepare("assist2015", raw, out, seed=7)  # and a whole run still replaces it
    assert record(again)["options"]["seed"] == 7
    assert_layouts_agree(again, 5)


def test_options_of_another_dataset_are_refused(tmp_path, capsys):
    raw = write_rows(tmp_path / "raw.csv", A15, _a15_rows())
    with pytest.raises(ValueError, match="max_users is an option of ednet only; assist2015 does"):
        prepare("assist2015", raw, tmp_path / "o", max_users=5)
    with pytest.raises(ValueError, match="task is an option of eedi only; assist2015 does not"):
        prepare("assist2015", raw, tmp_path / "o", task="3_4")
    argv = ["prepare", "assist2015", str(raw), str(tmp_path / "o")]
    assert main([*argv, "--max-users", "5"]) == 2
    assert "max_users is an option of ednet only" in capsys.readouterr().err
    assert main([*argv, "--task", "3_4"]) == 2
    assert "task is an option of eedi only" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_output_path_that_is_not_a_folder_is_refused_before_reading(tmp_path, monkeypatch):
    raw = write_rows(tmp_path / "raw.csv", A15, _a15_rows())
    (tmp_path / "file").write_text("keep")
    with pytest.raises(ValueError, match=r"file: the output path exists and is not a folder"):
        prepare("assist2015", raw, tmp_path / "file")
    with pytest.raises(ValueError, match=r"file: exists and is not a folder, so the output .*sub"):
        prepare("assist2015", raw, tmp_path / "file" / "sub")
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "pykt").write_text("")
    with pytest.raises(ValueError, match=r"pykt: exists and is not a folder; the output"):
        prepare("assist2015", raw, tmp_path / "o")

    def unread(path, opts):
        raise AssertionError("the raw file was read")

    monkeypatch.setitem(DATASETS, "assist2015", unread)
    with pytest.raises(ValueError, match="the output path exists and is not a folder"):
        prepare("assist2015", raw, tmp_path / "file")
    assert main(["prepare", "assist2015", str(raw), str(tmp_path / "file")]) == 2
    assert (tmp_path / "file").read_text() == "keep"
