"""kt_lib.data.prepare on miniature KDD Cup 2010, Statics2011, EdNet-KT1 and Eedi files."""

from __future__ import annotations

import json
import random

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
from kt_lib.data.formats import read_line3
from kt_lib.data.prepare import prepare
from kt_lib.data.prepare.ednet import ordinal as ednet_ordinal
from kt_lib.data.prepare.ednet import pick_users

KDD = (
    "Row,Anon Student Id,Problem Hierarchy,Problem Name,Problem View,Step Name,Step Start Time,"
    "First Transaction Time,Correct Transaction Time,Step End Time,Step Duration (sec),"
    "Correct Step Duration (sec),Error Step Duration (sec),Correct First Attempt,Incorrects,"
    "Hints,Corrects"
).split(",")
STATICS = (
    "Row,Sample,Anon Student Id,Problem Hierarchy,Problem Name,Problem View,Step Name,"
    "Step Start Time,First Transaction Time,Correct Transaction Time,Step End Time,"
    "First Attempt,Incorrects,Corrects,Hints,Step Duration (sec),KC (F2011),Opportunity (F2011)"
).split(",")
RULE_A = "[SkillRule: Remove coefficient; {ax+b=c, divide}]"
RULE_B = "[SkillRule: Remove constant; {ax+b=c, positive}]"


def _kdd_rows(kc: str) -> list[dict]:
    t = "2005-09-09 12:{:02d}:00.0"
    first = [  # student A, file order; the time sorts it
        {
            "Anon Student Id": "A0xJ",
            "Problem Name": "LINEQ-1",
            "Step Name": "3(x+2) = 15",
            "First Transaction Time": t.format(24),
            "Correct First Attempt": 1,
            kc: f"{RULE_A}~~{RULE_B}",
        },
        {
            "Anon Student Id": "A0xJ",
            "Problem Name": "LINEQ-1",
            "Step Name": 'x+2 = 5 "check"',
            "First Transaction Time": t.format(25),
            "Correct First Attempt": 0,
            kc: "",
        },
        {
            "Anon Student Id": "A0xJ",
            "Problem Name": "LINEQ-2",
            "Step Name": "x = 3",
            "First Transaction Time": t.format(20),
            "Correct First Attempt": 0,
            kc: "Using simple numbers~~Using large numbers",
        },
        {
            "Anon Student Id": "A0xJ",
            "Problem Name": "LINEQ-2",
            "Step Name": "y, z = 2",
            "First Transaction Time": "2005-09-09 12:30:00",
            "Correct First Attempt": 1,
            kc: "Using simple numbers",
        },
    ]
    rest = [
        {
            "Anon Student Id": f"s{s}",
            "Problem Name": "LINEQ-1",
            "Step Name": f"x = {j}",
            "First Transaction Time": t.format(j),
            "Correct First Attempt": (s + j) % 2,
            kc: "Using simple numbers",
        }
        for s in range(7)
        for j in range(3)
    ]
    return first + rest


@pytest.mark.parametrize(
    ("name", "file", "kc", "extra"),
    [
        ("algebra2005", "algebra_2005_2006_train.txt", "KC(Default)", ["Opportunity(Default)"]),
        (
            "bridge2algebra2006",
            "bridge_to_algebra_2006_2007_train.txt",
            "KC(SubSkills)",
            ["Opportunity(SubSkills)", "KC(KTracedSkills)", "Opportunity(KTracedSkills)"],
        ),
    ],
)
def test_kdd_tabs_tilde_kcs_and_steps(tmp_path, name, file, kc, extra):
    rows = _kdd_rows(kc)
    rows[5]["Correct First Attempt"] = 2  # neither 0 nor 1
    raw = write_rows(tmp_path / "kdd" / file, KDD + [kc, *extra], rows, sep="\t")
    res = prepare(name, tmp_path / "kdd", tmp_path / "out")
    c = record(res)["counts"]
    assert c["dropped"][f"missing {kc}"] == 1
    assert c["dropped"]["Correct First Attempt not 0/1"] == 1
    assert c["dropped_students_short"] == 1  # s0 is left with two rows
    assert (c["students"], c["rows"], c["multi_skill_rows"], c["interactions"]) == (7, 21, 2, 23)
    check_counts(res)
    keys = json.loads((res.pykt_dir / "keyid2idx.json").read_text())
    assert list(keys["concepts"])[:4] == [
        "Using simple numbers",
        "Using large numbers",
        RULE_A,
        RULE_B,
    ]
    assert list(keys["questions"])[:3] == [
        "LINEQ-2----x = 3",
        "LINEQ-1----3(x+2) = 15",
        "LINEQ-2----y, z = 2",
    ]
    q, r, pid = all_students(res)["A0xJ"]
    assert (q, r, pid) == ([0, 1, 2, 3, 0], [0, 0, 1, 1, 1], [0, 0, 1, 1, 2])
    assert record(res)["inputs"][0]["path"] == str(raw)
    assert_layouts_agree(res, 5)


def test_kdd_comma_file_is_refused_with_its_header(tmp_path):
    raw = write_rows(tmp_path / "a.txt", KDD + ["KC(Default)"], _kdd_rows("KC(Default)"))
    with pytest.raises(ValueError, match=r"a.txt line 1: missing column\(s\) \['Anon Student Id'"):
        prepare("algebra2005", raw, tmp_path / "out")


def _statics_rows() -> list[dict]:
    rows = [
        {
            "Anon Student Id": f"Stu_{c}",
            "Problem Name": f"_p{j % 2}",
            "Step Name": f"_e{j}",
            "First Transaction Time": f"2011/01/2{i} 10:0{j}",
            "First Attempt": "correct" if (i + j) % 2 else "incorrect",
        }
        for i, c in enumerate("hgfedcba")
        for j in range(3)
    ]
    rows[0]["First Attempt"] = "hint"  # dropped, as pykt does
    rows[1]["Step Name"] = '"F1, F2 sum"'  # a quoted comma in a comma-separated export
    rows[2]["First Transaction Time"] = "2011/01/20 09:59"  # earliest step of Stu_h
    return rows + [
        {
            "Anon Student Id": "Stu_h",
            "Problem Name": "_p0",
            "Step Name": "_e9",
            "First Transaction Time": "2011/01/20 11:00",
            "First Attempt": "correct",
        }
    ]


def test_statics2011_steps_hints_and_sorted_students(tmp_path):
    raw = write_rows(tmp_path / "AllData_student_step_2011F.csv", STATICS, _statics_rows())
    res = prepare("statics2011", raw, tmp_path / "out")
    c = record(res)["counts"]
    assert c["dropped"]["First Attempt is hint"] == 1
    assert (c["students"], c["interactions"], c["problems"]) == (8, 24, 0)
    check_counts(res)
    keys = json.loads((res.pykt_dir / "keyid2idx.json").read_text())
    assert list(keys["uid"]) == [f"Stu_{c}" for c in "abcdefgh"]  # sorted ids, as pykt
    assert "_p1----F1, F2 sum" in keys["concepts"]
    inv = {v: k for k, v in keys["concepts"].items()}
    q, r, _ = all_students(res)["Stu_h"]
    assert [inv[i] for i in q] == ["_p0----_e2", "_p1----F1, F2 sum", "_p0----_e9"]
    assert r == [0, 1, 1]
    assert res.line_format == "line3"
    test = read_line3(res.line_dir / "statics2011_test.csv")
    folds = pykt_rows(res)["fold"]  # header `n,raw_uid`: the raw ids of pykt's test students
    assert list(test.meta["raw_uid"].values()) == folds.index[folds == "-1"].tolist() != []
    assert_layouts_agree(res, 5)


def test_statics2011_unknown_first_attempt(tmp_path):
    rows = _statics_rows()
    rows[4]["First Attempt"] = "maybe"
    raw = write_rows(tmp_path / "AllData_student_step_2011F.csv", STATICS, rows)
    with pytest.raises(ValueError, match=r"line 6, column 'First Attempt': 'maybe' is not one"):
        prepare("statics2011", raw, tmp_path / "out")


def _ednet(tmp_path):
    d = tmp_path / "ednet"
    write_rows(
        d / "contents" / "questions.csv",
        [
            "question_id",
            "bundle_id",
            "explanation_id",
            "correct_answer",
            "part",
            "tags",
            "deployed_at",
        ],
        [
            {"question_id": "q1", "correct_answer": "a", "tags": "1;2;179"},
            {"question_id": "q2", "correct_answer": "b", "tags": "3"},
            {"question_id": "q3", "correct_answer": "c", "tags": "-1"},
        ],
    )
    cols = ["timestamp", "solving_id", "question_id", "user_answer", "elapsed_time"]
    for u in range(1, 9):
        rows = [
            {
                "timestamp": 1565000000000 + 1000 * (3 - j),
                "solving_id": j,
                "question_id": "q2",
                "user_answer": "b" if j % 2 else "d",
                "elapsed_time": 1000 * (j + u),
            }
            for j in range(3)
        ]
        write_rows(d / "KT1" / f"u{u}.csv", cols, rows)
    write_rows(
        d / "KT1" / "u5.csv",
        cols,
        [
            {
                "timestamp": 1,
                "solving_id": 1,
                "question_id": "q1",
                "user_answer": "a",
                "elapsed_time": 500,
            },
            {
                "timestamp": 2,
                "solving_id": 2,
                "question_id": "q1",
                "user_answer": "",
                "elapsed_time": 900,
            },
            {
                "timestamp": 3,
                "solving_id": 3,
                "question_id": "q3",
                "user_answer": "c",
                "elapsed_time": 900,
            },
            {
                "timestamp": 4,
                "solving_id": 4,
                "question_id": "q9",
                "user_answer": "c",
                "elapsed_time": 900,
            },
            {
                "timestamp": 5,
                "solving_id": 5,
                "question_id": "q2",
                "user_answer": "b",
                "elapsed_time": 99000,
            },
            {
                "timestamp": 6,
                "solving_id": 6,
                "question_id": "q1",
                "user_answer": "d",
                "elapsed_time": 2000,
            },
        ],
    )
    return d


def test_ednet_answer_key_tags_and_ordinal(tmp_path):
    d = _ednet(tmp_path)
    res = prepare("ednet", d, tmp_path / "out")
    c = record(res)["counts"]
    assert c["rows_read"] == 7 * 3 + 6
    assert c["dropped"]["no answer"] == 1
    assert c["dropped"]["question not in the answer key or tagged -1"] == 2
    assert (c["students"], c["multi_skill_rows"], c["interactions"]) == (8, 2, 21 + 3 + 2 + 2)
    check_counts(res)
    q, r, pid = all_students(res)["5"]
    assert r == [1, 1, 1, 1, 0, 0, 0] and len(set(pid)) == 2  # q1 (3 tags), q2, q1 wrong
    assert all_students(res)["2"][1] == [0, 1, 0]  # j = 2, 1, 0: timestamp falls as j rises
    inputs = record(res)["inputs"]
    assert inputs[1]["path"].endswith("u*.csv (8 files)") and len(inputs[1]["sha256"]) == 64
    assert_layouts_agree(res, 5)
    ordinal = prepare("ednet", d, tmp_path / "ord", ordinal=True)
    assert ordinal.K == 3
    # u5's q2 took 99 s, beyond q2's median: right but slow (1); its q1 answers: right, fast (2)
    assert all_students(ordinal)["5"][1] == [2, 2, 2, 1, 0, 0, 0]
    assert_layouts_agree(ordinal, 5)


def test_ednet_ordinal_medians_come_from_train_students_only(tmp_path):
    d = _ednet(tmp_path)
    before = prepare("ednet", d, tmp_path / "a", ordinal=True)
    folds = pykt_rows(before)["fold"]
    test_users = folds.index[folds == "-1"].tolist()
    assert test_users
    for u in test_users:  # the test students now take far longer on every question
        path = d / "KT1" / f"u{u}.csv"
        f = pd.read_csv(path, dtype=str)
        f["elapsed_time"] = "999999999"
        f.to_csv(path, index=False)
    after = prepare("ednet", d, tmp_path / "b", ordinal=True)
    a, b = all_students(before), all_students(after)
    assert set(a) == set(b)
    for u in set(a) - set(test_users):
        assert a[u] == b[u], u
    for u in test_users:  # their own right answers became slow ones
        assert 2 in a[u][1] and 2 not in b[u][1] and 1 in b[u][1]
    log = pd.DataFrame(
        {"problem": list("aabbc"), "usetime": [10, 30, 5, 50, 1], "response": [1, 1, 1, 1, 0]}
    )  # b is answered by test students only: the median of the train rows (20) judges it
    train = np.array([True, True, False, False, False])
    assert ednet_ordinal(log, train).tolist() == [2, 1, 2, 1, 0]


def test_ednet_max_users_follows_pykts_sample_order(tmp_path):
    order = list(range(840473))
    random.Random(2).shuffle(order)
    ids = order[:40:4]  # ten ids pykt meets in this order
    assert pick_users(set(ids) | {840473 + 5}, 3) == ids[:3]
    assert pick_users({9, 2, 30}, None) == [2, 9, 30]
    res = prepare("ednet", _ednet(tmp_path), tmp_path / "out", max_users=7, n_folds=2)
    assert len(all_students(res)) == 7


def _eedi(tmp_path, subject_text="[3, 71, 98, 209]", task="1_2"):
    d = tmp_path / "eedi"
    write_rows(
        d / "metadata" / "subject_metadata.csv",
        ["SubjectId", "Name", "ParentId", "Level"],
        [
            {"SubjectId": 3, "Name": "Maths", "Level": 0},
            {"SubjectId": 71, "Name": "Number", "ParentId": 3, "Level": 1},
            {"SubjectId": 98, "Name": "Factors", "ParentId": 71, "Level": 3},
            {"SubjectId": 209, "Name": "Primes", "ParentId": 71, "Level": 3},
            {"SubjectId": 55, "Name": "Angles", "ParentId": 71, "Level": 3},
        ],
    )
    write_rows(
        d / "metadata" / f"question_metadata_task_{task}.csv",
        ["QuestionId", "SubjectId"],
        [
            {"QuestionId": 10, "SubjectId": f'"{subject_text}"'},
            {"QuestionId": 11, "SubjectId": '"[3, 71, 55]"'},
            {"QuestionId": 12, "SubjectId": '"[3, 71]"'},
        ],
    )
    rows, answers = [], []
    for u in range(8):
        for j, qid in enumerate((10, 11, 12, 11)):
            aid = 100 * u + j
            rows.append(
                {
                    "QuestionId": qid,
                    "UserId": u,
                    "AnswerId": aid,
                    "IsCorrect": j % 2,
                    "CorrectAnswer": 1,
                    "AnswerValue": 2 - j % 2,
                }
            )
            answers.append({"AnswerId": aid, "DateAnswered": f"2019-12-0{8 - j} 17:29:00.000"})
    answers[3]["DateAnswered"] = ""  # user 0 loses one answer time
    write_rows(
        d / "train_data" / f"train_task_{task}.csv",
        ["QuestionId", "UserId", "AnswerId", "IsCorrect", "CorrectAnswer", "AnswerValue"],
        rows,
    )
    write_rows(
        d / "metadata" / f"answer_metadata_task_{task}.csv",
        ["AnswerId", "DateAnswered", "Confidence", "GroupId", "QuizId", "SchemeOfWorkId"],
        answers,
    )
    return d


def test_eedi_level3_subjects_and_answer_times(tmp_path):
    res = prepare("eedi", _eedi(tmp_path), tmp_path / "out")
    c = record(res)["counts"]
    assert c["dropped"]["no DateAnswered for the AnswerId"] == 1
    assert c["dropped"]["no level-3 subject"] == 8
    assert (c["students"], c["dropped_students_short"], c["interactions"]) == (7, 1, 7 * 4)
    check_counts(res)
    keys = json.loads((res.pykt_dir / "keyid2idx.json").read_text())
    assert list(keys["concepts"]) == ["55", "98", "209"]
    q, r, pid = all_students(res)["3"]  # by DateAnswered: 11 (j=3), 11 (j=1), 10 (j=0)
    assert (q, r) == ([0, 0, 1, 2], [1, 1, 0, 0]) and pid == [0, 0, 1, 1]
    assert len(record(res)["inputs"]) == 4
    assert_layouts_agree(res, 5)


def test_eedi_malformed_subject_list(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"question_metadata_task_1_2.csv line 2, column "
        r"'SubjectId': '\[3, 71, x\]' is not a list",
    ):
        prepare("eedi", _eedi(tmp_path, "[3, 71, x]"), tmp_path / "out")


def test_eedi_task_from_the_train_file_name(tmp_path, capsys):
    train = _eedi(tmp_path, task="3_4") / "train_data" / "train_task_3_4.csv"
    res = prepare("eedi", train, tmp_path / "out")  # no task: the file's name says 3_4
    assert record(res)["choices"]["task"] == "3_4"
    assert record(res)["counts"]["students"] == 7
    assert prepare("eedi", train, tmp_path / "o2", task="3_4").counts == res.counts
    assert prepare("eedi", tmp_path / "eedi", tmp_path / "o3", task="3_4").counts == res.counts
    with pytest.raises(
        ValueError,
        match=r"train_task_3_4.csv: the file is Eedi task 3_4's train "
        r"file, but task='1_2' was asked",
    ):
        prepare("eedi", train, tmp_path / "o4", task="1_2")
    assert main(["prepare", "eedi", str(train), str(tmp_path / "o5"), "--task", "1_2"]) == 2
    assert "pass --task 3_4, leave --task out" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no Eedi task 1_2"):
        prepare("eedi", tmp_path / "eedi", tmp_path / "o6")  # a folder: the default task 1_2
    with pytest.raises(ValueError, match=r"Eedi task must be one of \['1_2', '3_4'\], got '5'"):
        prepare("eedi", tmp_path / "eedi", tmp_path / "o7", task="5")
