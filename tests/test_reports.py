"""The report runner (kt_lib.reports): summaries, the index, profiles, overrides, and the
committed notebooks' papermill metadata and outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kt_lib import reports


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

    root = reports.ROOT
    full = reports.load_profile("full")  # ${KT_DATA}: ../shared/data when unset
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
    for path in sorted(reports.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        meta = json.loads(path.read_text())["metadata"].get("papermill", {})
        for key in ("input_path", "output_path"):
            assert not str(meta.get(key, "")).startswith("/"), (path.name, key, meta[key])


def test_committed_outputs_carry_no_absolute_source_paths(tmp_path):
    """Warnings print the absolute path of the file that raised them; `reports run --inplace`
    writes them relative to the workbook, and no committed output names a machine's folders."""
    import re

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

    with caplog.at_level(logging.WARNING):
        for path in sorted(reports.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
            pm.inspect_notebook(str(path))
    assert "Unable to parse" not in caplog.text, caplog.text


@pytest.mark.parametrize(
    "profile, message",
    [
        ({"03_train_sakt": {"epoch": 2}}, r"03_train_sakt.epoch: .*did you mean 'epochs'\?"),
        (
            {"03_train_sak": {"epochs": 2}},
            r"no notebook '03_train_sak'; did you mean '03_train_sakt'",
        ),
        ({"common": {"seedd": 1}}, r"common.seedd: any notebook declares no parameter 'seedd'"),
    ],
)
def test_a_profile_typo_is_refused_with_the_nearest_name(profile, message):
    with pytest.raises(ValueError, match=message):
        reports.check_profile(profile, "quick.yaml")


def test_the_shipped_profiles_pass_the_check():
    for name in ("quick", "full"):
        reports.load_profile(name)  # raises on a typo


def test_the_full_profile_reads_its_data_under_kt_data(monkeypatch):
    monkeypatch.setenv("KT_DATA", "/data/kt")
    full = reports.load_profile("full")
    assert full["common"]["data_dir"] == "/data/kt/assist2009"
    monkeypatch.delenv("KT_DATA")
    assert reports.load_profile("full")["common"]["data_dir"] == "../shared/data/assist2009"


def test_warnings_move_into_one_notes_list_without_machine_paths(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    root = str(reports.ROOT)
    warned = new_code_cell("build()")
    warned.outputs = [
        new_output(
            "stream",
            name="stderr",
            text=f"{root}/kt_lib/heads/x.py:47: SeedRangeWarning: n_clusters=20 is small\n"
            "  warnings.warn(msg, SeedRangeWarning)\n"
            "an ordinal stderr line\n",
        ),
        new_output("stream", name="stdout", text="done\n"),
    ]
    again = new_code_cell("build()")
    again.outputs = [
        new_output(
            "stream",
            name="stderr",
            text=f"{root}/kt_lib/heads/x.py:47: SeedRangeWarning: n_clusters=20 is small\n"
            "  warnings.warn(msg, SeedRangeWarning)\n"
            "/usr/lib/python3/site-packages/pkg/mod.py:3: FutureWarning: old <api>\n",
        )
    ]
    path = tmp_path / "02_a.ipynb"
    nbformat.write(new_notebook(cells=[warned, again]), path)
    notes = reports.collect_notes(path)
    assert notes == [
        "SeedRangeWarning: n_clusters=20 is small (kt_lib/heads/x.py:47)",
        "FutureWarning: old <api> (pkg/mod.py:3)",
    ]
    nb = nbformat.read(path, as_version=4)  # still a valid notebook: the notes cell has an id
    nbformat.validate(nb)
    first, second, last = nb.cells
    assert [o.get("text") for o in first.outputs] == ["an ordinal stderr line\n", "done\n"]
    assert second.outputs == []  # only warnings: the red box is gone
    assert last.cell_type == "markdown" and "### Notes" in last.source
    assert root not in json.dumps(nb) and "old &lt;api&gt;" in last.source


@pytest.mark.slow
def test_a_quick_run_labels_the_committed_results_in_its_index(tmp_path, capfd):
    """Notebook 10 shows the committed store by default: the index says so, with the runs'
    commits and devices, and a notebook trained now says it ran on the simulator; the kernel
    runs over IPC, so ipykernel's TCP warning is not printed."""
    reports.run(only=["01", "10"], out=tmp_path, overrides={"ordinal_models": []})
    import re

    page = (tmp_path / "index.html").read_text()
    row = {m[1]: m[0] for m in re.finditer(r"<tr><td>(\w+)</td>.*?</tr>", page, re.S)}
    committed = row["10_compare_models"]
    assert "the committed store (results/base.json" in committed
    assert "commits " in committed and "devices " in committed
    assert "this run: the simulator" in row["01_load_data"]
    assert "without encryption" not in capfd.readouterr().err


@pytest.fixture
def no_execution(monkeypatch):
    """papermill.execute_notebook replaced by a recorder that fails: a refused option must stop
    `run` before any notebook runs (the old code ran them, under --inplace over the committed
    ones)."""
    import papermill

    calls = []

    def execute(path, target, **kwargs):
        calls.append(target)
        raise RuntimeError("no notebook may run in this test")

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    return calls


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--profile", "full"], "--profile full has no effect with --inplace"),
        (["--profile", "quick"], "--profile quick has no effect with --inplace"),
        (["--out", "{tmp}/elsewhere"], "has no effect with --inplace: the notebooks are rewritten"),
    ],
)
def test_inplace_refuses_profile_and_out(tmp_path, no_execution, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit, match=message):
        reports.main(["run", "--inplace", "--notebooks", "01", *argv])
    assert no_execution == [] and not (tmp_path / "elsewhere").exists()


def test_notebooks_needs_a_name_that_matches(tmp_path, no_execution, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse: expected at least one argument
        reports.main(["run", "--notebooks", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--notebooks" in capsys.readouterr().err
    for only in ([], [""], [" "]):  # the API alike; "" would match every notebook
        with pytest.raises(SystemExit, match="--notebooks .*give notebook stems"):
            reports.run(only=only, out=tmp_path)
    with pytest.raises(SystemExit, match=r"--notebooks \['99'\]: no notebook matches"):
        reports.run(only=["01", "99"], out=tmp_path)  # not run 01 and drop 99
    assert no_execution == [] and not (tmp_path / "index.html").exists()


def _failing_fsync(fd):
    raise OSError(28, "No space left on device")


def test_a_failed_write_leaves_the_old_files_whole(tmp_path, monkeypatch):
    """index.html, runs.json and the notebooks `collect_notes` and `relative_paths` rewrite (the
    committed ones under --inplace) are replaced atomically: a write that fails (here: the disk
    is full at fsync) leaves the old file as it was and no temp file behind."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    cell = new_code_cell("warn()")
    cell.outputs = [
        new_output("stream", name="stderr", text=f"{reports.ROOT}/a.py:1: UserWarning: w\n")
    ]
    notebook = tmp_path / "02_a.ipynb"
    nbformat.write(new_notebook(cells=[cell]), notebook)
    (tmp_path / "index.html").write_text("old index")
    (tmp_path / "runs.json").write_text("old runs")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    run = {"stem": "02_a", "title": "A", "params": {}, "ok": True, "error": "", "seconds": 1.0}
    monkeypatch.setattr("kt_lib.fileio.os.fsync", _failing_fsync)
    for write in (
        lambda: reports.write_index(tmp_path, [run], "quick"),
        lambda: reports.collect_notes(notebook),
        lambda: reports.relative_paths(notebook),
        lambda: reports.to_html(notebook, tmp_path / "index.html"),
    ):
        with pytest.raises(OSError, match="No space left"):
            write()
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def _inplace_dir(tmp_path, monkeypatch):
    """A notebooks folder of one committed notebook, as `run` sees it."""
    nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    folder = tmp_path / "notebooks"
    folder.mkdir()
    path = folder / "01_x.ipynb"
    path.write_text(json.dumps(nb))
    monkeypatch.setattr(reports, "NOTEBOOKS", folder)
    return path


@pytest.mark.parametrize("fails", [False, True])
def test_inplace_replaces_a_notebook_only_after_its_run_succeeds(tmp_path, monkeypatch, fails):
    """Papermill writes its output as it runs: under --inplace it runs into a dot-file beside the
    notebook, which replaces the committed one at the end; a failed run leaves the committed
    notebook as it was and says where the failed run is (it was half-overwritten before)."""
    import papermill

    path = _inplace_dir(tmp_path, monkeypatch)
    before = path.read_text()

    def execute(src, target, **kwargs):
        out = json.loads(Path(src).read_text())
        out["metadata"]["papermill"] = {"input_path": str(src), "output_path": str(target)}
        out["cells"] = [{"cell_type": "markdown", "metadata": {}, "source": ["ran"]}]
        Path(target).write_text(json.dumps(out))
        if fails:
            raise RuntimeError("a cell raised")

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    if fails:
        with pytest.raises(SystemExit, match="1 notebook"):
            reports.run(only=["01"], inplace=True)
        assert path.read_text() == before
        assert (path.parent / ".01_x.running.ipynb").exists()
    else:
        reports.run(only=["01"], inplace=True)
        done = json.loads(path.read_text())
        assert done["cells"][0]["source"] == ["ran"]
        assert done["metadata"]["papermill"]["output_path"] == "01_x.ipynb"  # not the dot-file
        assert not (path.parent / ".01_x.running.ipynb").exists()


def test_check_refuses_a_set_name_its_plan_does_not_read():
    """`kt report check --set modles=[dkt]` dry-ran the default plan, the typo dropped."""
    with pytest.raises(SystemExit, match=r"--set \['epochs', 'modles'\]: not a parameter of"):
        reports.check("quick", {"modles": ["dkt"], "epochs": 3})
