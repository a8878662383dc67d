"""kt_lib.data.prepare.raw: how a raw file's rows and header are read (widths, delimiters,
encodings), each bad shape refused by file and line or read as the clean file."""

from __future__ import annotations

import pytest
from prepare_helpers import all_students, check_counts, record, write_rows
from test_prepare import A15, _a15_rows

from kt_lib.data.__main__ import main
from kt_lib.data.prepare import prepare


def test_rows_of_another_width_are_refused_or_skipped_and_counted(tmp_path, capsys):
    raw = write_rows(tmp_path / "2015_100_skill_builders_main_problems.csv", A15, _a15_rows())
    clean = raw.read_text().splitlines()
    lines = list(clean)
    lines[4] = "1,13,3"  # short of `correct`
    lines[9] = lines[9] + ",7"  # one field too many
    raw.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 5: 3 fields, but the header \(line 1\) has 4: "):
        prepare("assist2015", raw, tmp_path / "o", n_folds=2)
    res = prepare("assist2015", raw, tmp_path / "o", n_folds=2, bad_rows="skip")
    c = record(res)["counts"]
    assert c["rows_read"] == 40 and c["rows"] == 38
    assert c["dropped"]["fewer or more fields than the header (bad_rows='skip')"] == 2
    assert record(res)["inputs"][0]["skipped_rows"] == 2
    assert record(res)["options"]["bad_rows"] == "skip"
    check_counts(res)
    assert all_students(res)["1"][1] == [1, 0, 1]  # row 1/13 left out, the others kept
    raw.write_text("\n".join(clean[:-1] + [clean[-1][:3]]))  # the last row cut mid-way
    with pytest.raises(
        ValueError, match=r"line 41: 2 fields.*missing \['sequence_id', 'correct'\] "
    ):
        prepare("assist2015", raw, tmp_path / "o", n_folds=2)
    with pytest.raises(ValueError, match="the file ends inside this row"):
        prepare("assist2015", raw, tmp_path / "o", n_folds=2)
    argv = ["prepare", "assist2015", str(raw), str(tmp_path / "o"), "--folds", "2"]
    assert main(argv) == 2
    assert "line 41: 2 fields" in capsys.readouterr().err
    assert main([*argv, "--skip-bad-rows"]) == 0
    assert "fewer or more fields than the header (bad_rows='skip'): 1" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"bad_rows must be one of \['error', 'skip'\]"):
        prepare("assist2015", raw, tmp_path / "o", bad_rows="fill")
    # a long FIRST data row: pandas cut every row to the header's width with one warning, and
    # the file prepared as if clean (a review); R-style row names (a field more on every data
    # row than the header names) read shifted by a column
    lines = list(clean)
    lines[1], lines[6] = lines[1] + ",9", lines[6] + ",9"
    raw.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 2: 5 fields, but the header \(line 1\) has 4"):
        prepare("assist2015", raw, tmp_path / "o", n_folds=2)
    res = prepare("assist2015", raw, tmp_path / "o", n_folds=2, bad_rows="skip")
    assert record(res)["counts"]["rows"] == 38 and record(res)["inputs"][0]["skipped_rows"] == 2
    named = [clean[0]] + [f"{i}," + line for i, line in enumerate(clean[1:], start=1)]
    raw.write_text("\n".join(named) + "\n")
    with pytest.raises(ValueError, match=r"line 2: 5 fields, but the header \(line 1\) has 4"):
        prepare("assist2015", raw, tmp_path / "o", n_folds=2)


def test_header_variants_read_as_the_clean_file_or_are_refused_by_name(tmp_path):
    """Three variants crashed with a bare KeyError from pandas' own column names (a review): a
    trailing delimiter on every line (the header's last name '' is pandas' 'Unnamed: 4'), a UTF-8
    BOM before a latin-1 body (read as 'ï»¿user_id'), and a quoted tab-separated header."""
    clean = write_rows(tmp_path / "clean.csv", A15, _a15_rows()).read_text().splitlines()
    want = all_students(prepare("assist2015", tmp_path / "clean.csv", tmp_path / "c"))
    trailing = tmp_path / "trailing.csv"
    trailing.write_text("\n".join(line + "," for line in clean) + "\n")
    assert all_students(prepare("assist2015", trailing, tmp_path / "t")) == want
    bom = tmp_path / "bom.csv"  # a BOM, then a latin-1 byte that is no UTF-8
    bom.write_bytes(b"\xef\xbb\xbf" + "\n".join(clean).encode() + b"\n" + b"99,1,caf\xe9,1\n")
    read = prepare("assist2015", bom, tmp_path / "b")  # latin-1: the BOM is not a name's part
    assert all_students(read) == want  # student 99's one row: under min_seq_len, dropped
    assert record(read)["counts"]["rows_read"] == len(clean)
    quoted = tmp_path / "quoted.txt"
    quoted.write_text("\t".join(f'"{c}"' for c in A15) + "\n" + "\t".join('"1"' for _ in A15))
    with pytest.raises(ValueError, match=r"quoted.txt line 1: quoted column names in a tab-"):
        prepare("assist2015", quoted, tmp_path / "q")
