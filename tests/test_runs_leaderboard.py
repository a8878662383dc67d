"""kt_lib.runs.leaderboard: plans trained into resumable results files (by workers too),
variants and per-dataset fields, the dry run, and results files read back as tables."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from kt_lib import reports
from kt_lib.runs.execute import ExecConfig
from kt_lib.runs.leaderboard import check_plan, run_leaderboard
from kt_lib.runs.leaderboard import main as leaderboard_main
from kt_lib.runs.plan import LeaderboardPlan, fold_plan
from kt_lib.runs.record import preset_digest
from kt_lib.runs.results import add_runs, load_results, read_runs
from kt_lib.runs.spec import DEFAULT_PRESET, ModelSettings
from kt_lib.runs.stats import compare_pairs
from kt_lib.runs.tables import leaderboard, published_comparison, to_markdown
from kt_lib.train import TrainConfig

TINY_TRAIN = TrainConfig(epochs=1, batch_size=16, max_len=12, lr=1e-2, progress=False)
SIM = dict(num_students=30, seq_len=10, num_c=4)


def test_leaderboard_workers_fill_the_results_file(tmp_path, capsys):
    """workers=2 merges each finished run into the file; rows in plan order, as workers=1 gives
    them; the failed run is in the file with its traceback and is retried on resume."""
    kw = dict(seeds=[0, 1], simulator=SIM, progress=False)
    models = ["dkt", "no_such_model", "sakt"]
    path, serial_path = tmp_path / "board.json", tmp_path / "serial.json"
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        serial = run_leaderboard(
            [(None, "synthetic")], models, TINY_TRAIN, results_file=serial_path, **kw
        )
    with pytest.warns(RuntimeWarning, match="2 of 6 runs failed"):
        parallel = run_leaderboard(
            [(None, "synthetic")],
            models,
            TINY_TRAIN,
            results_file=path,
            execution=ExecConfig(workers=2),
            **kw,
        )
    assert parallel[["model", "seed"]].values.tolist() == [[m, s] for s in (0, 1) for m in models]
    assert list(parallel.columns) == list(serial.columns)
    np.testing.assert_allclose(parallel["test_auc"], serial["test_auc"], rtol=0, atol=1e-6)
    assert parallel["run_key"].tolist() == serial["run_key"].tolist()
    for col in ("wall_seconds", "device_name"):
        assert parallel[col].notna().all()
    assert "commit" in parallel
    bad = parallel[parallel.model == "no_such_model"]
    assert bad["error"].str.contains("KeyError").all() and bad["test_auc"].isna().all()

    rows = json.loads(path.read_text())["results"]
    assert len(rows) == 6 and len({r["run_key"] for r in rows}) == 6
    assert sum("traceback" in r for r in rows) == 2
    by_key = {r["run_key"]: r for r in rows}
    for _, r in parallel.iterrows():
        if isinstance(r["error"], float):  # a finished run: its row is in the file
            assert by_key[r["run_key"]]["test_auc"] == pytest.approx(r["test_auc"], abs=1e-12)

    # resuming runs only the failed runs again (in this process: quick)
    with pytest.warns(RuntimeWarning, match="2 of 2 runs failed"):
        again = run_leaderboard([(None, "synthetic")], models, TINY_TRAIN, results_file=path, **kw)
    assert again["test_auc"].tolist()[::3] == parallel["test_auc"].tolist()[::3]
    table = load_results(path)
    board = leaderboard(table, published=False)
    assert board.loc[("synthetic", "dkt"), "runs"] == 2
    assert board.loc[("synthetic", "no_such_model"), "failed"] == 2
    assert board.loc[("synthetic", "no_such_model"), "runs"] == 0
    assert {"wall s", "device"} <= set(board.columns)
    if table["commit"].notna().any():  # None outside a git checkout
        assert "commit" in board

    leaderboard_main([str(path), "--no-published", "--pairs", "sakt:dkt"])
    out = capsys.readouterr().out
    assert "| sakt - dkt |" in out and "Wilcoxon p" in out and "wall s" in out
    with pytest.raises(SystemExit, match="nope"):
        leaderboard_main([str(path), "--pairs", "sakt:nope"])
    # named settings that would act on nothing are refused, not dropped (a review)
    for argv, says in [
        (["--metrics", "test_auc", "test_acuracy"], r"--metrics \['test_acuracy'\]: no run"),
        (["--pair-metric", "test_acc"], "give --pairs A:B too"),
        (["--digits", "-2"], "--digits -2: must be >= 0"),
    ]:
        with pytest.raises(SystemExit):
            leaderboard_main([str(path), *argv])
        assert re.search(says, capsys.readouterr().err), argv


def _results_file(path, data_dir, fold, aucs, model="dkt"):
    rows = [
        {
            "model": model,
            "test_auc": a,
            "test_acc": 0.7,
            "test_rmse": 0.4,
            "seed": s,
            "train_seconds": 2.0,
            "valid": {"auc": a},
            "history": {"epoch": [0]},
        }
        for s, a in enumerate(aucs)
    ]
    args = {"data_dir": data_dir, "data_format": "line3", "fold": fold, "preset": "paper"}
    path.write_text(json.dumps({"args": args, "protocol": f"fold {fold}", "results": rows}))
    return path


def test_leaderboard_round_trip(tmp_path, capsys):
    a = _results_file(tmp_path / "a.json", "../shared/data/assist2009", 1, [0.80])
    b = _results_file(tmp_path / "b.json", "../shared/data/assist2009", 2, [0.82])
    c = _results_file(tmp_path / "c.json", None, None, [0.6, 0.7], model="sakt")
    table = load_results([a, b, c])
    assert len(table) == 4 and "history" not in table and "valid" not in table
    assert table["dataset"].tolist() == ["assist2009", "assist2009", "synthetic", "synthetic"]
    assert table["fold"].tolist()[:2] == [1, 2]
    board = leaderboard(table)
    assert board.loc[("assist2009", "dkt"), "auc"] == "0.8100 ± 0.0141"
    assert board.loc[("assist2009", "dkt"), "runs"] == 2
    single = leaderboard(load_results([a]))
    assert single.loc[("assist2009", "dkt"), "auc"] == "0.8000"  # one run: no "± 0.0000"
    assert board.loc[("assist2009", "dkt"), "pyKT AUC"] == "0.7541"
    md = to_markdown(board)
    lines = md.splitlines()
    assert lines[0].startswith("| dataset | model | auc | acc | rmse | runs")
    assert lines[1].startswith("|---|")
    assert "| assist2009 | dkt | 0.8100 ± 0.0141 |" in md
    assert len(lines) == 2 + len(board)
    leaderboard_main([str(a), str(b)])
    out = capsys.readouterr().out
    assert "| assist2009 | dkt | 0.8100 ± 0.0141" in out and "fold 1" in out
    comparison = published_comparison(table)
    assert set(comparison["source"]) == {"DKVMN paper", "pyKT"}
    assert comparison["protocol difference"].str.contains("pooled over folds").all()
    with pytest.raises(ValueError, match="not a `kt run` results file"):
        (tmp_path / "bad.json").write_text("[]")
        load_results(tmp_path / "bad.json")


def test_leaderboard_resumes_from_its_results_file(tmp_path, monkeypatch):
    """Finished runs are written as they end; a rerun trains only what is missing, a changed
    setting trains again, and the file reads back through load_results."""
    from kt_lib.runs import execute

    sim = dict(num_students=30, seq_len=10, num_c=4)
    path = tmp_path / "board.json"
    calls = []
    real = execute.run_experiment

    def counting(spec, *args, **kw):
        calls.append(spec.name)
        return real(spec, *args, **kw)

    monkeypatch.setattr(execute, "run_experiment", counting)
    first = run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        TINY_TRAIN,
        seeds=[0, 1],
        simulator=sim,
        progress=False,
        results_file=path,
    )
    assert calls == ["dkt", "dkt"] and len(first) == 2
    assert all(t["precision"] == "fp32" for t in first["train"])  # resolved: None is fp32 on CPU
    again = run_leaderboard(
        [(None, "synthetic")],
        ["dkt", "sakt"],
        TINY_TRAIN,
        seeds=[0, 1],
        simulator=sim,
        progress=False,
        results_file=path,
    )
    assert calls == ["dkt", "dkt", "sakt", "sakt"]  # the dkt runs came from the file
    assert again[again.model == "dkt"]["test_auc"].tolist() == first["test_auc"].tolist()
    from dataclasses import replace

    run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        replace(TINY_TRAIN, lr=5e-3),
        seeds=[0],
        simulator=sim,
        progress=False,
        results_file=path,
    )
    assert calls[-1] == "dkt" and len(calls) == 5  # another lr is another run
    table = load_results(path)
    assert len(table) == 5 and set(table["dataset"]) == {"synthetic"}
    assert table["run_key"].is_unique and table["preset"].eq("tiny").all()
    other = tmp_path / "other.json"  # runs filled in a separate file (another process)
    run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        TINY_TRAIN,
        seeds=[2],
        simulator=sim,
        progress=False,
        results_file=other,
    )
    assert add_runs(path, read_runs(path)) == 5  # same keys: nothing doubles
    leaderboard_main([str(other), "--merge-into", str(path)])
    merged = load_results(path)
    assert len(merged) == 6 and sorted(merged["seed"].tolist()) == [0, 0, 0, 1, 1, 2]
    with pytest.raises(SystemExit, match="run_key"):
        leaderboard_main(
            [
                str(_results_file(tmp_path / "plain.json", None, None, [0.6])),
                "--merge-into",
                str(path),
            ]
        )
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot resume"):
        run_leaderboard(
            [(None, "synthetic")],
            ["dkt"],
            TINY_TRAIN,
            simulator=sim,
            progress=False,
            results_file=path,
        )


def test_a_run_another_process_finished_meanwhile_is_not_trained_again(tmp_path, monkeypatch):
    """Two processes on overlapping plans: a run the other one finishes while this one trains
    its first is taken from the file when its turn comes, not trained a second time."""
    from kt_lib.runs import execute

    path, calls = tmp_path / "board.json", []
    real = execute.run_experiment

    def first_then_the_other_process(spec, *args, **kw):
        calls.append(spec.seed)
        out = real(spec, *args, **kw)
        if len(calls) == 1:  # meanwhile, another process lands seed 1's row
            other = tmp_path / "other.json"
            run_leaderboard([(None, "synthetic")], ["dkt"], TINY_TRAIN, seeds=[1],
                            simulator=SIM, progress=False, results_file=other)  # fmt: skip
            add_runs(path, [{**r, "test_auc": 0.123} for r in read_runs(other)])
        return out

    monkeypatch.setattr(execute, "run_experiment", first_then_the_other_process)
    board = run_leaderboard([(None, "synthetic")], ["dkt"], TINY_TRAIN, seeds=[0, 1],
                            simulator=SIM, progress=False, results_file=path)  # fmt: skip
    assert calls == [0, 1]  # the second call is the other process's, not this plan's
    assert board["seed"].tolist() == [0, 1] and board["test_auc"].tolist()[1] == 0.123
    assert sorted(r["seed"] for r in read_runs(path)) == [0, 1]


def test_a_run_another_process_trains_now_leaves_no_failed_row(tmp_path, capsys):
    """Two processes on overlapping plans, the other one training a run right now (it holds the
    run's claim): this one's `fit` is refused, and that refusal is not written to the file as a
    failed run (the other process writes the run's row); the plan's other runs go on."""
    from pathlib import Path

    from kt_lib.fileio import locked
    from kt_lib.runs.leaderboard import checkpoint_name, run_plan

    plan = LeaderboardPlan.of([(None, "synthetic")], ["dkt"], seeds=[0, 1], simulator=SIM)
    taken = plan.runs(TINY_TRAIN)[1]
    claim = Path(tmp_path / "ckpt" / checkpoint_name(taken.key))
    path = tmp_path / "board.json"
    with locked(Path(f"{claim}.claim"), wait=False), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # not counted as a failed run either
        rows = run_plan(plan, TINY_TRAIN, False, path, checkpoint_dir=tmp_path / "ckpt")
    assert rows["error"].isna().tolist() == [True, False]
    assert rows["error"].tolist()[1].startswith("LockHeld")
    assert [r["seed"] for r in read_runs(path)] == [0]  # no failed row for seed 1
    assert "trained by another process now" in capsys.readouterr().out


def test_leaderboard_variants_are_labelled_configs_of_a_model(tmp_path):
    """A variant trains its registered model with the model's overrides and its own fields on
    top, carries its label as `model`, keys its runs apart from the base's, and pairs with it."""
    sim = dict(num_students=30, seq_len=10, num_c=4)
    kw = dict(seeds=[0, 1], simulator=sim, progress=False)
    variants = {"dkt_narrow": {"model": "dkt", "d": 4}, "dkt_deep": {"model": "dkt", "n_layers": 2}}
    variants["dkt_deep"]["lr"] = 0.02  # a tuned variant's own learning rate
    variants["dkt_narrow"].update(epochs=TINY_TRAIN.epochs + 1, batch_size=3)  # its own training
    runs = run_leaderboard(
        [(None, "synthetic")],
        ["dkt", "dkt_narrow", "dkt_deep"],
        TINY_TRAIN,
        overrides={"dkt": {"d": 6}},
        variants=variants,
        results_file=tmp_path / "board.json",
        **kw,
    )
    assert runs["model"].tolist() == ["dkt", "dkt_narrow", "dkt_deep"] * 2
    assert runs["variant_of"].isna().tolist() == [True, False, False] * 2
    assert set(runs["variant_of"].dropna()) == {"dkt"}
    params = runs.groupby("model")["params"].first()
    # d=6 from the model's overrides, d=4 from the variant, d=6 + 2 layers for the deep one
    assert params["dkt_narrow"] < params["dkt"] < params["dkt_deep"]
    assert runs["run_key"].is_unique
    # each row stores its registered model's preset digest (a variant's is its base's)
    assert set(runs["preset_digest"]) == {preset_digest("dkt", DEFAULT_PRESET)}
    lrs = {m: r["lr"] for m, r in zip(runs["model"], runs["train"], strict=True)}
    assert lrs["dkt_deep"] == 0.02 and lrs["dkt"] == lrs["dkt_narrow"] == TINY_TRAIN.lr
    trains = dict(zip(runs["model"], runs["train"], strict=False))  # each row its own recipe
    assert (trains["dkt_narrow"]["epochs"], trains["dkt_narrow"]["batch_size"]) == (
        TINY_TRAIN.epochs + 1, 3)  # fmt: skip
    assert (trains["dkt"]["epochs"], trains["dkt"]["batch_size"]) == (
        TINY_TRAIN.epochs, TINY_TRAIN.batch_size)  # fmt: skip
    assert set(load_results(tmp_path / "board.json")["model"]) == set(runs["model"])
    paired = compare_pairs(runs, ["dkt_narrow:dkt"])
    assert paired["n_pairs"].iloc[0] == 2
    # per-dataset fields go over everything else, on that dataset only
    per_dataset = {"synthetic": {"dkt_narrow": {"d": 3}}, "assist2009": {"dkt": {"d": 50}}}
    again = run_leaderboard(
        [(None, "synthetic")],
        ["dkt", "dkt_narrow"],
        TINY_TRAIN,
        overrides={"dkt": {"d": 6}},
        variants=variants,
        dataset_overrides=per_dataset,
        **kw,
    )
    sizes = again.groupby("model")["params"].first()
    assert sizes["dkt"] == params["dkt"] and sizes["dkt_narrow"] < params["dkt_narrow"]
    for bad, match in (
        ({"synthetic": {"dkt_wide": {"d": 3}}}, "'dkt_wide'"),
        ({"synthetic": {"dkt_narrow": {"width": 3}}}, r"\['synthetic'\]\['dkt_narrow'\]"),
    ):
        with pytest.raises(ValueError, match=match):
            run_leaderboard(
                [(None, "synthetic")],
                ["dkt"],
                TINY_TRAIN,
                variants=variants,
                dataset_overrides=bad,
                **kw,
            )
    # overrides[label] goes over the variant's own fields; a variant's failed run keeps its label
    with pytest.warns(RuntimeWarning, match="2 of 4 runs failed"):
        more = run_leaderboard(
            [(None, "synthetic")],
            ["dkt_narrow", "dkt_broken"],
            TINY_TRAIN,
            overrides={"dkt_narrow": {"d": 5}},
            variants={**variants, "dkt_broken": {"model": "dkt", "n_layers": 0}},
            **kw,
        )
    narrow = more[more.model == "dkt_narrow"]
    assert (narrow["params"] > params["dkt_narrow"]).all() and narrow["error"].isna().all()
    broken = more[more.model == "dkt_broken"]
    assert broken["variant_of"].eq("dkt").all() and broken["error"].str.contains("n_layers").all()
    for bad, match in (
        ({"dkt": {"model": "dkt"}}, "name of a registered model"),
        ({"x": {"d": 4}}, "must name a registered model"),
        ({"x": {"model": "no_such_model"}}, "must name a registered model"),
        ({"x": {"model": ["dkt"]}}, "must name a registered model"),
        (
            {"x": {"model": "dkt", "hidden": 4}},
            r"variant 'x': dkt has no config field\(s\) \['hidden'\]",
        ),
        ({"x": {"model": "dkt", "seed": 3}}, r"no config field\(s\) \['seed'\]"),
    ):
        with pytest.raises(ValueError, match=match):
            run_leaderboard([(None, "synthetic")], ["x"], TINY_TRAIN, variants=bad, **kw)


def test_full_profile_variants_build_and_pairs_name_its_models():
    """The full profile's variants name registered models with valid fields, and every pair it
    asks for compares two of its models."""

    import yaml

    from kt_lib.data import load_bundle
    from kt_lib.models import MODELS, build_model

    root = reports.ROOT
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "10_compare_models.ipynb")
    models, variants = params["models"], params["variants"]
    assert set(variants) <= set(models)
    assert all(set(pair) <= set(models) for pair in params["pairs"])
    settings = ModelSettings.parse(params["overrides"], variants, params["dataset_overrides"])
    configs = {name: settings.cell("any", name) for name in models}
    assert configs["ikt3_lambda0"] == ("ikt3", {"warmup": 10, "lambda_target": 0.0})
    data = load_bundle(None, "synthetic", num_students=20, seq_len=10, num_c=4).train
    for label in variants:
        name, fields = configs[label]
        model = build_model(name, dataset=data, preset="tiny", **fields)
        assert isinstance(model, MODELS[name])
        assert all(getattr(model.config, k) == v for k, v in fields.items())
    for per_model in params["dataset_overrides"].values():  # their configs parse and build
        for label, fields in per_model.items():
            name, merged = configs[label]
            model = build_model(name, dataset=data, preset="tiny", **{**merged, **fields})
            assert isinstance(model, MODELS[name])


def test_full_profile_simakt_banks_fit_statics2011():
    """Statics2011's folds hold 176-193 training students, too few to fill 2 bank folds of 100
    clusters: the full profile's per-dataset overrides give every SimAKT row there banks it can
    build, on its smallest fold (3) and its largest (1)."""

    import yaml

    from kt_lib.data import load_bundle
    from kt_lib.models import build_model

    root = reports.ROOT
    data_dir = root.parent / "shared" / "data" / "statics2011"
    if not data_dir.is_dir():
        pytest.skip("../shared/data/statics2011 is not here")
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "10_compare_models.ipynb")
    assert fold_plan("line3", params["folds"], [0], data_dir)[0] == (1, 0)  # the files' folds
    simakt = [m for m in params["models"] if m == "simakt" or m.startswith("simakt_")]
    settings = ModelSettings.parse(params["overrides"], params["variants"])
    configs = {name: settings.cell("any", name) for name in simakt}
    for fold in (3, 1):
        train = load_bundle(data_dir, "line3", fold=fold).train
        with pytest.raises(ValueError, match="n_clusters=100 is larger than the bank"):
            model = build_model("simakt", dataset=train, preset="tiny", similarity="cluster_only")
            model.prepare(train)
        for label in simakt:
            name, fields = configs[label]
            fields = {**fields, **params["dataset_overrides"]["statics2011"].get(label, {})}
            # tiny sizes: the banks' sizes come from the similarity config alone
            model = build_model(name, dataset=train, preset="tiny", **fields)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # KNN banks keep every student, and say so
                model.prepare(train)
            off = all(w == 0 for w in model.inter.weights)  # inter heads off: no bank to build
            assert bool(model.banks()) != off, (label, fold)


def test_check_plan_finds_the_cells_that_would_fail(capsys):
    """The dry run builds, prepares and steps every cell; a cell whose runs would all fail (banks
    too small for the clusters asked, a config a model refuses) is reported with its error,
    and `reports check` exits non-zero on it."""
    sim = dict(num_students=40, seq_len=12, num_c=4)
    variants = {
        "simakt_big": {"model": "simakt", "similarity": "cluster_only"},  # 100 clusters
        "dkt_broken": {"model": "dkt", "n_layers": 0},
    }
    plan = LeaderboardPlan.of(
        iter([(None, "synthetic")]),  # any iterable
        ["dkt", "simakt_big", "dkt_broken"],
        seeds=[0],
        simulator=sim,
        variants=variants,
    )
    board = check_plan(plan, progress=False)
    assert board["model"].tolist() == ["dkt", "simakt_big", "dkt_broken"]
    assert board["ok"].tolist() == [True, False, False]
    assert board["error"].iloc[1].startswith("ValueError: n_clusters=100 is larger than the bank")
    assert "n_layers must be >= 1" in board["error"].iloc[2]
    fixed = {"synthetic": {"simakt_big": {"similarity": {"base": "cluster_only", "n_clusters": 3}}}}
    plan = LeaderboardPlan.of(
        [(None, "synthetic")],
        ["simakt_big"],
        simulator=sim,
        variants=variants,
        dataset_overrides=fixed,
    )
    again = check_plan(plan, progress=False)
    assert again["ok"].all() and again["seconds"].ge(0).all()
    with pytest.raises(SystemExit, match="1 cell"):
        reports.main(
            ["check", "--profile", "quick", "--set", "models=[dkt, simakt_big]", "num_students=40"]
            + ["variants={simakt_big: {model: simakt, similarity: cluster_only}}"]
        )
    assert "| synthetic | simakt_big |" in capsys.readouterr().out
