"""Ablation grids, attention collection and plots, the leaderboard and the report index."""

from __future__ import annotations

import json
import re
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from kt_lib import leaderboard as lb  # noqa: E402
from kt_lib import reports  # noqa: E402
from kt_lib.ablation import (  # noqa: E402
    aggregate,
    build_grid,
    check_cells,
    list_grids,
    run_grid,
    simakt_similarity,
    summarise,
)
from kt_lib.audit import random_batch  # noqa: E402
from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.models import MODELS, build_model, list_models, make_config  # noqa: E402
from kt_lib.models.simakt import load_simakt_config  # noqa: E402
from kt_lib.published import PUBLISHED, published_frame, published_wide  # noqa: E402
from kt_lib.train import TrainConfig  # noqa: E402
from kt_lib.viz import attention as att  # noqa: E402
from tests.conftest import make_tiny_dataset  # noqa: E402

NUM_C, NUM_PID = 12, 36
TINY_TRAIN = TrainConfig(epochs=1, batch_size=16, max_len=12, lr=1e-2, progress=False)


@pytest.fixture(scope="module")
def sim_bundle():
    return load_bundle(None, "synthetic", seed=0, num_students=40, seq_len=12, num_c=4)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --- ablation grids --------------------------------------------------------------------------


def test_run_grid_rows_factors_and_seed_spread(sim_bundle):
    cells = [
        {"label": "dkt", "model": "dkt", "preset": "tiny", "factors": {"family": "rnn"}},
        {"label": "sakt d=8", "model": "sakt", "preset": "tiny", "overrides": {"d": 8}},
    ]
    table = run_grid(cells, sim_bundle, seeds=[0, 1], train_config=TINY_TRAIN, progress=False)
    assert len(table) == 4
    assert table[["label", "seed"]].values.tolist() == [
        ["dkt", 0],
        ["dkt", 1],
        ["sakt d=8", 0],
        ["sakt d=8", 1],
    ]
    assert {"model", "preset", "family", "d", "test_auc", "test_acc", "test_rmse"} <= set(table)
    assert table.loc[table.label == "dkt", "family"].eq("rnn").all()
    assert table.loc[table.label == "sakt d=8", "d"].eq(8).all()
    assert np.isfinite(table["test_auc"]).all()
    for _, runs in table.groupby("label"):
        assert runs["test_auc"].nunique() == 2, "different seeds must give different numbers"
    again = run_grid(cells[:1], sim_bundle, seeds=[0], train_config=TINY_TRAIN, progress=False)
    assert again["test_auc"].iloc[0] == table["test_auc"].iloc[0]  # same seed, same number


def test_summarise_formats_mean_std():
    table = pd.DataFrame({"label": ["a", "a", "b"], "seed": [0, 1, 0], "test_auc": [0.7, 0.8, 0.6]})
    s = summarise(table, "label")
    assert list(s.index) == ["a", "b"] and list(s.columns) == ["test_auc", "runs"]
    assert s.loc["a", "test_auc"] == "0.7500 ± 0.0707"
    assert s.loc["b", "test_auc"] == "0.6000 ± 0.0000"  # one run: std 0
    assert s.loc["a", "runs"] == 2
    assert re.fullmatch(r"\d\.\d{2} ± \d\.\d{2}", summarise(table, "label", digits=2).iloc[0, 0])
    agg = aggregate(table, "label", ["test_auc"])
    assert agg.loc["a", ("mean", "test_auc")] == pytest.approx(0.75)


@pytest.mark.parametrize(
    "cells, message",
    [
        ([], "at least one cell"),
        ([{"label": "x"}], "lacks"),
        ([{"label": "x", "model": "dkt", "seeds": 3}], "unknown key"),
        ([{"label": "x", "model": "dkt"}, {"label": "x", "model": "sakt"}], "duplicate"),
    ],
)
def test_cell_errors(cells, message):
    with pytest.raises(ValueError, match=message):
        check_cells(cells)


@pytest.mark.parametrize("name", list_grids())
def test_predefined_grids_build_valid_configs(name):
    grid = build_grid(name)
    assert len(grid) >= 2 and grid.description
    labels = [c["label"] for c in grid.cells]
    assert len(set(labels)) == len(labels)
    K = 4 if grid.ordinal else 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # no_inter_student: every head off
        for cell in grid.cells:
            assert MODELS[cell["model"]].ordinal == grid.ordinal
            cfg = make_config(
                cell["model"], preset=cell["preset"], num_c=NUM_C, K=K, **cell["overrides"]
            )
            cfg.validate()
            assert set(grid.factors) <= set(cell["factors"])


def test_simakt_grids_shrink_banks_and_set_factors():
    sim = simakt_similarity("position_weighted_dual", n_clusters=3, k_neighbors=2, future_weight=1)
    parsed = load_simakt_config(sim)
    cluster, knn = parsed.heads
    assert cluster.params.n_clusters == 3 and knn.params.k_neighbors == 2
    assert cluster.future_weight == knn.future_weight == 1.0
    step2 = load_simakt_config(
        simakt_similarity("dual_modular", n_clusters=5, memory_size=7, k_neighbors=3)
    )
    assert step2.heads[0].params.n_clusters == 5 and step2.heads[1].params.memory_size == 7
    with pytest.raises(ValueError, match="unknown SimAKT setting"):
        simakt_similarity("position_weighted_dual", clusters=3)
    heads = build_grid("simakt_heads")
    weights = {
        c["label"]: (c["factors"]["cluster_weight"], c["factors"]["knn_weight"])
        for c in heads.cells
    }
    assert weights == {
        "no_inter_student": (0.0, 0.0),
        "cluster_only": (1.0, 0.0),
        "knn_only": (0.0, 1.0),
        "dual": (1.0, 1.0),
    }
    fw = build_grid("simakt_future_weight", weights=[0, 1])
    assert [c["factors"]["future_weight"] for c in fw.cells] == [0.0, 1.0]
    with pytest.raises(KeyError, match="valid names"):
        build_grid("nope")


# --- attention -------------------------------------------------------------------------------


def _trained_tiny(name: str):
    K = 4 if MODELS[name].ordinal else 2
    train = make_tiny_dataset(NUM_C, NUM_PID, K)
    torch.manual_seed(0)
    model = build_model(name, preset="tiny", num_c=NUM_C, num_pid=NUM_PID, K=K)
    model.prepare(train)
    return model, random_batch(NUM_C, B=3, L=16, num_pid=NUM_PID, K=K, seed=1), K


@pytest.mark.parametrize("name", list_models())
def test_collect_attention_every_model(name):
    model, batch, K = _trained_tiny(name)
    model.train()
    maps = att.collect_attention(model, batch, index=1)
    assert model.training, "collect_attention restores the training mode"
    n = int(batch.mask[1].sum())
    if name == "dkt":
        assert maps == {}
    else:
        assert maps, f"{name} returned no attention maps"
    for key, w in maps.items():
        layer, head = att.split_key(key)
        assert layer and head, key
        assert isinstance(w, np.ndarray) and w.ndim == 2 and np.isfinite(w).all(), key
        assert w.shape[0] == n, key
        if not att.is_memory(key):
            assert re.fullmatch(r"h\d+", head) and w.shape == (n, n), key
            assert np.triu(w, 1).max(initial=0) == 0, f"{key} attends to a later step"
    assert all(not att.is_memory(k) for k in maps) or name == "simakt"
    labels = att.step_labels(batch, 1, K)
    assert len(labels) == n
    keys = att.key_labels(model, batch, 1, K)
    assert len(keys) == n and (keys[0] == "start") == (name == "ikt3")


def test_named_maps_of_akt_simakt_and_ordinal():
    akt, batch, _ = _trained_tiny("akt")
    maps = att.collect_attention(akt, batch)
    assert {"retriever0", "retriever0/undecayed"} <= set(att.layers(maps))
    simakt, batch, _ = _trained_tiny("simakt")
    maps = att.collect_attention(simakt, batch)
    assert {"block3/cluster", "block3/knn"} <= {k for k in maps if att.is_memory(k)}
    assert att.layers(maps, memory=True) == ["block3"]
    modular, batch, _ = _trained_tiny("modular_attention_gpcm")
    maps = att.collect_attention(modular, batch)
    assert "ordinal_aware/attention" in att.layers(maps)


def test_tick_labels():
    batch = random_batch(NUM_C, B=1, L=3, K=2, seed=0, ragged=False)
    batch.q[0], batch.r[0] = torch.tensor([12, 3, 0]), torch.tensor([1, 0, 1])
    assert att.step_labels(batch) == ["q12✓", "q3✗", "q0✓"]
    batch.r[0] = torch.tensor([2, 0, 3])
    assert att.step_labels(batch, K=4) == ["q12:2", "q3:0", "q0:3"]


@pytest.mark.parametrize("name", ["sakt", "akt", "ikt3", "modular_attention_gpcm"])
def test_heatmaps_draw(name):
    model, batch, K = _trained_tiny(name)
    maps = att.collect_attention(model, batch)
    labels = att.step_labels(batch, 0, K)
    assert att.plot_heads(maps, labels=labels, key_labels=att.key_labels(model, batch, 0, K))
    assert att.plot_layers(maps, labels=labels, max_steps=8)
    per_model = {name: maps, "dkt": {}}
    assert att.plot_side_by_side(per_model, labels)
    with pytest.raises(KeyError, match="layers"):
        att.plot_heads(maps, "nope")


def test_decay_curves_and_fusion_weights():
    akt, _, _ = _trained_tiny("akt")
    rates = att.decay_rates(akt)
    assert set(rates) == {"encoder0", "question0", "retriever0"}
    curves = att.decay_curves(rates, max_distance=10, n=11)
    expected = np.exp(-rates["encoder0"][1] * 10)
    row = curves[(curves.layer == "encoder0") & (curves["head"] == "h1")].iloc[-1]
    assert row["factor"] == pytest.approx(expected)
    assert att.plot_decay_curves(akt)
    dt, _, _ = _trained_tiny("dtransformer")
    assert {"block1", "block2", "block3", "block4"} <= set(att.decay_rates(dt))
    modular, _, _ = _trained_tiny("modular_attention_gpcm")
    weights = att.fusion_weights(modular)
    assert weights["weight"].sum() == pytest.approx(1.0)
    assert att.plot_fusion_weights(modular)
    sakt, _, _ = _trained_tiny("sakt")
    assert att.fusion_weights(sakt).empty
    with pytest.raises(ValueError, match="no decay"):
        att.plot_decay_curves(sakt)


def test_memory_attention_against_archetypes():
    res = load_bundle(None, "synthetic", seed=0, num_students=60, seq_len=12, num_c=4)
    torch.manual_seed(0)
    model = build_model("simakt", preset="tiny", dataset=res.train, max_len=12)
    model.prepare(res.train)
    uid = res.test.students[0].uid
    maps, batch = att.student_attention(model, res.test, uid, max_len=12)
    slots = att.memory_slots(model, uid, res.truth)
    cluster = slots[slots["kind"] == "cluster"]
    assert len(cluster) == 3 and cluster["size"].sum() > 0
    shares = cluster[list(res.truth.arch_names)].to_numpy()
    assert np.allclose(shares.sum(1)[cluster["size"] > 0], 1.0)
    table = att.memory_attention(maps)
    assert set(table["map"]) == {"block3/cluster", "block3/knn", "block3/graph", "block3/attention"}
    assert att.plot_memory_attention(maps, slots)
    affinity = att.archetype_affinity(model, res.test, res.truth, max_len=12)
    sums = affinity.groupby(["map", "true"])["mass"].sum()
    assert np.allclose(sums.loc[["block3/cluster", "block3/knn"]], 1.0, atol=1e-5)
    assert att.plot_archetype_affinity(affinity)


# --- leaderboard, published figures, report index --------------------------------------------


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
    table = lb.load_results([a, b, c])
    assert len(table) == 4 and "history" not in table and "valid" not in table
    assert table["dataset"].tolist() == ["assist2009", "assist2009", "synthetic", "synthetic"]
    assert table["fold"].tolist()[:2] == [1, 2]
    board = lb.leaderboard(table)
    assert board.loc[("assist2009", "dkt"), "auc"] == "0.8100 ± 0.0141"
    assert board.loc[("assist2009", "dkt"), "runs"] == 2
    single = lb.leaderboard(lb.load_results([a]))
    assert single.loc[("assist2009", "dkt"), "auc"] == "0.8000"  # one run: no "± 0.0000"
    assert board.loc[("assist2009", "dkt"), "pyKT AUC"] == "0.7541"
    md = lb.to_markdown(board)
    lines = md.splitlines()
    assert lines[0].startswith("| dataset | model | auc | acc | rmse | runs")
    assert lines[1].startswith("|---|")
    assert "| assist2009 | dkt | 0.8100 ± 0.0141 |" in md
    assert len(lines) == 2 + len(board)
    lb.main([str(a), str(b)])
    out = capsys.readouterr().out
    assert "| assist2009 | dkt | 0.8100 ± 0.0141" in out and "fold 1" in out
    comparison = lb.published_comparison(table)
    assert set(comparison["source"]) == {"DKVMN paper", "pyKT"}
    assert comparison["protocol difference"].str.contains("pooled over folds").all()
    with pytest.raises(ValueError, match="not a kt_lib.experiment results file"):
        (tmp_path / "bad.json").write_text("[]")
        lb.load_results(tmp_path / "bad.json")


def test_fold_plan_and_throughput(tmp_path):
    assert lb.fold_plan("line3", 3, [7, 8]) == [(1, 7), (2, 7), (3, 7)]
    assert lb.fold_plan("pykt", 2, [0]) == [(0, 0), (1, 0)]
    assert lb.fold_plan("synthetic", 5, [0, 1]) == [(None, 0), (None, 1)]
    assert lb.fold_plan("line3", 0, [3]) == [(None, 3)]
    (tmp_path / "x_train.csv").write_text("")  # a line3 folder without fold files: seeds
    assert lb.fold_plan("line3", 5, [0, 1], tmp_path) == [(None, 0), (None, 1)]
    (tmp_path / "x_train1.csv").write_text("")
    assert lb.fold_plan("line3", 2, [0, 1], tmp_path) == [(1, 0), (2, 0)]
    assert lb.throughput(tmp_path / "missing.json").empty
    bench = tmp_path / "models.json"
    bench.write_text(
        json.dumps(
            [
                {"model": "dkt", "params": 5, "inference_interactions_per_s": 9},
                {"model": "x", "error": "boom"},
            ]
        )
    )
    speed = lb.throughput(bench)
    assert list(speed.index) == ["dkt"] and speed.loc["dkt", "inference_interactions_per_s"] == 9


def test_published_table():
    frame = published_frame()
    assert len(frame) == len(PUBLISHED) and frame["auc"].between(0.5, 1).all()
    assert (frame["protocol"].str.len() > 10).all() and frame["source"].notna().all()
    wide = published_wide()
    assert wide.loc[("assist2009", "akt"), "pyKT"] == pytest.approx(0.7853)
    assert wide.loc[("statics2011", "dkvmn"), "DKVMN paper"] == pytest.approx(0.8284)


def test_report_index_shows_summaries(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    cell = new_code_cell("summary", metadata={"tags": ["summary"]})
    cell.outputs = [
        new_output(
            "execute_result",
            data={"text/html": "<table><tr><td>0.81</td></tr></table>", "text/plain": "0.81"},
            execution_count=1,
        ),
        new_output("display_data", data={"image/png": "iVBO", "text/plain": "<Figure size 1x1>"}),
        new_output(  # IPython.display.Markdown: rendered, never its repr
            "display_data",
            data={
                "text/markdown": "| pair | diff |\n|---|---|\n| a - b | +0.0013 |\n",
                "text/plain": "<IPython.core.display.Markdown object>",
            },
        ),
    ]
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1"), cell]), tmp_path / "08_a.ipynb")
    assert "<td>0.81</td>" in reports.read_summary(tmp_path / "08_a.ipynb")
    assert "<td>+0.0013</td>" in reports.read_summary(tmp_path / "08_a.ipynb")
    assert "IPython.core.display" not in reports.read_summary(tmp_path / "08_a.ipynb")
    assert "Figure" not in reports.read_summary(tmp_path / "08_a.ipynb")
    assert reports.read_summary(tmp_path / "missing.ipynb") == ""
    runs = [
        {
            "stem": "08_a",
            "title": "A",
            "params": {},
            "ok": True,
            "error": "",
            "seconds": 1.0,
            "summary": reports.read_summary(tmp_path / "08_a.ipynb"),
        },
        {
            "stem": "09_b",
            "title": "B",
            "params": {"x": 1},
            "ok": False,
            "error": "Boom: x",
            "seconds": 2.0,
            "summary": "",
        },
    ]
    reports.write_index(tmp_path, runs, "quick")
    page = (tmp_path / "index.html").read_text()
    assert 'id="summary-08_a"' in page and "<td>0.81</td>" in page
    assert "09_b" in page and "failed: Boom: x" in page
    saved = json.loads((tmp_path / "runs.json").read_text())
    assert all("summary" not in r for r in saved["runs"])


def test_profile_reaches_parameters_papermill_cannot_parse():
    """`data_dir: str | None = None` is skipped by papermill's inspector; the full profile's
    data_dir must still reach every notebook that declares it, and nothing undeclared."""
    from pathlib import Path

    import yaml

    root = Path(reports.__file__).resolve().parents[1]
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "03_train_sakt.ipynb")
    assert params["data_dir"] == "../shared/data/assist2009" and params["preset"] == "paper"
    assert "binary_data_dir" not in params and "configs" not in params
    gpcm = reports.notebook_params(full, root / "notebooks" / "07_train_ordinal_gpcm.ipynb")
    assert gpcm["data_dir"] is None and gpcm["binary_data_dir"] == "../shared/data/assist2009"


def test_leaderboard_resumes_from_its_results_file(tmp_path, monkeypatch):
    """Finished runs are written as they end; a rerun trains only what is missing, a changed
    setting trains again, and the file reads back through load_results."""
    import kt_lib.experiment as experiment

    sim = dict(num_students=30, seq_len=10, num_c=4)
    path = tmp_path / "board.json"
    calls = []
    real = experiment.run_experiment

    def counting(name, *args, **kw):
        calls.append(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(experiment, "run_experiment", counting)
    first = lb.run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        TINY_TRAIN,
        seeds=[0, 1],
        simulator=sim,
        progress=False,
        results_file=path,
    )
    assert calls == ["dkt", "dkt"] and len(first) == 2
    again = lb.run_leaderboard(
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

    lb.run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        replace(TINY_TRAIN, lr=5e-3),
        seeds=[0],
        simulator=sim,
        progress=False,
        results_file=path,
    )
    assert calls[-1] == "dkt" and len(calls) == 5  # another lr is another run
    table = lb.load_results(path)
    assert len(table) == 5 and set(table["dataset"]) == {"synthetic"}
    assert table["run_key"].is_unique and table["preset"].eq("tiny").all()
    other = tmp_path / "other.json"  # runs filled in a separate file (another process)
    lb.run_leaderboard(
        [(None, "synthetic")],
        ["dkt"],
        TINY_TRAIN,
        seeds=[2],
        simulator=sim,
        progress=False,
        results_file=other,
    )
    assert lb.add_runs(path, lb._read_runs(path)) == 5  # same keys: nothing doubles
    lb.main([str(other), "--merge-into", str(path)])
    merged = lb.load_results(path)
    assert len(merged) == 6 and sorted(merged["seed"].tolist()) == [0, 0, 0, 1, 1, 2]
    with pytest.raises(SystemExit, match="run_key"):
        lb.main(
            [
                str(_results_file(tmp_path / "plain.json", None, None, [0.6])),
                "--merge-into",
                str(path),
            ]
        )
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot resume"):
        lb.run_leaderboard(
            [(None, "synthetic")],
            ["dkt"],
            TINY_TRAIN,
            simulator=sim,
            progress=False,
            results_file=path,
        )


def test_leaderboard_variants_are_labelled_configs_of_a_model(tmp_path):
    """A variant trains its registered model with the model's overrides and its own fields on
    top, carries its label as `model`, keys its runs apart from the base's, and pairs with it."""
    from kt_lib.stats import compare_pairs

    sim = dict(num_students=30, seq_len=10, num_c=4)
    kw = dict(seeds=[0, 1], simulator=sim, progress=False)
    variants = {"dkt_narrow": {"model": "dkt", "d": 4}, "dkt_deep": {"model": "dkt", "n_layers": 2}}
    runs = lb.run_leaderboard(
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
    assert set(lb.load_results(tmp_path / "board.json")["model"]) == set(runs["model"])
    paired = compare_pairs(runs, ["dkt_narrow:dkt"])
    assert paired["n_pairs"].iloc[0] == 2
    # per-dataset fields go over everything else, on that dataset only
    per_dataset = {"synthetic": {"dkt_narrow": {"d": 3}}, "assist2009": {"dkt": {"d": 50}}}
    again = lb.run_leaderboard(
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
            lb.run_leaderboard(
                [(None, "synthetic")],
                ["dkt"],
                TINY_TRAIN,
                variants=variants,
                dataset_overrides=bad,
                **kw,
            )
    # overrides[label] goes over the variant's own fields; a variant's failed run keeps its label
    with pytest.warns(RuntimeWarning, match="2 of 4 runs failed"):
        more = lb.run_leaderboard(
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
            lb.run_leaderboard([(None, "synthetic")], ["x"], TINY_TRAIN, variants=bad, **kw)


def test_full_profile_variants_build_and_pairs_name_its_models():
    """The full profile's variants name registered models with valid fields, and every pair it
    asks for compares two of its models."""
    from pathlib import Path

    import yaml

    from kt_lib.data import load_bundle
    from kt_lib.models import MODELS, build_model

    root = Path(reports.__file__).resolve().parents[1]
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "10_compare_models.ipynb")
    models, variants = params["models"], params["variants"]
    assert set(variants) <= set(models)
    assert all(set(pair) <= set(models) for pair in params["pairs"])
    configs = lb._model_configs(models, params["overrides"], variants)
    assert configs["ikt3_lambda0"] == ("ikt3", {"warmup": 10, "lambda_target": 0.0})
    data = load_bundle(None, "synthetic", num_students=20, seq_len=10, num_c=4).train
    for label in variants:
        name, fields = configs[label]
        model = build_model(name, dataset=data, preset="tiny", **fields)
        assert isinstance(model, MODELS[name])
        assert all(getattr(model.config, k) == v for k, v in fields.items())
    lb._check_dataset_overrides(params["dataset_overrides"], variants)
    for per_model in params["dataset_overrides"].values():  # their configs parse and build
        for label, fields in per_model.items():
            name, merged = configs[label]
            model = build_model(name, dataset=data, preset="tiny", **{**merged, **fields})
            assert isinstance(model, MODELS[name])


def test_full_profile_simakt_banks_fit_statics2011():
    """Statics2011's folds hold 176-193 training students, too few to fill 2 bank folds of 100
    clusters: the full profile's per-dataset overrides give every SimAKT row there banks it can
    build, on its smallest fold (3) and its largest (1)."""
    from pathlib import Path

    import yaml

    from kt_lib.data import load_bundle
    from kt_lib.models import build_model

    root = Path(reports.__file__).resolve().parents[1]
    data_dir = root.parent / "shared" / "data" / "statics2011"
    if not data_dir.is_dir():
        pytest.skip("../shared/data/statics2011 is not here")
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "10_compare_models.ipynb")
    assert lb.fold_plan("line3", params["folds"], [0], data_dir)[0] == (1, 0)  # the files' folds
    simakt = [m for m in params["models"] if m == "simakt" or m.startswith("simakt_")]
    configs = lb._model_configs(simakt, params["overrides"], params["variants"])
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
    board = lb.check_plan(
        iter([(None, "synthetic")]),  # any iterable
        ["dkt", "simakt_big", "dkt_broken"],
        seeds=[0],
        simulator=sim,
        variants=variants,
        progress=False,
    )
    assert board["model"].tolist() == ["dkt", "simakt_big", "dkt_broken"]
    assert board["ok"].tolist() == [True, False, False]
    assert board["error"].iloc[1].startswith("ValueError: n_clusters=100 is larger than the bank")
    assert "n_layers must be >= 1" in board["error"].iloc[2]
    fixed = {"synthetic": {"simakt_big": {"similarity": {"base": "cluster_only", "n_clusters": 3}}}}
    again = lb.check_plan(
        [(None, "synthetic")],
        ["simakt_big"],
        simulator=sim,
        variants=variants,
        dataset_overrides=fixed,
        progress=False,
    )
    assert again["ok"].all() and again["seconds"].ge(0).all()
    with pytest.raises(SystemExit, match="1 cell"):
        reports.main(
            ["check", "--profile", "quick", "--set", "models=[dkt, simakt_big]", "num_students=40"]
            + ["variants={simakt_big: {model: simakt, similarity: cluster_only}}"]
        )
    assert "| synthetic | simakt_big |" in capsys.readouterr().out


def test_report_overrides_parse_as_yaml():
    assert reports.parse_overrides(["threads=1", "models=[dkt, sakt]", "x=null"]) == {
        "threads": 1,
        "models": ["dkt", "sakt"],
        "x": None,
    }
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        reports.parse_overrides(["models"])
    with pytest.raises(SystemExit, match="modles"):  # a misspelt parameter is not dropped
        reports.run("quick", ["10"], overrides={"modles": ["dkt"]})


def test_committed_notebooks_carry_no_absolute_papermill_paths():
    """`reports run --inplace` writes papermill's input/output paths relative to the workbook."""
    import json

    from kt_lib import reports

    for path in sorted(reports.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        meta = json.loads(path.read_text())["metadata"].get("papermill", {})
        for key in ("input_path", "output_path"):
            assert not str(meta.get(key, "")).startswith("/"), (path.name, key, meta[key])


def test_papermill_parses_every_parameter_cell_without_warnings(caplog):
    """Papermill logs 'Unable to parse line ...' for a parameter line it cannot read (an '=' in
    the comment did it): such a parameter would be silently dropped from the report's record."""
    import logging

    import papermill as pm

    from kt_lib import reports

    with caplog.at_level(logging.WARNING):
        for path in sorted(reports.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
            pm.inspect_notebook(str(path))
    assert "Unable to parse" not in caplog.text, caplog.text
