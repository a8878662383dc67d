"""kt_lib.runs.results: the store read through globs, merged by run_key."""

from __future__ import annotations

import json

import pytest

from kt_lib.provenance import ROOT
from kt_lib.runs.results import (
    add_missing,
    add_runs,
    expand,
    load_results,
    merge_files,
    read_runs,
)


def test_the_committed_store_reads_through_a_glob(monkeypatch):
    monkeypatch.chdir(ROOT)
    files = expand("results/*.json")
    assert [f.name for f in files] == sorted(f.name for f in (ROOT / "results").glob("*.json"))
    table = load_results("results/*.json")
    assert (
        load_results("*.json", root=ROOT / "results")["run_key"].tolist()
        == table["run_key"].tolist()
    )
    # a key is unique within a file; the same run may sit in two studies made on two devices
    # (base: an H100, leaderboard: this CPU), which the paired statistics never pair
    assert not table.duplicated(["file", "run_key"]).any()
    assert set(table["file"]) == {f.name for f in files}
    with pytest.raises(ValueError, match="no results file matches"):
        expand("results/*.nope")


def test_merge_by_run_key(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    add_runs(a, [{"run_key": "k1", "test_auc": 0.5}, {"run_key": "k2", "test_auc": 0.6}])
    add_runs(b, [{"run_key": "k2", "test_auc": 0.7}])
    assert merge_files([a, b], a) == 2
    assert {r["run_key"]: r["test_auc"] for r in read_runs(a)} == {"k1": 0.5, "k2": 0.7}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"args": {}, "protocol": "", "results": [{"model": "dkt"}]}))
    with pytest.raises(ValueError, match="rows with a run_key"):
        merge_files([plain], a)


def test_add_missing_never_replaces_a_finished_row(tmp_path):
    """What `kt study adopt` writes with: only keys the file has no finished row of (a failed
    one is replaced), the first of two new rows with one key, failed new rows never."""
    path = tmp_path / "r.json"
    add_runs(path, [{"run_key": "k1", "test_auc": 0.8}, {"run_key": "k2", "error": "OOM"}])
    new = [
        {"run_key": "k1", "test_auc": 0.1},
        {"run_key": "k2", "test_auc": 0.7},
        {"run_key": "k3", "test_auc": 0.6},
        {"run_key": "k3", "test_auc": 0.5},
        {"run_key": "k4", "error": "OOM"},
        {"test_auc": 0.9},
    ]
    assert add_missing(path, new) == [new[1], new[2]]
    assert read_runs(path) == [{"run_key": "k1", "test_auc": 0.8}, new[1], new[2]]
    assert add_missing(path, new) == []
    assert len(read_runs(path)) == 3


def test_a_failed_row_never_replaces_a_finished_one(tmp_path):
    """Two processes on one run, or a merged file with a failed copy: the finished numbers stay;
    a finished row does replace a failed one (the retry)."""
    path = tmp_path / "r.json"
    add_runs(path, [{"run_key": "k1", "test_auc": 0.8}, {"run_key": "k2", "error": "OOM"}])
    add_runs(path, [{"run_key": "k1", "error": "OOM"}, {"run_key": "k2", "test_auc": 0.7}])
    rows = {r["run_key"]: r for r in read_runs(path)}
    assert rows["k1"] == {"run_key": "k1", "test_auc": 0.8}
    assert rows["k2"] == {"run_key": "k2", "test_auc": 0.7}
    add_runs(path, [{"run_key": "k2", "error": "again"}])
    assert "error" not in {r["run_key"]: r for r in read_runs(path)}["k2"]
