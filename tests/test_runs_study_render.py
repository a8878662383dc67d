"""kt_lib.runs.study_render: the pairs by history position, the blocks, the summary."""

from __future__ import annotations

import pandas as pd
import pytest

from kt_lib.runs.study_render import pair_breakdown, write_blocks


def test_write_blocks_replaces_each_block_and_only_it(tmp_path):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text("x\n<!-- study:s -->\nold\n<!-- /study:s -->\ny\n<!-- study:t -->\nkeep\n")
    b.write_text("no block here\n")
    assert write_blocks("s", "new\n", [a, b]) == [a]
    assert (
        a.read_text() == "x\n<!-- study:s -->\nnew\n<!-- /study:s -->\ny\n<!-- study:t -->\nkeep\n"
    )
    assert write_blocks("s", "new\n", [a, b]) == []  # unchanged: nothing written
    with pytest.raises(ValueError, match="no <!-- study:u --> block"):
        write_blocks("u", "new\n", [a, b])


def test_the_pairs_by_history_position_pair_each_bucket_alone():
    rows = []
    for seed in range(4):
        for model, early in (("a", 0.70 + 0.01 * seed), ("b", 0.66 + 0.01 * seed)):
            rows.append(
                {"dataset": "d", "model": model, "fold": None, "seed": seed,
                 "test_auc@pos1-10": early, "test_auc@pos11-50": 0.75 + 0.001 * seed}
            )  # fmt: skip
    old = {"dataset": "d", "model": "a", "fold": None, "seed": 9}  # before the breakdown
    runs = pd.DataFrame([*rows, old])
    out = pair_breakdown(runs, [("a", "b")])
    assert out[0].startswith("Paired by history position")
    lines = out[1].splitlines()
    assert lines[0].startswith("| position | a - b | metric | mean diff |")
    first, second = lines[2], lines[3]
    assert first.startswith("| pos1-10 | a - b | test_auc | +0.0400 |") and "| 4 |" in first
    assert second.startswith("| pos11-50 | a - b | test_auc | +0.0000 |")
    assert len(lines) == 4  # no pos51-200 column: no row
    assert (
        pair_breakdown(runs.drop(columns=["test_auc@pos1-10", "test_auc@pos11-50"]), [("a", "b")])
        == []
    )


def test_the_pairs_by_log_length_pair_each_quarter_alone():
    rows = [{"dataset": "d", "model": m, "fold": None, "seed": seed,
             "test_auc@pos1-10": 0.7, "test_auc@lenq1": short + 0.01 * seed,
             "test_auc@lenq4": 0.8 + 0.001 * seed}
            for seed in range(4) for m, short in (("a", 0.64), ("b", 0.70))]  # fmt: skip
    out = pair_breakdown(pd.DataFrame(rows), [("a", "b")])
    assert out[0].startswith("Paired by history position") and len(out) == 4
    assert out[2].startswith("Paired by the student's log length")
    lines = out[3].splitlines()
    assert lines[0].startswith("| students | a - b | metric | mean diff |")
    assert lines[2].startswith("| lenq1 | a - b | test_auc | -0.0600 |") and "| 4 |" in lines[2]
    assert lines[3].startswith("| lenq4 | a - b | test_auc | +0.0000 |") and len(lines) == 4


def test_the_summary_is_model_by_dataset_with_mean_std_and_runs(tmp_path):
    from kt_lib.runs.results import add_runs
    from kt_lib.runs.study import Part, Study
    from kt_lib.runs.study_render import render_summary

    rows = [
        {"dataset": d, "model": m, "fold": f, "seed": 0, "test_auc": v, "run_key": f"{d}/{m}/{f}"}
        for d, m, f, v in (
            ("a", "dkt", 1, 0.70), ("a", "dkt", 2, 0.72),
            ("a", "akt", 1, 0.75), ("b", "dkt", 1, 0.8),
        )
    ]  # fmt: skip
    rows.append({**rows[0], "run_key": "a/dkt/3", "fold": 3, "test_auc": None, "error": "boom"})
    path = tmp_path / "s.json"
    add_runs(path, rows)
    study = Study("s", "?", (Part((("a", "line3"),), ("dkt",)),))
    lines = render_summary(study, path).splitlines()
    assert lines[0] == "| model | a | b |"
    assert lines[2] == "| dkt | 0.7100 ± 0.0141 (2) | 0.8000 (1) |"  # the failed run left out
    assert lines[3] == "| akt | 0.7500 (1) | - |"
    assert "4 runs so far" in lines[5]
    assert render_summary(study, tmp_path / "none.json").startswith("No finished run yet")
    # rows in the study's declared order, whatever order the runs landed in (a retired and
    # rerun model's rows come last in the file)
    study = Study("s", "?", (Part((("a", "line3"),), ("akt", "dkt")),))
    lines = render_summary(study, path).splitlines()
    assert lines[2].startswith("| akt |") and lines[3].startswith("| dkt |")


def test_the_summary_marks_a_cell_whose_runs_mix_cpu_and_gpu(tmp_path):
    from kt_lib.runs.results import add_runs
    from kt_lib.runs.study import Part, Study
    from kt_lib.runs.study_render import render_summary

    rows = [
        {"dataset": "a", "model": m, "fold": f, "seed": 0, "test_auc": v, "run_key": f"{m}/{f}",
         "device_name": dev}
        for m, f, v, dev in (("dkt", 1, 0.70, "AMD EPYC"), ("dkt", 2, 0.72, "NVIDIA H200"),
                             ("akt", 1, 0.75, "AMD EPYC"), ("akt", 2, 0.76, "Intel Xeon"))
    ]  # fmt: skip
    add_runs(tmp_path / "s.json", rows)
    study = Study("s", "?", (Part((("a", "line3"),), ("dkt", "akt")),))
    lines = render_summary(study, tmp_path / "s.json").splitlines()
    assert lines[2].startswith("| dkt | 0.7100 ± 0.0141 (2)* |")
    assert lines[3].startswith("| akt | 0.7550 ± 0.0071 (2) |")  # two CPUs: one kind
    assert "* the cell's runs mix CPU and GPU" in lines[5]


def test_breakdown_pairs_break_down_those_pairs_alone(tmp_path):
    """A study with many pairs (the leaderboard's against DKT and AKT) breaks down by history
    position only the pairs it names (the seeds' questions): the pooled position table holds
    those and no other."""
    from kt_lib.runs.results import add_runs
    from kt_lib.runs.study import Part, Study
    from kt_lib.runs.study_render import render

    rows = []
    for seed in range(3):
        for m, v in (("a", 0.72), ("b", 0.70), ("c", 0.69)):
            rows.append(
                {"dataset": "d", "model": m, "fold": None, "seed": seed, "run_key": f"{m}{seed}",
                 "test_auc": v + 0.01 * seed, "test_auc@pos1-10": v - 0.02 + 0.003 * seed,
                 "best_epoch": 3, "train_seconds": 1.0, "wall_seconds": 1.0,
                 "device_name": "AMD EPYC"}
            )  # fmt: skip
    path = tmp_path / "s.json"
    add_runs(path, rows)
    part = Part((("d", "line3"),), ("a", "b", "c"))
    study = Study("s", "?", (part,), pairs=(("a", "b"), ("c", "b")), breakdown_pairs=(("a", "b"),))
    text = render(study, path)
    table = text.split("Paired by history position")[1]
    assert "| pos1-10 | a - b | test_auc | +0.0200 |" in table
    assert "c - b" not in table and "c - b" in text  # still paired, not broken down
    plain = render(Study("s", "?", (part,), pairs=(("a", "b"),)), path)
    assert "Paired by history position" not in plain


def test_breakdown_pairs_must_be_among_the_pairs():
    from kt_lib.runs.study import Part, Study

    part = Part((("d", "line3"),), ("a", "b"))
    with pytest.raises(ValueError, match=r"breakdown_pairs \[\('a', 'c'\)\] are not among"):
        Study("s", "?", (part,), pairs=(("a", "b"),), breakdown_pairs=(("a", "c"),))


def test_a_breakdown_study_shows_auc_by_log_length_per_cell(tmp_path):
    """Each (dataset, model) of a study with the breakdown gets its mean AUC per quarter of
    students by log length, over the runs that store it; runs recorded before are left out and
    a study whose runs store none shows no such table."""
    from kt_lib.runs.results import add_runs
    from kt_lib.runs.study import Part, Study
    from kt_lib.runs.study_render import render

    base = {"dataset": "d", "fold": None, "best_epoch": 3, "train_seconds": 1.0,
            "wall_seconds": 1.0, "device_name": "AMD EPYC", "test_auc": 0.7}  # fmt: skip
    rows = [{**base, "model": "a", "seed": s, "run_key": f"a{s}", "test_auc@lenq1": 0.60 + 0.02 * s,
             "test_auc@lenq4": 0.80} for s in range(2)]  # fmt: skip
    rows.append({**base, "model": "a", "seed": 2, "run_key": "a2"})  # before the breakdown
    rows.append({**base, "model": "b", "seed": 0, "run_key": "b0"})
    add_runs(tmp_path / "s.json", rows)
    study = Study("s", "?", (Part((("d", "line3"),), ("a", "b")),), breakdown=True)
    text = render(study, tmp_path / "s.json")
    table = text.split("By the student's log length")[1].split("\n\n")[1].splitlines()
    assert table[0] == "| dataset | model | runs | auc lenq1 | auc lenq2 | auc lenq3 | auc lenq4 |"
    assert table[2] == "| d | a | 2 | 0.6100 | - | - | 0.8000 |" and len(table) == 3  # no b row
    only_b = [r for r in rows if r["model"] == "b"]
    add_runs(tmp_path / "t.json", only_b)
    assert "By the student's log length" not in render(study, tmp_path / "t.json")


def test_position_columns_say_how_many_runs_they_average(tmp_path):
    """Runs recorded before the breakdown store no positions: a cell's `auc pos*` means cover
    fewer runs than its `runs` and test_auc, and the `pos runs` column says how many."""
    from kt_lib.runs.results import add_runs
    from kt_lib.runs.study import Part, Study
    from kt_lib.runs.study_render import render

    rows = [
        {"dataset": "d", "model": "a", "fold": None, "seed": s, "run_key": f"a{s}",
         "test_auc": 0.7, "best_epoch": 3, "train_seconds": 1.0, "wall_seconds": 1.0,
         "device_name": "AMD EPYC", **({"test_auc@pos1-10": 0.6} if s < 2 else {})}
        for s in range(5)
    ]  # fmt: skip
    path = tmp_path / "s.json"
    add_runs(path, rows)
    study = Study("s", "?", (Part((("d", "line3"),), ("a",)),), breakdown=True)
    header, _, row = render(study, path).splitlines()[:3]
    cells = dict(zip(header.split("|"), row.split("|"), strict=True))
    assert cells[" runs "].strip() == "5" and cells[" pos runs "].strip() == "2"
    assert cells[" auc pos1-10 "].strip() == "0.6000"


def test_published_figures_name_their_source():
    """The pyKT team's later figures (simpleKT, sparseKT, ...) were labelled "DKVMN paper"."""
    from kt_lib.runs.study_render import published_figures

    assert published_figures("assist2015", "simplekt") == "0.7248 (pyKT, later)"
    assert published_figures("assist2015", "dkt") == "0.7252 (DKVMN paper); 0.7271 (pyKT)"
    assert published_figures("assist2009", "dkvmn") == "0.8157 (DKVMN paper)"
    assert published_figures("assist2015", "nope") == "-"
