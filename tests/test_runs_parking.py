"""kt_lib.runs.parking: a run parked in one checkout resumes in another at its epoch, with the
result an uninterrupted run gives; finished runs leave the parked folder; the size cap and a
corrupted pair are refused by name."""

from __future__ import annotations

import json

import pytest
from test_runs_studies import _tiny_study

from kt_lib.models.base import KTModel
from kt_lib.runs import parking, studies
from kt_lib.runs.leaderboard import checkpoint_name


@pytest.fixture
def killed(tmp_path, monkeypatch):
    """A tiny study whose run was killed at the start of epoch 2 (epochs 0-1 checkpointed in
    `ck_a`), the uninterrupted run's row, and the list of epochs started."""
    study, data = _tiny_study(tmp_path), tmp_path / "data"
    epochs, kill = [], {"at": None}
    original = KTModel.on_epoch_start

    def record(self, epoch, train):
        epochs.append(epoch)
        if kill["at"] is not None and epoch == kill["at"]:
            raise RuntimeError("killed")
        return original(self, epoch, train)

    monkeypatch.setattr(KTModel, "on_epoch_start", record)
    kw = dict(progress=False, parked_root=tmp_path / "none")
    studies.run(study, data, path=tmp_path / "whole.json", checkpoints=tmp_path / "ck_w", **kw)
    whole = json.loads((tmp_path / "whole.json").read_text())["results"][0]
    kill["at"] = 2
    with pytest.warns(RuntimeWarning, match="failed"):
        studies.run(study, data, path=tmp_path / "b.json", checkpoints=tmp_path / "ck_a", **kw)
    kill["at"] = None
    epochs.clear()
    return study, data, whole, epochs


def test_a_parked_run_resumes_in_a_fresh_checkout_and_leaves_when_finished(tmp_path, killed):
    study, data, whole, epochs = killed
    park_dir = tmp_path / "inflight"
    kept, big = parking.park(study.name, set(), tmp_path / "ck_a", park_dir)
    assert [r.epoch for r in kept] == [1] and big == []
    assert kept[0].name == checkpoint_name(whole["run_key"])
    assert kept[0].epoch_seconds > 0 and "min an epoch" in kept[0].line()  # from its history
    assert [r.name for r in parking.in_flight(study.name, tmp_path / "ck_a")] == [kept[0].name]
    files = sorted(p.name for p in (park_dir / study.name).iterdir())
    assert files == sorted(f"{kept[0].name}_{k}.{s}" for k in ("best", "last") for s in "pt json"
                           .split())  # fmt: skip
    assert parking.parked(study.name, park_dir)[0].epoch == 1

    # a new checkout: no local checkpoints; the study puts the parked run back and resumes it
    studies.run(study, data, path=tmp_path / "b.json", checkpoints=tmp_path / "ck_new",
                progress=False, parked_root=park_dir)  # fmt: skip
    assert epochs == [2, 3]
    row = json.loads((tmp_path / "b.json").read_text())["results"][0]
    for key in ("test_auc", "test_acc", "best_epoch"):
        assert row[key] == whole[key], key
    # the finished run's checkpoint is gone locally; parking again drops the parked copy
    assert not list((tmp_path / "ck_new" / study.name).glob("*.pt"))
    kept, _ = parking.park(study.name, {kept[0].name}, tmp_path / "ck_new", park_dir)
    assert kept == [] and not list((park_dir / study.name).iterdir())


def test_park_keeps_the_newer_epoch_on_either_side_and_caps_the_size(tmp_path, killed):
    study = killed[0]
    ck, park_dir = tmp_path / "ck_a", tmp_path / "inflight"
    kept, big = parking.park(study.name, set(), ck, park_dir, max_mb=0.0)
    assert kept == [] and [r.epoch for r in big] == [1] and not (park_dir / study.name).exists()
    parking.park(study.name, set(), ck, park_dir)
    name = parking.parked(study.name, park_dir)[0].name
    last = park_dir / study.name / f"{name}_last.json"
    meta = json.loads(last.read_text())
    last.write_text(json.dumps({**meta, "epoch": 0}))  # the parked copy is older than ck's
    assert [r.epoch for r in parking.unpark(study.name, ck, park_dir)] == []  # ck keeps epoch 1
    parking.park(study.name, set(), ck, park_dir)
    assert parking.parked(study.name, park_dir)[0].epoch == 1  # refreshed from ck


def test_a_corrupted_pair_is_refused_by_name(tmp_path, killed):
    study = killed[0]
    pt = next((tmp_path / "ck_a" / study.name).glob("*_last.pt"))
    pt.write_bytes(pt.read_bytes()[:-10])
    with pytest.raises(ValueError, match=pt.name):
        parking.park(study.name, set(), tmp_path / "ck_a", tmp_path / "inflight")


def test_a_run_in_flight_costs_its_epochs_left_at_its_own_pace(tmp_path, killed):
    study, _, whole, _ = killed
    run = parking.in_flight(study.name, tmp_path / "ck_a")[0]
    left = [{"key": whole["run_key"]}, {"key": "another/run"}]
    parking.price_in_flight(study.name, 4, left, tmp_path / "ck_a", tmp_path / "none")
    assert left[0]["in_flight"] == pytest.approx(2 * run.epoch_seconds)  # epochs 2 and 3 left
    assert "in_flight" not in left[1]
    longer = [{"key": whole["run_key"], "epochs": 10}]  # a variant's own cap stands for the study's
    parking.price_in_flight(study.name, 4, longer, tmp_path / "ck_a", tmp_path / "none")
    assert longer[0]["in_flight"] == pytest.approx(8 * run.epoch_seconds)
    # a review: a run whose early stopping had ended it costs nothing more; of a local and a
    # parked copy the further one prices (the one a run resumes from)
    local = tmp_path / "ck_a" / study.name / f"{run.name}_last.json"
    local.write_text(json.dumps({**json.loads(local.read_text()), "waited": 5}))
    for patience, cost in ((5, 0), (6, 2 * run.epoch_seconds)):
        ended = [{"key": whole["run_key"]}]
        parking.price_in_flight(study.name, 4, ended, tmp_path / "ck_a", tmp_path / "none",
                                patience=patience)  # fmt: skip
        assert ended[0]["in_flight"] == pytest.approx(cost), patience
    park_dir = tmp_path / "inflight"
    parking.park(study.name, set(), tmp_path / "ck_a", park_dir)
    last = park_dir / study.name / f"{run.name}_last.json"
    last.write_text(json.dumps({**json.loads(last.read_text()), "epoch": 2}))  # parked: further
    further = [{"key": whole["run_key"]}]
    parking.price_in_flight(study.name, 4, further, tmp_path / "ck_a", park_dir)
    assert further[0]["in_flight"] == pytest.approx(1 * run.epoch_seconds)  # epoch 3 left


def test_a_parked_run_the_study_no_longer_plans_is_dropped(tmp_path, killed):
    study = killed[0]
    ck, park_dir = tmp_path / "ck_a", tmp_path / "inflight"
    (kept,), _ = parking.park(study.name, set(), ck, park_dir)
    assert parking.park(study.name, set(), ck, park_dir, planned={kept.name})[0] == [kept]
    assert parking.parked(study.name, park_dir)  # planned: kept
    assert parking.park(study.name, set(), ck, park_dir, planned=set())[0] == []
    assert parking.parked(study.name, park_dir) == []  # its key changed: dropped, not parked
