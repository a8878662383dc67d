"""kt_lib.runs.trials: a tuning budget's committed trial record. Every ended trial (complete,
pruned, failed) round-trips through the record into a fresh storage with its state, value,
settings, distributions and per-epoch values; restoring twice adds nothing; a search writes each
ended trial to the record and a fresh clone's search resumes from it; `kt budget status` and
`kt budget best` read a storage rebuilt from the record alone."""

from __future__ import annotations

import json

import optuna
import pytest

from kt_lib.data.synthetic import simulate
from kt_lib.runs import budget, trials
from kt_lib.train import TrainConfig

SIMAKT = budget.BUDGETS["simakt"]


def _storage(tmp_path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def _three_trials(storage: str, label: str) -> None:
    study = optuna.create_study(study_name=trials.study_name(label), storage=storage,
                                direction="maximize")  # fmt: skip
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 3e-3, log=True),
            "d_fc": optuna.distributions.CategoricalDistribution((128, 256, 512))}  # fmt: skip
    ends = (("COMPLETE", 0.71, 1e-3), ("PRUNED", None, 2e-4), ("FAIL", None, 3e-3))
    for state, value, lr in ends:
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState[state], value=value, params={"lr": lr, "d_fc": 256},
            distributions=dist, intermediate_values={0: 0.6, 1: 0.65}, user_attrs={"best_epoch": 1},
        ))  # fmt: skip


def test_every_ended_trial_round_trips_through_the_record(tmp_path):
    src, dst, path = _storage(tmp_path, "a.db"), _storage(tmp_path, "b.db"), tmp_path / "t.json"
    _three_trials(src, "dtransformer")
    assert trials.save(src, "dtransformer", path) == 3
    assert trials.restore(dst, "dtransformer", path) == 3
    assert trials.restore(dst, "dtransformer", path) == 0  # matched by origin: nothing twice
    a, b = (trials.load(s, "dtransformer").trials for s in (src, dst))
    for x, y in zip(a, b, strict=True):
        assert (x.state, x.value, x.params) == (y.state, y.value, y.params)
        assert x.distributions == y.distributions
        assert x.intermediate_values == y.intermediate_values
        assert y.user_attrs["best_epoch"] == 1 and trials.origin(x) == trials.origin(y)
        assert x.datetime_start == y.datetime_start
    # a trial that ends in the fresh storage joins the record beside the restored ones
    lr = {"lr": optuna.distributions.FloatDistribution(1e-4, 3e-3, log=True)}
    new = optuna.trial.create_trial(value=0.72, params={"lr": 5e-4}, distributions=lr)
    trials.load(dst, "dtransformer").add_trial(new)
    assert trials.save(dst, "dtransformer", path) == 4
    assert trials.restore(src, "dtransformer", path) == 1
    assert trials.summary(src, "dtransformer", 20)["states"] == {"complete": 2, "fail": 1,
                                                                 "pruned": 1}  # fmt: skip


def test_a_broken_record_is_named(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"t\.json: not a trial record"):
        trials.restore(_storage(tmp_path, "a.db"), "dtransformer", path)
    assert trials.restore(_storage(tmp_path, "a.db"), "x", tmp_path / "none.json") == 0


def test_a_search_records_each_trial_and_a_fresh_clone_resumes_from_the_record(tmp_path):
    sim = simulate(num_students=30, seq_len=12, num_c=5, seed=4).data
    bundle = type("B", (), {"train": sim.subset(range(24)), "valid": sim.subset(range(24, 30))})
    cfg, path = TrainConfig(epochs=2, progress=False), tmp_path / "simakt_trials.json"
    first = _storage(tmp_path, "first.db")
    budget.search_label(SIMAKT, bundle, "dtransformer", 2, cfg, first, preset="tiny", record=path)
    rows = json.loads(path.read_text())["labels"]["dtransformer"]
    assert len(rows) == 2 and all(len(r["intermediate"]) >= 1 for r in rows)
    fresh = _storage(tmp_path, "fresh.db")  # a clone with the record and no storage
    study = budget.search_label(SIMAKT, bundle, "dtransformer", 3, cfg, fresh, preset="tiny",
                                record=path)  # fmt: skip
    assert budget.finished_trials(fresh, "dtransformer") == 3  # two restored, one run
    drawn = {tuple(sorted(t.params.items())) for t in study.trials}
    assert len(drawn) == 3
    assert len(json.loads(path.read_text())["labels"]["dtransformer"]) == 3


def test_status_and_best_read_the_record_on_a_fresh_clone(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    monkeypatch.setattr(budget, "RESULTS", tmp_path / "results")
    (tmp_path / "results" / "tuning").mkdir(parents=True)  # a fresh clone: no runs/ yet
    _three_trials(_storage(tmp_path, "elsewhere.db"), "dtransformer")
    trials.save(_storage(tmp_path, "elsewhere.db"), "dtransformer", SIMAKT.record)
    budget.main(["status", "simakt"])
    out = capsys.readouterr().out
    assert "simakt: 3 of 100 trials ended" in out
    line = next(x for x in out.splitlines() if x.startswith("dtransformer "))
    assert "3/20" in line and "0.7100" in line and "1 complete, 1 fail, 1 pruned" in line
    budget.main(["best", "simakt", "--out", str(tmp_path / "best.json"), "--trials", "3"])
    best = json.loads((tmp_path / "best.json").read_text())["labels"]
    assert best["dtransformer"]["lr"] == pytest.approx(1e-3)
    assert best["dtransformer"]["trials"] == {"complete": 1, "fail": 1, "pruned": 1}


def test_a_record_of_another_pruner_is_refused(tmp_path):
    """Every trial of a budget has the same pruner: a record made under other pruner settings
    (simakt's first search pruned from epoch 1; the budget now waits five epochs) is refused,
    not mixed in."""
    src, path = _storage(tmp_path, "a.db"), tmp_path / "t.json"
    _three_trials(src, "dtransformer")
    old = {"kind": "median", "n_startup_trials": 3, "n_warmup_steps": 1}
    trials.save(src, "dtransformer", path, old)
    assert json.loads(path.read_text())["pruner"] == old
    assert SIMAKT.pruner != old
    with pytest.raises(ValueError, match=r"t\.json: its trials were pruned with .* this budget"):
        trials.restore(_storage(tmp_path, "b.db"), "dtransformer", path, SIMAKT.pruner)
    assert trials.restore(_storage(tmp_path, "b.db"), "dtransformer", path, old) == 3
    trials.save(src, "dtransformer", path)  # a save that names no pruner keeps the recorded one
    assert json.loads(path.read_text())["pruner"] == old


def test_a_running_trial_is_shown_and_never_recorded(tmp_path):
    """A trial in flight (or left RUNNING by a killed search, which resumes it) is named with the
    last epoch it reported, and stays out of the record until it ends."""
    storage, path = _storage(tmp_path, "a.db"), tmp_path / "t.json"
    _three_trials(storage, "dtransformer")
    trial = trials.load(storage, "dtransformer").ask()
    trial.report(0.6, 0)
    trial.report(0.62, 1)
    assert trials.summary(storage, "dtransformer", 20)["running"] == [(3, 1)]
    assert trials.save(storage, "dtransformer", path) == 3  # the ended ones only
    assert "trial 3 running (epoch 1 reported)" in trials.status_line(
        trials.summary(storage, "dtransformer", 20)
    )


def test_a_label_whose_trials_ran_on_two_devices_is_flagged(tmp_path):
    storage = _storage(tmp_path, "a.db")
    study = optuna.create_study(study_name=trials.study_name("dtransformer"), storage=storage,
                                direction="maximize")  # fmt: skip
    lr = {"lr": optuna.distributions.FloatDistribution(1e-4, 3e-3, log=True)}
    for device, value in (("AMD EPYC", 0.70), ("AMD EPYC", 0.71)):
        study.add_trial(optuna.trial.create_trial(value=value, params={"lr": 1e-3},
                        distributions=lr, user_attrs={"device": device}))  # fmt: skip
    row = trials.summary(storage, "dtransformer", 20)
    assert row["devices"] == ["AMD EPYC"] and "MIXED" not in trials.status_line(row)
    study.add_trial(optuna.trial.create_trial(value=0.72, params={"lr": 1e-3}, distributions=lr,
                                              user_attrs={"device": "NVIDIA H100"}))  # fmt: skip
    line = trials.status_line(trials.summary(storage, "dtransformer", 20))
    assert "devices MIXED: AMD EPYC | NVIDIA H100" in line


def test_best_keeps_a_chosen_label_whose_trials_the_storage_lacks(tmp_path, capsys):
    """The ordinal DKT's 20 trials ran before trials were recorded: `kt budget best` after the
    other labels' searches must not drop its tuned configuration (its tuned rows have run)."""
    storage, out = _storage(tmp_path, "a.db"), tmp_path / "tuning.json"
    _three_trials(storage, "dtransformer")
    before = {"simakt_pwd": {"model": "simakt", "lr": 5e-4}, "dtransformer": {"lr": 9.0}}
    out.write_text(json.dumps({"budget": "simakt", "labels": before}))
    budget.main(["best", "simakt", "--storage", storage, "--out", str(out), "--trials", "3"])
    labels = json.loads(out.read_text())["labels"]
    assert labels["simakt_pwd"] == before["simakt_pwd"]  # kept as it was
    assert labels["dtransformer"]["lr"] == pytest.approx(1e-3)  # chosen again from the storage
    assert "kept from before (no trials here): simakt_pwd" in capsys.readouterr().out


def test_opening_an_sqlite_storage_holds_its_lock_while_it_creates_the_tables(
    tmp_path, monkeypatch
):
    """Two searches started side by side on a fresh file created its tables at once and one
    failed (a CI run, under load): opening holds `<file>.lock`, so they take turns."""
    import fcntl

    import optuna

    from kt_lib.runs import trials

    db = tmp_path / "runs" / "budget.db"
    held = []
    real = optuna.storages.RDBStorage

    def probe(url, **kw):
        with open(db.with_name(db.name + ".lock"), "w") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
                fcntl.flock(other, fcntl.LOCK_UN)
            except BlockingIOError:
                held.append(True)
        return real(url, **kw)

    monkeypatch.setattr(optuna.storages, "RDBStorage", probe)
    storage = trials.opened(f"sqlite:///{db}")
    assert held == [True] and db.exists()  # made under the lock, its folder made too
    assert isinstance(storage, real)
