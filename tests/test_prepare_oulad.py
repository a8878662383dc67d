"""kt_lib.data.prepare on miniature OULAD files: order on the presentations' calendar (ties by
deadline, `?` deadline last, then id), the three bandings at their boundary scores, `?` scores
and banked results dropped and counted, an unknown assessment named with its file and line, the
pykt folder read back at its K by load_bundle('auto'), the CLI; the real files vs MANIFEST.md."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from prepare_helpers import (
    all_students,
    assert_layouts_agree,
    check_counts,
    record,
    write_rows,
)

from kt_lib.data.__main__ import main
from kt_lib.data.formats import load_bundle
from kt_lib.data.prepare import prepare
from kt_lib.data.prepare.oulad import bands

SCORES = ["id_student", "id_assessment", "date_submitted", "is_banked", "score"]
ASSESSMENTS = [
    "code_module",
    "code_presentation",
    "id_assessment",
    "assessment_type",
    "date",
    "weight",
]
# AAA 2013J starts 2013-10-01, BBB 2014B 2014-02-01 (the presentations' calendar).
MODULES = [
    ("AAA", "2013J", 1752, "TMA", 19, 10),
    ("AAA", "2013J", 1753, "TMA", 54, 20),
    ("AAA", "2013J", 1754, "CMA", 54, 0),  # same deadline as 1753: id breaks the tie
    ("AAA", "2013J", 1757, "Exam", "?", 100),  # no deadline: after every dated one
    ("BBB", "2014B", 2001, "TMA", 30, 50),
    ("BBB", "2014B", 2002, "CMA", 30, 50),
]
BOUNDARY = [39, 40, 59, 60, 69, 70, 84, 85]
WANT = {
    5: [0, 1, 1, 2, 2, 3, 3, 4],
    4: [0, 1, 1, 2, 2, 3, 3, 3],
    2: [0, 1, 1, 1, 1, 1, 1, 1],
}


def _row(student, aid, day, score, banked=0) -> dict:
    return dict(zip(SCORES, (student, aid, day, banked, score), strict=True))


def _rows() -> list[dict]:
    first = [  # student 11391, out of order in the file
        _row(11391, 1757, 230, 85),  # exam, submitted with 1753/1754: last of the three
        _row(11391, 1754, 230, 60),
        _row(11391, 2002, 61, "?"),  # no score
        _row(11391, 1753, 230, 59),
        _row(11391, 2001, 60, 40),  # 2014-04-02: between AAA's day 150 and day 230
        _row(11391, 1752, 150, 39),  # 2014-02-28
    ]
    second = [_row(22222, a, d, s) for a, d, s in ((1752, 10, 69), (1753, 50, 70), (1754, 52, 84))]
    second.append(_row(22222, 1757, 240, 100))
    banked = [_row(33333, 1752, -1, 90, banked=1)]  # carried over from an earlier presentation
    banked += [_row(33333, a, d, s) for a, d, s in ((1753, 40, 0), (1754, 41, 55), (1757, 235, 45))]
    filler = [
        _row(40000 + s, aid, 5 * j, 30 + 10 * ((s + j) % 7))
        for s in range(1, 7)
        for j, aid in enumerate((1752, 1753, 1754))
    ]
    short = [_row(50000, 2001, 10, 80), _row(50000, 2002, 20, 75)]
    return first + second + banked + filler + short


def _assessments() -> list[dict]:
    return [dict(zip(ASSESSMENTS, m, strict=True)) for m in MODULES]


def _raw(tmp_path, rows=None):
    d = tmp_path / "oulad"
    write_rows(d / "assessments.csv", ASSESSMENTS, _assessments())
    write_rows(d / "studentAssessment.csv", SCORES, _rows() if rows is None else rows)
    return d


def test_bands_at_the_boundaries():
    for K, want in WANT.items():
        assert bands(np.array(BOUNDARY, dtype=float), K).tolist() == want
    assert bands(np.array([0.0, 100.0]), 5).tolist() == [0, 4]


@pytest.mark.parametrize("K", [5, 4, 2])
def test_order_bands_drops_and_auto_reload(tmp_path, K):
    raw = _raw(tmp_path)
    res = prepare("oulad", raw, tmp_path / "out", **({} if K == 5 else {"bands": K}))
    rec = record(res)
    c = rec["counts"]
    assert res.K == rec["K"] == rec["choices"]["bands"]["K"] == K
    assert c["rows_read"] == 34
    assert c["dropped"] == {"no score ('?')": 1, "banked (is_banked = 1)": 1}
    assert (c["dropped_students_short"], c["dropped_rows_short"]) == (1, 2)
    assert (c["students"], c["interactions"], c["problems"], c["skills"]) == (9, 30, 5, 4)
    assert sum(c["response_counts"]) == 30 and len(c["response_counts"]) == K
    check_counts(res)
    for i, name in enumerate(("studentAssessment.csv", "assessments.csv")):
        assert rec["inputs"][i]["path"].endswith(name)
        assert rec["inputs"][i]["sha256"] == hashlib.sha256((raw / name).read_bytes()).hexdigest()
    seqs = all_students(res)
    ids = json.loads((res.pykt_dir / "keyid2idx.json").read_text())
    inv_p = {v: k for k, v in ids["questions"].items()}
    inv_c = {v: k for k, v in ids["concepts"].items()}
    assert sorted(inv_p.values()) == ["1752", "1753", "1754", "1757", "2001"] and ids["K"] == K
    q, r, pid = seqs["11391"]
    assert [inv_p[p] for p in pid] == ["1752", "2001", "1753", "1754", "1757"]
    assert [inv_c[s] for s in q] == ["AAA/TMA", "BBB/TMA", "AAA/TMA", "AAA/CMA", "AAA/Exam"]
    assert r == WANT[K][:4] + WANT[K][7:]  # scores 39, 40, 59, 60, 85
    assert seqs["22222"][1] == WANT[K][4:]  # scores 69, 70, 84, 100
    assert [inv_p[p] for p in seqs["33333"][2]] == ["1753", "1754", "1757"]  # banked dropped
    assert "50000" not in seqs  # two rows < min_seq_len
    assert_layouts_agree(res, 5)
    for fold in range(5):
        b = load_bundle(res.pykt_dir, "auto", fold=fold)  # K from keyid2idx.json
        assert b.K == K and b.data_format == "pykt"
        uids = {u for d in (b.train, b.valid, b.test) for u in d.meta["raw_uid"].values()}
        assert len(uids) == 9
    with pytest.raises(ValueError, match=f"declares K={K}"):
        load_bundle(res.pykt_dir, "auto", K=K + 1)


def test_keep_banked_orders_the_carried_result_first(tmp_path):
    res = prepare("oulad", _raw(tmp_path), tmp_path / "out", keep_banked=True)
    c = record(res)["counts"]
    assert c["dropped"] == {"no score ('?')": 1} and c["interactions"] == 31
    assert "kept" in record(res)["choices"]["banked"]
    q, r, pid = all_students(res)["33333"]
    assert r == [4, 0, 1, 1]  # the banked 90 (date_submitted -1) first
    check_counts(res)


def test_errors_name_file_line_and_value(tmp_path):
    rows = _rows()
    rows.insert(7, _row(22222, 9999, 12, 50))
    raw = _raw(tmp_path, rows)
    with pytest.raises(
        ValueError,
        match=r"studentAssessment.csv line 9, column 'id_assessment': '9999' is not an "
        r"id_assessment of .*assessments.csv",
    ):
        prepare("oulad", raw, tmp_path / "o")
    for column, value, message in (
        ("score", "101", "'101' is not a score in 0-100"),
        ("score", "A", "'A' is not a number"),
        ("is_banked", "2", "'2' is not 0 or 1"),
        ("date_submitted", "?", "'\\?': a number is needed"),
        ("score", "", "empty cell"),
    ):
        rows = _rows()
        rows[3] = {**rows[3], column: value}
        with pytest.raises(ValueError, match=f"line 5, column '{column}': {message}"):
            prepare("oulad", _raw(tmp_path, rows), tmp_path / "o")
    short = tmp_path / "short" / "studentAssessment.csv"  # a row one field short
    write_rows(short, SCORES, _rows())
    short.write_text(short.read_text().replace("11391,1753,230,0,59", "11391,1753,230,0"))
    (short.parent / "assessments.csv").write_bytes((raw / "assessments.csv").read_bytes())
    with pytest.raises(ValueError, match=r"studentAssessment.csv line 5, column 'score': empty"):
        prepare("oulad", short, tmp_path / "o")
    bad = _assessments()
    bad[2]["code_presentation"] = "2013X"
    write_rows(raw / "assessments.csv", ASSESSMENTS, bad)
    with pytest.raises(ValueError, match=r"assessments.csv line 4, column 'code_presentation'"):
        prepare("oulad", raw, tmp_path / "o")
    bad[2]["code_presentation"], bad[4]["id_assessment"] = "2013J", 1752
    write_rows(raw / "assessments.csv", ASSESSMENTS, bad)
    with pytest.raises(ValueError, match=r"assessments.csv line 6, .*'1752' is listed twice"):
        prepare("oulad", raw, tmp_path / "o")
    raw = _raw(tmp_path)
    with pytest.raises(ValueError, match="choose K with bands"):
        prepare("oulad", raw, tmp_path / "o", ordinal=True)
    with pytest.raises(ValueError, match=r"bands must be one of \[2, 4, 5\]"):
        prepare("oulad", raw, tmp_path / "o", bands=3)
    with pytest.raises(ValueError, match="keep_banked is an option of oulad only"):
        prepare("assist2015", raw, tmp_path / "o", keep_banked=True)
    (raw / "assessments.csv").unlink()
    with pytest.raises(FileNotFoundError, match="assessments.csv"):
        prepare("oulad", raw, tmp_path / "o")


def test_cli_bands_and_help(tmp_path, capsys):
    raw = _raw(tmp_path)
    out = tmp_path / "out"
    assert (
        main(["prepare", "oulad", str(raw / "studentAssessment.csv"), str(out), "--bands", "2"])
        == 0
    )
    assert "oulad: 34 rows read, dropped no score ('?'): 1, banked" in capsys.readouterr().out
    assert load_bundle(out / "pykt", "auto").K == 2
    keys_path = out / "pykt" / "keyid2idx.json"
    keys = json.loads(keys_path.read_text())
    keys_path.write_text(json.dumps({**keys, "K": "2"}))
    with pytest.raises(ValueError, match=r"keyid2idx.json: K = '2' is not an integer"):
        load_bundle(out / "pykt", "auto")
    del keys["K"]  # a folder pykt-toolkit wrote: binary unless told
    keys_path.write_text(json.dumps(keys))
    assert load_bundle(out / "pykt", "auto").K == 2
    assert main(["prepare", "assist2015", str(raw), str(out), "--bands", "4"]) == 2
    assert "bands is an option of oulad only" in capsys.readouterr().err
    cmd = [sys.executable, "-m", "kt_lib.data", "prepare", "--help"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "oulad" in done.stdout and "--bands" in done.stdout and "--keep-banked" in done.stdout


@pytest.mark.slow  # two runs over 173,912 rows: about 10 s each
def test_real_files_match_the_manifest(shared_data, tmp_path):
    raw = shared_data / "oulad"
    if not raw.is_dir():
        pytest.skip(f"no OULAD files at {raw}")
    # Every scored row (banked too), K=4: MANIFEST.md's figures.
    res = prepare("oulad", raw, tmp_path / "all", bands=4, keep_banked=True, min_seq_len=1)
    rec = record(res)
    c = rec["counts"]
    assert c["rows_read"] == 173_912 and c["dropped"] == {"no score ('?')": 173}
    # MANIFEST's 23,369 students are those of the file: 18 of them have no scored row
    assert c["students_before_min_len"] == c["students"] == 23_369 - 18
    assert (c["interactions"], c["problems"]) == (173_739, 188)
    assert c["response_counts"] == [7_578, 20_308, 25_247, 120_606]
    assert [i["sha256"] for i in rec["inputs"]] == [  # MANIFEST: 6018e75b...f0ef6, 714224d7...
        "6018e75bef32ac28a2b11b50703351084f250be255e0ce18c20b2624bc2f0ef6",
        "714224d737bc4d5a80282ede6a270a7c55b96e3efb38e42da7191c1632279d46",
    ]
    lengths = [len(q) for q, _, _ in all_students(res).values()]
    assert (int(np.median(lengths)), max(lengths)) == (7, 28)
    # The defaults: K=5, banked results dropped, pykt's min_seq_len=3.
    res = prepare("oulad", raw, tmp_path / "default")
    c = record(res)["counts"]
    assert c["dropped"] == {"no score ('?')": 173, "banked (is_banked = 1)": 1_908}
    assert (c["students"], c["interactions"], c["skills"]) == (19_822, 166_875, 14)
    assert c["response_counts"] == [6_879, 18_903, 23_941, 56_821, 60_331]
    check_counts(res)
    b = load_bundle(res.pykt_dir, "auto", fold=4)
    assert b.K == 5 and len(b.train) + len(b.valid) + len(b.test) == 19_822
