"""`kt study adopt`: a run one study finished serves every study that plans it (same run key)."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from kt_lib.data.formats import write_line3
from kt_lib.data.synthetic import simulate
from kt_lib.runs import adoption, studies
from kt_lib.runs import study as study_module
from kt_lib.runs.leaderboard import checkpoint_name
from kt_lib.runs.record import preset_digest
from kt_lib.runs.results import read_runs

EARLY, MID, LATE = "2026-11-27T05:00:00+00:00", "2026-11-28T00:00", "2026-11-28T15:00Z"


@pytest.fixture
def three(tmp_path, monkeypatch):
    """Three studies planning the same tiny runs (seeds 0-2), registered as the only studies;
    returns (tiny, other, third, the data root, the three run keys)."""
    monkeypatch.setattr(study_module, "RESULTS", tmp_path / "results")
    sim = simulate(num_students=60, seq_len=20, num_c=5, seed=3).data
    folder = tmp_path / "data" / "tiny"
    folder.mkdir(parents=True)
    write_line3(sim.subset(range(45)), folder / "tiny_train.csv")
    write_line3(sim.subset(range(45, 60)), folder / "tiny_test.csv")
    tiny = dataclasses.replace(
        studies.get("base"), name="tiny", parts=(studies.Part((("tiny", "line3"),), ("dkt",)),),
        pairs=(), folds=0, seeds=(0, 1, 2), preset="tiny", epochs=4, patience=10,
    )  # fmt: skip
    other, third = (dataclasses.replace(tiny, name=n) for n in ("other", "third"))
    monkeypatch.setattr(studies, "STUDIES", {s.name: s for s in (tiny, other, third)})
    keys = [p["key"] for p in tiny.plan(tmp_path / "data")]
    return tiny, other, third, tmp_path / "data", keys


def _row(keys, i: int, auc, date: str = EARLY, **kw) -> dict:
    return {"dataset": "tiny", "model": "dkt", "fold": None, "seed": i, "run_key": keys[i],
            "test_auc": auc, "date": date, "wall_seconds": 1.0, "best_epoch": 1,
            "train_seconds": 1.0, "device_name": "AMD EPYC", **kw}  # fmt: skip


def _write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": {}, "protocol": "", "results": rows}))


def test_adopt_takes_the_runs_other_studies_finished_under_the_same_key(three, tmp_path, capsys):
    """Copied in with `adopted_from`, the newest where two studies hold one; a finished row here
    is never replaced (a failed one is); the adopted runs' epoch checkpoints go; `status`
    counts them; `render` says how many were adopted and from where."""
    tiny, other, third, data, keys = three
    reg = studies.STUDIES
    _write(tiny.path, [_row(keys, 0, 0.70), _row(keys, 1, None, error="boom")])
    _write(other.path, [_row(keys, 0, 0.10), _row(keys, 1, 0.71), _row(keys, 2, 0.72),
                        {**_row(keys, 1, 0.5), "run_key": "unplanned"}])  # fmt: skip
    _write(third.path, [_row(keys, 2, 0.73, LATE)])
    got = adoption.adoptable(tiny, reg, data)
    assert [(r["seed"], r["test_auc"], r["adopted_from"]) for r in got] == [
        (1, 0.71, "other"),
        (2, 0.73, "third"),
    ]
    only = adoption.adoptable(tiny, reg, data, sources=["other"])
    assert [(r["seed"], r["test_auc"]) for r in only] == [(1, 0.71), (2, 0.72)]
    for bad, message in ((["nope"], "--from nope: no such study"), (["tiny"], "not from itself")):
        with pytest.raises(ValueError, match=message):
            adoption.adoptable(tiny, reg, data, sources=bad)

    studies.main(["status", "tiny", "--data-root", str(data)])
    assert "2 run(s) left here are finished in other studies: `kt study adopt tiny`" in (
        capsys.readouterr().out
    )
    rows, dropped = adoption.adopt(tiny, reg, data, dry_run=True)
    assert len(rows) == 2 and dropped == [] and len(read_runs(tiny.path)) == 2
    ck, parked = tmp_path / "ck", tmp_path / "parked"
    (ck / "tiny").mkdir(parents=True)
    for i in (1, 0):  # seed 1's is adopted's; seed 0's, finished here, is not adopt's to drop
        (ck / "tiny" / f"{checkpoint_name(keys[i])}_last.pt").write_text("old")
        (ck / "tiny" / f"{checkpoint_name(keys[i])}_last.json").write_text('{"epoch": 1}')
    added, dropped = adoption.adopt(tiny, reg, data, checkpoints=ck, parked_root=parked)
    assert [r["seed"] for r in added] == [1, 2] and dropped == [checkpoint_name(keys[1])]
    assert {r["seed"]: r["test_auc"] for r in read_runs(tiny.path)} == {0: 0.70, 1: 0.71, 2: 0.73}
    assert sorted(p.name for p in (ck / "tiny").iterdir()) == sorted(
        f"{checkpoint_name(keys[0])}_last.{x}" for x in ("json", "pt")
    )
    assert "2 of them were trained for other studies under the same run keys and taken by " \
        "`kt study adopt` (other 1, third 1)." in studies.render(tiny)  # fmt: skip
    studies.main(["adopt", "tiny", "--data-root", str(data)])
    assert capsys.readouterr().out.strip() == "0 run(s)"
    with pytest.raises(SystemExit):
        studies.main(["adopt", "tiny", "--from", "tiny", "--data-root", str(data)])
    assert "a study adopts from the others, not from itself" in capsys.readouterr().err


def test_a_retired_key_or_another_device_kind_is_not_adopted(three):
    """A key any study retired is trained again, whatever the other row's date (it may have
    started before the fix); a GPU row is not adopted into a cell whose runs are all CPU runs
    (fp32 and tf32 under one key), but into an empty cell it is."""
    tiny, other, third, data, keys = three
    reg = studies.STUDIES
    _write(tiny.path, [_row(keys, 0, 0.70)])
    _write(other.path, [_row(keys, 1, 0.71, LATE), _row(keys, 2, 0.72)])
    _write(third.retired_path, [{**_row(keys, 1, 0.6), "retired": {"reason": "fix", "on": MID}}])
    assert [r["seed"] for r in adoption.adoptable(tiny, reg, data)] == [2]
    _write(third.retired_path, [])
    gpu = {"device_name": "NVIDIA H200"}
    _write(other.path, [_row(keys, 1, 0.71, **gpu), _row(keys, 2, 0.72, **gpu)])
    assert adoption.adoptable(tiny, reg, data) == []  # tiny's dkt cell is on a CPU
    _write(tiny.path, [])
    assert [r["seed"] for r in adoption.adoptable(tiny, reg, data)] == [1, 2]
    # a row made under another version of its preset is not copied: it is to be retired there
    now = {"preset": "tiny", "preset_digest": preset_digest("dkt", "tiny")}
    edited = {"preset": "tiny", "preset_digest": "0123456789"}
    _write(other.path, [_row(keys, 1, 0.71, **edited), _row(keys, 2, 0.72, **now)])
    assert [r["seed"] for r in adoption.adoptable(tiny, reg, data)] == [2]


def test_a_retired_key_rerun_on_the_fixed_code_is_adopted(three):
    """A row whose commit holds the retirement's commit (git ancestry) ran the fixed code and is
    adopted; one made on an older commit, or with none recorded, is not."""
    from kt_lib.provenance import ROOT

    def rev(ref):
        out = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True,
                             text=True)  # fmt: skip
        if out.returncode:
            pytest.skip("no git history here")
        return out.stdout.strip()

    tiny, other, third, data, keys = three
    reg = studies.STUDIES
    fix, before, after = rev("HEAD~1"), rev("HEAD~2"), rev("HEAD")
    _write(tiny.path, [_row(keys, 0, 0.70)])
    note = {"reason": "fix", "on": MID, "commit": f"{fix}+dirty"}
    _write(third.retired_path, [{**_row(keys, k, 0.6), "retired": note} for k in (1, 2)])
    _write(other.path, [_row(keys, 1, 0.71, LATE, commit=f"{after}+dirty"),
                        _row(keys, 2, 0.72, LATE, commit=before)])  # fmt: skip
    assert [r["seed"] for r in adoption.adoptable(tiny, reg, data)] == [1]
    _write(other.path, [_row(keys, 1, 0.71, LATE), _row(keys, 2, 0.72, LATE, commit=fix)])
    assert [r["seed"] for r in adoption.adoptable(tiny, reg, data)] == [2]  # the fix itself


def test_retire_names_the_copies_other_studies_adopted(three, capsys, monkeypatch):
    """Retiring runs that another study adopted says where the copies are."""
    tiny, other, third, data, keys = three
    # the CLI's checkpoint folders are the repo's
    monkeypatch.setattr(studies, "discard", lambda *a, **k: None)
    _write(tiny.path, [_row(keys, 0, 0.70)])
    _write(other.path, [{**_row(keys, 0, 0.70), "adopted_from": "tiny"}])
    assert adoption.adopted_copies("tiny", [keys[0]], studies.STUDIES) == {"other": 1}
    studies.main(["retire", "tiny", "--models", "dkt", "--reason", "a fix", "--data-root",
                  str(data)])  # fmt: skip
    out = capsys.readouterr().out
    assert "other holds 1 adopted copy(ies) of these runs: retire them there too" in out
