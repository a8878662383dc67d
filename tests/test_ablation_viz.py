"""Attention collection and plots, the published figures and the report index."""

from __future__ import annotations

import json
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from kt_lib import reports  # noqa: E402
from kt_lib.audit import random_batch  # noqa: E402
from kt_lib.data import load_bundle  # noqa: E402
from kt_lib.models import MODELS, build_model, list_models  # noqa: E402
from kt_lib.published import PUBLISHED, published_frame, published_wide  # noqa: E402
from kt_lib.viz import attention as att  # noqa: E402
from tests.conftest import make_tiny_dataset  # noqa: E402

NUM_C, NUM_PID = 12, 36


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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


# --- published figures, report index --------------------------------------------


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


def test_committed_outputs_carry_no_absolute_source_paths(tmp_path):
    """Warnings print the absolute path of the file that raised them; `reports run --inplace`
    writes them relative to the workbook, and no committed output names a machine's folders."""
    import json
    import re

    from kt_lib import reports

    where = re.compile(r"(?<![\w.])/[\w.-]+(?:/[\w.-]+)*\.py:\d+:")
    for path in sorted(reports.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", []))
                assert not where.search(text), (path.name, where.search(text).group(0))
    nb = {
        "cells": [{"cell_type": "code", "outputs": [{"name": "stderr", "output_type": "stream",
                   "text": [f"{reports.ROOT}/kt_lib/x.py:3: UserWarning: w\n"]}]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    reports.relative_paths(tmp_path / "n.ipynb")
    out = json.loads((tmp_path / "n.ipynb").read_text())["cells"][0]["outputs"][0]["text"]
    assert out == ["kt_lib/x.py:3: UserWarning: w\n"]


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
