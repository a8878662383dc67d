"""kt_lib.runs.budget: comparisons under an equal tuning budget. Every SimAKT label searches the
shared settings, a preset also its own (its off heads stay off); the ordinal labels their own
fields; drawn settings build the model they name; a search resumes with the trials it lacks; the
best configurations (learning rate included) become a study's `_tuned` variants."""

from __future__ import annotations

import json

import optuna
import pytest

from kt_lib.data.synthetic import simulate
from kt_lib.models import build_model
from kt_lib.runs import budget, studies, tuned
from kt_lib.runs.search import trial_settings
from kt_lib.train import TrainConfig

SIMAKT, ORDINAL = budget.BUDGETS["simakt"], budget.BUDGETS["ordinal"]


def test_every_simakt_label_searches_the_shared_settings_and_a_preset_its_own():
    spaces = {label: SIMAKT.space(label, 400) for label in SIMAKT.labels}
    for label, space in spaces.items():
        assert set(budget.SHARED_SPACE) <= set(space), label
    assert set(spaces["dtransformer"]) == set(budget.SHARED_SPACE)
    assert set(spaces["simakt_no_inter"]) == set(budget.SHARED_SPACE)
    assert {"cluster_weight", "n_clusters"} <= set(spaces["simakt_cluster_only"])
    assert {"knn_weight", "k_neighbors"} <= set(spaces["simakt_knn_only"])
    assert "knn_weight" not in spaces["simakt_cluster_only"]  # its KNN head stays off
    assert "cluster_weight" not in spaces["simakt_knn_only"]
    for preset in ("simakt_pwd", "simakt_cluster_only", "simakt_knn_only"):  # no head's weight
        assert "future_weight" in spaces[preset], preset


def test_the_ordinal_labels_search_their_own_fields_and_the_learning_rate():
    assert set(ORDINAL.space("modular_attention_gpcm", 400)) >= {"lr", "distance_penalty", "fusion"}
    assert set(ORDINAL.space("dkt_gpcm", 400)) == {"lr", "d"}
    assert ORDINAL.fields("dkt_gpcm", {"lr": 2e-3, "d": 64}) == {"d": 64}
    with pytest.raises(ValueError, match="budget 'ordinal' has no label 'akt'"):
        ORDINAL.space("akt", 400)


@pytest.mark.parametrize("label", list(SIMAKT.labels))
def test_drawn_settings_build_the_model_the_label_names(label):
    sim = simulate(num_students=40, seq_len=12, num_c=5, seed=0).data
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    settings = trial_settings(trial, SIMAKT.space(label, len(sim)))
    model_name, _ = SIMAKT.labels[label]
    fields = SIMAKT.fields(label, settings)
    assert "lr" not in fields  # a training setting: the variant's lr
    model = build_model(model_name, preset="tiny", dataset=sim, **fields)
    assert model.config.dropout == pytest.approx(settings["dropout"])
    assert (model.config.n_know, model.config.d_fc) == (settings["n_know"], settings["d_fc"])
    if label == "simakt_knn_only":
        heads = model.config.similarity_config().heads
        k = min(settings["k_neighbors"], settings["memory_size"])
        assert any(getattr(h.params, "k_neighbors", None) == k for h in heads)


def test_a_search_resumes_and_its_best_become_the_tuned_study(tmp_path):
    sim = simulate(num_students=50, seq_len=12, num_c=5, seed=2).data
    bundle = type("B", (), {"train": sim.subset(range(40)), "valid": sim.subset(range(40, 50))})
    storage = f"sqlite:///{tmp_path / 'budget.db'}"
    cfg = TrainConfig(epochs=1, progress=False)
    for label in ("dtransformer", "simakt_knn_only"):
        budget.search_label(SIMAKT, bundle, label, 2, cfg, storage, preset="tiny")
        assert budget.finished_trials(storage, label) == 2
    budget.search_label(SIMAKT, bundle, "dtransformer", 3, cfg, storage, preset="tiny")
    assert budget.finished_trials(storage, "dtransformer") == 3  # one more, not three
    best = budget.best_configs(SIMAKT, storage)
    assert set(best) == {"dtransformer", "simakt_knn_only"}
    assert best["dtransformer"]["trials"] == {"complete": 3}
    assert set(best["dtransformer"]["fields"]) == set(budget.SHARED_SPACE) - {"lr"}
    assert best["dtransformer"]["lr"] == best["dtransformer"]["params"]["lr"]
    knn = best["simakt_knn_only"]
    heads = {h["type"]: h for h in knn["fields"]["similarity"]["inter_heads"]}
    assert heads["knn"]["influence_weight"] == knn["params"]["knn_weight"]
    assert heads["cluster"]["influence_weight"] == 0.0  # knn_only stays knn-only
    out = tmp_path / "tuning.json"
    with pytest.raises(SystemExit):  # another storage without --out: the record is not replaced
        budget.main(["best", "simakt", "--storage", storage, "--partial"])
    with pytest.raises(SystemExit):  # 3 trials against 2: not an equal budget
        budget.main(["best", "simakt", "--storage", storage, "--out", str(out), "--trials", "3"])
    assert not out.exists()
    budget.main(["best", "simakt", "--storage", storage, "--out", str(out), "--partial"])
    assert json.loads(out.read_text())["labels"].keys() == best.keys()
    variants = tuned.tuned_variants(SIMAKT, out)
    assert variants["dtransformer_tuned"]["model"] == "dtransformer"
    study = tuned.tuned_study(variants)
    assert study.pairs == (("simakt_knn_only_tuned", "dtransformer_tuned"),)
    plan = {(r["model"], r["seed"]) for r in study.plan()}
    assert {m for m, _ in plan} == {"dtransformer_tuned", "simakt_knn_only_tuned"}
    assert sorted({s for _, s in plan}) == [0, 1, 2, 3, 4]
    runs = study.part_plans()[0].runs(study.train_config())
    tuned_lr = {r.name: r.spec.train.lr for r in runs}
    assert tuned_lr["dtransformer_tuned"] == pytest.approx(best["dtransformer"]["lr"])
    assert tuned.tuned_variants(SIMAKT, tmp_path / "none.json") == {}


def test_tuned_rows_join_a_study_as_a_last_part_paired_with_their_models():
    base = studies.DECLARED["ordinal_oulad"]  # without the tuned rows of results/ (if any)
    variants = {"dkt_gpcm_tuned": {"model": "dkt_gpcm", "lr": 2e-3, "d": 64}}
    grown = tuned.with_tuned_rows(base, variants)
    assert grown.parts[:-1] == base.parts
    assert grown.parts[-1].models == ("dkt_gpcm_tuned",)
    assert {d for d, _ in grown.parts[-1].datasets} == {"oulad_k5", "oulad_k4"}
    assert ("dkt_gpcm_tuned", "dkt_gpcm") in grown.pairs
    old = {r["key"] for r in base.plan()}
    assert old <= {r["key"] for r in grown.plan()}  # the runs before keep their keys


def test_the_cli_refuses_an_unknown_label_before_any_trial(capsys):
    with pytest.raises(SystemExit) as exc:
        budget.main(["search", "ordinal", "--trials", "0"])
    assert exc.value.code == 2 and "--trials 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="has no label 'akt'"):
        budget.main(["search", "simakt", "--labels", "akt"])


def test_a_search_runs_at_the_budgets_preset_and_a_resumed_one_draws_new_settings(tmp_path):
    assert SIMAKT.preset == ORDINAL.preset == "paper"  # the tuned rows' studies train paper
    sim = simulate(num_students=30, seq_len=12, num_c=5, seed=4).data
    bundle = type("B", (), {"train": sim.subset(range(24)), "valid": sim.subset(range(24, 30))})
    storage = f"sqlite:///{tmp_path / 'b.db'}"
    cfg = TrainConfig(epochs=1, progress=False)
    budget.search_label(SIMAKT, bundle, "dtransformer", 2, cfg, storage, preset="tiny")
    study = budget.search_label(SIMAKT, bundle, "dtransformer", 4, cfg, storage, preset="tiny")
    drawn = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(drawn) == 4 and len(set(drawn)) == 4  # the resumed half repeats none


def test_a_broken_tuning_file_leaves_its_rows_out_with_a_warning(tmp_path, monkeypatch):
    bad = tmp_path / "simakt_tuning.json"
    bad.write_text(
        json.dumps(
            {"labels": {"dtransformer": {"model": "dtransformer", "fields": {"no_field": 1}}}}
        )
    )
    monkeypatch.setattr(budget.Budget, "file", property(lambda self: bad))
    declared = {k: v for k, v in studies.STUDIES.items() if k != "simakt_tuned"}  # the file's
    with pytest.warns(UserWarning, match="simakt_tuning.json: .*its tuned rows are left out"):
        out = tuned.add_tuned_rows(declared)  # (the committed tuning file adds it in STUDIES)
    assert "simakt_tuned" not in out and set(declared) <= set(out)


def test_the_sparsekt_budget_searches_pykts_own_sweep_and_joins_the_baselines():
    sparse = budget.BUDGETS["sparsekt"]
    assert set(sparse.space("sparsekt_topk", 100)) == set(budget.SPARSEKT_SPACE) | {"k"}
    assert set(sparse.space("sparsekt_soft", 100)) == set(budget.SPARSEKT_SPACE) | {"ratio"}
    sim = simulate(num_students=20, seq_len=12, num_c=5, seed=0).data
    for label in sparse.labels:
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3)).ask()
        settings = trial_settings(trial, sparse.space(label, len(sim)))
        model = build_model(
            "sparsekt", preset="paper", dataset=sim, **sparse.fields(label, settings)
        )
        assert model.config.selection == label.removeprefix("sparsekt_")
        assert model.config.n_blocks == settings["n_blocks"] and model.config.d == settings["d"]
    variants = {"sparsekt_topk_tuned": {"model": "sparsekt", "lr": 1e-4, "selection": "topk"}}
    grown = tuned.with_tuned_rows(studies.DECLARED["baselines"], variants)
    assert grown.parts[-1].datasets == (("assist2015", "pykt"),)
    assert grown.pairs[-1] == ("sparsekt_topk_tuned", "sparsekt_topk")  # its untuned row


class _Killed(BaseException):
    """A kill mid-trial: Optuna does not catch it, so the trial stays RUNNING (as after SIGKILL)."""


def test_a_search_killed_mid_trial_finishes_that_trial_from_its_last_epoch(tmp_path, monkeypatch):
    from kt_lib.fileio import locked
    from kt_lib.runs import search

    sim = simulate(num_students=30, seq_len=12, num_c=5, seed=4).data
    bundle = type("B", (), {"train": sim.subset(range(24)), "valid": sim.subset(range(24, 30))})
    cfg = TrainConfig(epochs=4, patience=10, progress=False)
    plain, epochs, kill_at = search.run_experiment, [], [2]

    def watched(spec, splits, on_epoch):
        def seen(epoch, row):
            on_epoch(epoch, row)
            epochs.append(epoch)
            if kill_at and epoch == kill_at[0]:  # after epoch 1's checkpoint, before epoch 2's
                kill_at.clear()
                raise _Killed

        return plain(spec, splits, on_epoch=seen)

    monkeypatch.setattr(search, "run_experiment", watched)
    storage, ckpt = f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "ckpt"
    args = (SIMAKT, bundle, "dtransformer", 1, cfg, storage)
    with pytest.raises(_Killed):
        budget.search_label(*args, preset="tiny", checkpoints=ckpt)
    (stale,) = optuna.load_study(study_name="budget_dtransformer", storage=storage).trials
    assert stale.state == optuna.trial.TrialState.RUNNING
    assert list((ckpt / "dtransformer").glob("trial0-*_last.json"))  # epoch 1's checkpoint
    with locked(ckpt / "dtransformer" / "search"), pytest.raises(ValueError, match="another"):
        budget.search_label(*args, preset="tiny", checkpoints=ckpt)  # one search at a time
    epochs.clear()
    record = tmp_path / "trials.json"
    study = budget.search_label(*args, preset="tiny", checkpoints=ckpt, record=record)
    assert epochs == [2, 3]  # resumed after its last checkpointed epoch, not from 0
    (done,) = study.trials  # the same trial, ended, and no new one
    assert done.state == optuna.trial.TrialState.COMPLETE and done.params == stale.params
    assert done.user_attrs["device"]  # which machine's numbers these are (a search may mix)
    assert sorted(done.intermediate_values) == [0, 1, 2, 3]
    assert not list((ckpt / "dtransformer").glob("trial*"))  # removed once it ended
    (kept,) = json.loads(record.read_text())["labels"]["dtransformer"]  # recorded as it ended
    assert kept["state"] == "COMPLETE" and kept["value"] == done.value
    # the resumed trial scores what an uninterrupted one does (same settings, same draws)
    whole = budget.search_label(*args[:-1], f"sqlite:///{tmp_path / 'c.db'}", preset="tiny")
    assert whole.trials[0].params == done.params
    assert whole.trials[0].value == pytest.approx(done.value, abs=1e-6)


def test_a_search_leaves_out_labels_chosen_before_whose_trials_are_unrecorded(
    tmp_path, monkeypatch, capsys
):
    """The ordinal DKT's 20 trials ran before trials were recorded: a search without --labels
    must not run them again (a new choice would change its tuned rows, which have run)."""
    monkeypatch.setattr(budget, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    monkeypatch.setattr(budget.Budget, "storage", property(lambda b: f"sqlite:///{tmp_path}/b.db"))
    (tmp_path / "results" / "tuning").mkdir(parents=True)
    chosen = {label: {"model": label, "fields": {}, "lr": 1e-3} for label in ORDINAL.labels}
    ORDINAL.file.write_text(json.dumps({"labels": chosen}))
    budget.main(["search", "ordinal"])  # every label chosen before: nothing to search, no data
    out = capsys.readouterr().out
    assert all(f"{label}: chosen before in ordinal.json" in out for label in ORDINAL.labels)
    assert "ordinal: no label left to search" in out
    budget.main(["status", "ordinal"])  # and the status table says why they wait
    lines = capsys.readouterr().out.splitlines()
    for label in ORDINAL.labels:
        line = next(x for x in lines if x.startswith(f"{label} "))
        assert line.endswith("chosen before in ordinal.json, its trials unrecorded")


def _tiny_search(tmp_path, monkeypatch, on_epoch_2):
    """A one-trial search of 4 epochs on a tiny simulated set whose run calls `on_epoch_2()` at
    epoch 2 (after epoch 1's checkpoint); -> (search arguments, checkpoint folder)."""
    from kt_lib.runs import search

    sim = simulate(num_students=30, seq_len=12, num_c=5, seed=4).data
    bundle = type("B", (), {"train": sim.subset(range(24)), "valid": sim.subset(range(24, 30))})
    cfg = TrainConfig(epochs=4, patience=10, progress=False)
    plain = search.run_experiment

    def watched(spec, splits, on_epoch):
        def seen(epoch, row):
            on_epoch(epoch, row)
            if epoch == 2:
                on_epoch_2()

        return plain(spec, splits, on_epoch=seen)

    monkeypatch.setattr(search, "run_experiment", watched)
    storage = f"sqlite:///{tmp_path / 'b.db'}"
    return (SIMAKT, bundle, "dtransformer", 1, cfg, storage), tmp_path / "ckpt"


def test_ctrl_c_leaves_the_trial_running_and_its_checkpoint_for_the_next_search(
    tmp_path, monkeypatch
):
    """Optuna fails a trial that raises KeyboardInterrupt (it would count as ended and never
    resume); a resumable search turns Ctrl-C into SystemExit, which leaves it RUNNING."""
    import os
    import signal

    args, ckpt = _tiny_search(tmp_path, monkeypatch, lambda: os.kill(os.getpid(), signal.SIGINT))
    # as in a terminal (a background job, as under `make test`, ignores SIGINT, and the search
    # leaves that as it is)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit, match="interrupted"):
            budget.search_label(*args, preset="tiny", checkpoints=ckpt)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    finally:
        signal.signal(signal.SIGINT, before)
    (trial,) = optuna.load_study(study_name="budget_dtransformer", storage=args[-1]).trials
    assert trial.state == optuna.trial.TrialState.RUNNING
    assert list((ckpt / "dtransformer").glob("trial0-*_last.json"))


def test_a_trial_that_fails_removes_its_checkpoint(tmp_path, monkeypatch):
    def boom():
        raise RuntimeError("out of memory")

    args, ckpt = _tiny_search(tmp_path, monkeypatch, boom)
    record = tmp_path / "trials.json"
    with pytest.raises(RuntimeError, match="out of memory"):
        budget.search_label(*args, preset="tiny", checkpoints=ckpt, record=record)
    (trial,) = optuna.load_study(study_name="budget_dtransformer", storage=args[-1]).trials
    assert trial.state == optuna.trial.TrialState.FAIL  # ended: nothing to resume
    assert not list((ckpt / "dtransformer").glob("trial*"))
    # the record holds it too, so a fresh clone counts this label's budget as this storage does
    (kept,) = json.loads(record.read_text())["labels"]["dtransformer"]
    assert kept["state"] == "FAIL"


def test_a_search_killed_in_its_first_trial_does_not_replay_that_trial_next(tmp_path, monkeypatch):
    """The stale trial is finished with its stored settings and draws nothing: a sampler seeded
    by the ended trials alone (as before) drew the stale trial's settings again for the next."""
    kill = [True]

    def once():
        if kill:
            kill.clear()
            raise _Killed

    args, ckpt = _tiny_search(tmp_path, monkeypatch, once)
    with pytest.raises(_Killed):
        budget.search_label(*args, preset="tiny", checkpoints=ckpt)
    study = budget.search_label(*args[:3], 2, *args[4:], preset="tiny", checkpoints=ckpt)
    first, second = study.trials
    assert first.state == second.state == optuna.trial.TrialState.COMPLETE
    assert first.params != second.params


def test_each_storage_has_its_own_checkpoint_folder():
    default = budget._checkpoints(SIMAKT, None)
    assert default == budget.CHECKPOINTS / "budget" / "simakt"
    other = budget._checkpoints(SIMAKT, "sqlite:///elsewhere.db")
    assert other.parent == default and other != budget._checkpoints(SIMAKT, "sqlite:///x.db")


@pytest.mark.parametrize("command", [["search", "simakt", "--trials", "1"]])
def test_a_device_it_cannot_use_is_refused_before_a_trial(tmp_path, command, capsys):
    """A trial failed on a bad device counted as ended: each attempt spent one of the label's
    trials and wrote a failed trial into the record (a review)."""
    storage = f"sqlite:///{tmp_path / 'trials.db'}"
    with pytest.raises(SystemExit) as exc:
        budget.main([*command, "--device", "cdua", "--storage", storage])
    assert exc.value.code == 2 and "'cdua' is not a device name" in capsys.readouterr().err
    assert not (tmp_path / "trials.db").exists()
