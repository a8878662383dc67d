"""kt_lib.runs.studies: the studies of record, their committed results files, the README's tables
rendered from them (checked in tests/test_docs.py), and runs that survive a kill."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest

from kt_lib.data.formats import write_line3
from kt_lib.data.synthetic import simulate
from kt_lib.models import MODELS
from kt_lib.models.base import KTModel
from kt_lib.runs import execute as execute_module
from kt_lib.runs import leaderboard as leaderboard_module
from kt_lib.runs import studies
from kt_lib.runs.execute import ExecConfig
from kt_lib.runs.record import preset_digest


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_every_planned_run_is_in_the_committed_results(name):
    study = studies.get(name)
    rows, left, _ = studies.status(study)
    assert study.filling or not left, f"{name}: {len(left)} runs missing, e.g. {left[0]}"
    # and every committed run is one the study plans: a changed key would orphan its row
    planned = {p["key"] for p in study.plan()}
    orphans = [r["run_key"] for r in rows if r.get("run_key") not in planned]
    assert not orphans, f"{name}: {len(orphans)} committed runs the study no longer plans"
    for r in rows:
        assert r["commit"] and r["commit"] != "unknown" and r["wall_seconds"] > 0, r["run_key"]
        assert r["device_name"] and r["date"] and "train" in r
        assert "test_auc" in r or "test_qwk" in r  # ordinal runs at K > 2: QWK, no AUC
    cells = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["model"]), []).append(r)
    if not study.filling:
        assert all(len(v) >= 3 for v in cells.values()), {k: len(v) for k, v in cells.items()}


@pytest.mark.parametrize("name", ["ordinal_oulad", "simakt"])
def test_first_n_narrows_every_cell_to_its_first_folds_with_the_same_keys(name):
    study = studies.get(name)
    full = {r["key"]: r for r in study.plan()}
    first = study.first(2).plan()
    assert first and {r["key"] for r in first} <= set(full)
    cells: dict = {}
    for r in first:
        cells.setdefault((r["dataset"], r["model"]), set()).add((r["fold"], r["seed"]))
    assert all(len(v) == 2 for v in cells.values()), cells
    assert study.first(None) is study
    with pytest.raises(ValueError, match="first must be >= 1"):
        study.first(0)


def test_a_part_with_its_own_folds_plans_them_and_first_and_only_keep_them():
    study = studies.get("baselines")  # one fold a cell, but its DKVMN authors' row on five
    row = "dkvmn_authors_statics_sgd_sum"  # (the ATKT pair and SAKT's diagnostics on
    # Statics2011 on three, a SAKT pair on ASSIST2015's five)

    def folds(s):
        cells: dict = {}
        for r in s.plan():
            cells.setdefault((r["dataset"], r["model"]), set()).add(r["fold"])
        return cells

    cells = folds(study)
    assert cells.pop(("statics2011", row)) == {1, 2, 3, 4, 5}
    for m in ("atkt", "atkt_mean_context", "sakt", "sakt_seed_query", "sakt_pykt"):
        assert cells.pop(("statics2011", m)) == {1, 2, 3}
    for m in ("sakt", "sakt_seed_query"):  # ASSIST2015's folds are 0-4
        assert cells.pop(("assist2015", m)) == {0, 1, 2, 3, 4}
        assert cells.pop(("assist2009", m)) == {1, 2, 3}
    assert all(len(f) == 1 for f in cells.values()), cells
    assert folds(study.first(2))[("statics2011", row)] == {1, 2}
    assert folds(study.only([row])) == {("statics2011", row): {1, 2, 3, 4, 5}}
    assert {r["key"] for r in study.first(2).plan()} <= {r["key"] for r in study.plan()}
    part = dataclasses.replace(study.parts[-1], folds=0)
    with pytest.raises(
        ValueError, match=r"study baselines: a part's folds must be >= 1 .* got \[0\]"
    ):
        dataclasses.replace(study, parts=(*study.parts[:-1], part))


def test_status_and_run_take_first_and_refuse_zero(capsys):
    studies.main(["status", "pairs", "--first", "1"])
    done = capsys.readouterr().out.splitlines()[0]
    assert done.startswith("pairs: ") and " runs done, 0 left" in done
    for cmd in ("status", "run"):
        with pytest.raises(SystemExit) as exc:
            studies.main([cmd, "simakt", "--first", "0"])
        assert exc.value.code == 2
    assert "--first 0: must be >= 1" in capsys.readouterr().err


def test_only_narrows_to_the_named_cells_with_the_same_keys(capsys):
    study = studies.get("baselines")
    full = {r["key"]: r for r in study.plan()}
    some = study.only(["stablekt", "qdkt"]).plan()
    assert {r["model"] for r in some} == {"stablekt", "qdkt"}
    assert {r["key"] for r in some} <= set(full)
    assert len(some) == sum(r["model"] in ("stablekt", "qdkt") for r in full.values())
    assert study.only(None) is study
    with pytest.raises(ValueError, match=r"study baselines has no model \['nope'\]"):
        study.only(["stablekt", "nope"])
    studies.main(["status", "baselines", "--models", "qdkt"])
    out = capsys.readouterr().out
    assert " qdkt " in out and " stablekt " not in out
    with pytest.raises(SystemExit) as exc:
        studies.main(["run", "baselines", "--models", "nope"])
    assert exc.value.code == 2 and "has no model ['nope']" in capsys.readouterr().err


def test_only_narrows_to_datasets_too(capsys):
    study = studies.get("simakt")
    full = {r["key"] for r in study.plan()}
    some = study.only(None, ["algebra05"]).plan()
    assert {r["dataset"] for r in some} == {"algebra05"} and {r["key"] for r in some} <= full
    assert len({r["model"] for r in some}) == 5  # every row of the study, on that dataset
    both = study.only(["dtransformer"], ["algebra05", "statics2011"]).plan()
    assert {(r["dataset"], r["model"]) for r in both} == {
        ("algebra05", "dtransformer"),
        ("statics2011", "dtransformer"),
    }
    with pytest.raises(ValueError, match=r"study simakt has no dataset \['nope'\]"):
        study.only(None, ["nope"])
    studies.main(["status", "simakt", "--datasets", "algebra05"])
    out = capsys.readouterr().out
    assert "algebra05 " in out and "statics2011 " not in out


def test_plan_refuses_an_unknown_study():
    with pytest.raises(KeyError, match="the studies are"):
        studies.get("nope")
    with pytest.raises(ValueError, match=r"variant 'x': ikt3 has no config field\(s\) \['lam'\]"):
        dataclasses.replace(studies.get("pairs"), variants={"x": {"model": "ikt3", "lam": 0}})


def _tiny_study(tmp_path):
    sim = simulate(num_students=60, seq_len=20, num_c=5, seed=3).data
    folder = tmp_path / "data" / "tiny"
    folder.mkdir(parents=True)
    train, test = sim.subset(range(45)), sim.subset(range(45, 60))
    write_line3(train, folder / "tiny_train.csv")
    write_line3(test, folder / "tiny_test.csv")
    part = studies.Part((("tiny", "line3"),), ("dkt",))
    return dataclasses.replace(
        studies.get("base"), name="tiny", parts=(part,), pairs=(), folds=0, seeds=(0,),
        preset="tiny", epochs=4, patience=10,
    )  # fmt: skip


def test_adding_a_model_plans_it_as_if_declared_and_pairs_it_with_the_bases():
    study = studies.get("leaderboard").only(None, ["statics2011"]).first(2)
    added = study.adding(["gpcm_irt"])
    declared = dataclasses.replace(
        study, parts=(*study.parts, studies.Part((("statics2011", "line3"),), ("gpcm_irt",)))
    )
    mine = {r["key"] for r in added.plan() if r["model"] == "gpcm_irt"}
    assert mine and mine == {r["key"] for r in declared.plan() if r["model"] == "gpcm_irt"}
    assert len(mine) == 2  # the narrowed study's folds
    assert added.pairs == study.pairs  # compared with `kt leaderboard ... --pairs`
    twice = study.adding(["gpcm_irt", "gpcm_irt"])
    assert twice.parts[-1].models == ("gpcm_irt",)
    assert study.adding(None) is study and study.adding([]) is study
    with pytest.raises(ValueError, match="has 'dkt' already"):
        study.adding(["dkt"])
    with pytest.raises(ValueError, match="not a registered model"):
        study.adding(["nope"])


def test_run_add_trains_a_new_model_into_a_file_of_ones_own_and_pairs_it(
    tmp_path, monkeypatch, capsys
):
    """`kt study run NAME --add M --out FILE`: M's runs (and no others) land in FILE, keyed as if
    the study declared M, and pair with the study's own rows across the two files."""
    from kt_lib.runs.results import load_results
    from kt_lib.runs.stats import compare_pairs

    study = dataclasses.replace(_tiny_study(tmp_path), pairs=(("dkt", "dkt"),))
    monkeypatch.setitem(studies.STUDIES, "tiny", study)
    data, own = tmp_path / "data", tmp_path / "tiny.json"
    studies.run(study, data, path=own, checkpoints=None, progress=False)
    for cmd in ("run", "status", "park"):  # never into the study's own file
        for out in ([], ["--out", str(study.path)]):
            with pytest.raises(SystemExit) as exc:
                studies.main([cmd, "tiny", "--add", "sakt", *out])
            assert exc.value.code == 2 and "--add: give --out FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        studies.main(["run", "tiny", "--add", "sakt", "--models", "dkt", "--out", "x.json"])
    assert "--models may name added models only" in capsys.readouterr().err
    mine = tmp_path / "mine.json"
    # the CLI's epoch checkpoints and parked runs in tmp_path, not the checkout's runs/ and
    # results/inflight/ (a second session, or a killed one, would meet them there)
    where = {"checkpoints": tmp_path / "ckpt", "parked_root": tmp_path / "parked"}
    monkeypatch.setattr(studies, "run", functools.partial(studies.run, **where))
    monkeypatch.setattr(studies, "park", functools.partial(studies.park, **where))
    studies.main(["run", "tiny", "--add", "sakt", "--out", str(mine), "--data-root", str(data)])
    rows = json.loads(mine.read_text())["results"]
    assert [r["model"] for r in rows] == ["sakt"] and not rows[0].get("error")
    declared = dataclasses.replace(study, parts=(studies.Part((("tiny", "line3"),), ("sakt",)),))
    assert rows[0]["run_key"] == declared.plan(data)[0]["key"]
    both = load_results([own, mine])
    paired = compare_pairs(both, ["sakt:dkt"], per="dataset")
    assert paired["n_pairs"].tolist() == [1]
    studies.main(["status", "tiny", "--add", "sakt", "--out", str(mine), "--data-root", str(data)])
    said = capsys.readouterr().out
    assert "tiny: 1 runs done, 0 left" in said and "another version of their preset" not in said
    cfg = MODELS["sakt"].config_cls  # the tiny preset edited after the run: status says so
    monkeypatch.setattr(cfg, "PRESETS", {**cfg.PRESETS, "tiny": {**cfg.PRESETS["tiny"], "d": 24}})
    studies.main(["status", "tiny", "--add", "sakt", "--out", str(mine), "--data-root", str(data)])
    hint = "1 sakt run(s) were made under another version of their preset (d: 16 -> 24; preset):"
    hint += " `kt study retire tiny --models sakt --stale-presets"
    assert hint in capsys.readouterr().out
    studies.main(["park", "tiny", "--add", "sakt", "--out", str(mine)])  # nothing in flight
    assert "0 run(s) in results/inflight/tiny/" in capsys.readouterr().out


def test_a_killed_run_resumes_from_its_last_epoch(tmp_path, monkeypatch):
    """Kill a study's run at the start of epoch 2 (epochs 0-1 checkpointed), start the study
    again: the run resumes at epoch 2, not 0, and its result equals an uninterrupted run's."""
    study = _tiny_study(tmp_path)
    data, epochs = tmp_path / "data", []
    original = KTModel.on_epoch_start

    def record(self, epoch, train):
        epochs.append(epoch)
        if kill_at is not None and epoch == kill_at:
            raise RuntimeError("killed")
        return original(self, epoch, train)

    monkeypatch.setattr(KTModel, "on_epoch_start", record)
    kill_at = None
    studies.run(study, data, path=tmp_path / "a.json", checkpoints=tmp_path / "ck_a",
                progress=False)  # fmt: skip
    assert epochs == [0, 1, 2, 3]
    whole = json.loads((tmp_path / "a.json").read_text())["results"][0]
    assert not list((tmp_path / "ck_a").rglob("*")) or all(
        p.is_dir() for p in (tmp_path / "ck_a").rglob("*")
    )  # a finished run's checkpoint is removed

    # a run that finished elsewhere (e.g. on a GPU lease, merged into the file) leaves its
    # epoch checkpoint here stale: the next start of the study removes it, trains nothing
    stale = tmp_path / "ck_a" / "tiny"
    stale.mkdir(parents=True, exist_ok=True)
    key = "".join(c if c.isalnum() or c in "-=" else "_" for c in whole["run_key"])
    (stale / f"{key}_last.pt").write_bytes(b"an epoch of a run finished elsewhere")
    (stale / "another_run_last.pt").write_bytes(b"not this study's key: kept")
    epochs.clear()
    studies.run(study, data, path=tmp_path / "a.json", checkpoints=tmp_path / "ck_a",
                progress=False)  # fmt: skip
    assert epochs == [] and not (stale / f"{key}_last.pt").exists()
    assert (stale / "another_run_last.pt").exists()

    epochs.clear()
    kill_at = 2
    with pytest.warns(RuntimeWarning, match="failed"):
        studies.run(study, data, path=tmp_path / "b.json", checkpoints=tmp_path / "ck_b",
                    progress=False)  # fmt: skip
    assert epochs == [0, 1, 2]
    assert "killed" in json.loads((tmp_path / "b.json").read_text())["results"][0]["error"]
    epochs.clear()
    kill_at = None
    (last,) = (tmp_path / "ck_b").rglob("*_last.json")
    meta = json.loads(last.read_text())
    assert meta["seconds"] > 0  # epochs 0-1, in the killed process; say they took 1000 s
    last.write_text(json.dumps({**meta, "seconds": 1000.0}))  # the hash covers the .pt only
    studies.run(study, data, path=tmp_path / "b.json", checkpoints=tmp_path / "ck_b",
                progress=False)  # fmt: skip
    assert epochs == [2, 3]  # resumed mid-run
    resumed = json.loads((tmp_path / "b.json").read_text())["results"]
    assert len(resumed) == 1 and not resumed[0].get("error")
    # its times count both processes: the killed one's epochs and the resumed one's
    assert resumed[0]["wall_seconds"] > 1000 and resumed[0]["train_seconds"] >= 1000  # 0.1 s
    for key in ("test_auc", "test_acc", "test_rmse", "best_epoch"):
        assert resumed[0][key] == whole[key], key


def test_parallel_runs_each_checkpoint_under_their_own_prefix(tmp_path, monkeypatch):
    """With several workers every run still gets an epoch checkpoint (its own prefix, resumed
    from), and the executor refuses only a prefix two parallel runs would share."""
    study = _tiny_study(tmp_path)
    study = dataclasses.replace(study, parts=(studies.Part((("tiny", "line3"),), ("dkt", "sakt")),))
    captured = []

    def capture(specs, execution=None, **kw):
        captured.extend(specs)
        return []

    monkeypatch.setattr(leaderboard_module, "execute", capture)
    studies.run(study, tmp_path / "data", path=tmp_path / "p.json", checkpoints=tmp_path / "ck",
                execution=ExecConfig(workers=2), progress=False)  # fmt: skip
    prefixes = [spec.train.checkpoint for spec in captured]
    assert len(prefixes) == 2 and len(set(prefixes)) == 2
    assert all(p.startswith(str(tmp_path / "ck" / "tiny")) for p in prefixes)
    assert all(spec.train.resume for spec in captured)
    with pytest.raises(ValueError, match="shared by 2 parallel runs"):
        execute_module.execute([captured[0], captured[0]], execution=ExecConfig(workers=2))


def test_list_gives_each_study_its_hours_left_per_device_kind(capsys):
    studies.main(["list"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["study", "done", "left", "CPU-h", "left"]
    pairs = next(line for line in out if line.startswith("pairs "))
    assert pairs.split()[2:5] == ["0", "0", "0"]  # a finished study: nothing left


def test_the_baselines_diagnostics_train_at_their_own_rate_and_the_leaderboard_takes_it():
    train = studies.get("baselines").train_config()
    runs = {r.name: r for p in studies.get("baselines").part_plans() for r in p.runs(train)}
    for label, model in (("extrakt_lr1e-4", "extrakt"), ("robustkt_lr1e-4", "robustkt")):
        assert runs[label].base == model and runs[label].spec.train.lr == 1e-4
        assert runs[model].spec.train.lr == train.lr == 1e-3  # the plain rows keep the recipe's
        assert runs[label].key != runs[model].key
    board = {r["model"] for r in studies.get("leaderboard").plan()}
    # extraKT and RobustKT collapsed at 1e-3: the leaderboard's rows for them are the 1e-4 ones
    assert {"extrakt_lr1e-4", "robustkt_lr1e-4", "atkt"} <= board
    assert not board & {"extrakt", "robustkt", "atkt_pykt", "sparsekt_topk_pykt"}
    lb = studies.get("leaderboard")
    lb_runs = {r.name: r for p in lb.part_plans() for r in p.runs(lb.train_config())}
    assert lb_runs["extrakt_lr1e-4"].spec.train.lr == 1e-4 and lb_runs["atkt"].spec.train.lr == 1e-3


def test_run_passes_threads_on_to_each_worker_and_refuses_zero(capsys, monkeypatch):
    """`--threads` is each run's torch threads, in this process or in every worker."""
    got = []

    class Stop(Exception):
        pass

    def run(study, data_root, device, execution, *args, **kw):
        got.append(execution)
        raise Stop  # nothing trained

    monkeypatch.setattr(studies, "run", run)
    with pytest.raises(Stop):
        studies.main(["run", "pairs", "--workers", "2", "--threads", "3"])
    assert got == [ExecConfig(workers=2, threads=3)]
    with pytest.raises(SystemExit):
        studies.main(["run", "leaderboard", "--workers", "2", "--threads", "0"])
    assert "--threads: must be >= 1" in capsys.readouterr().err


def test_retire_moves_rows_a_fix_made_wrong_and_the_study_plans_them_again(tmp_path, capsys):
    """`kt study retire`: the named rows leave the study's file for the retired file with the
    reason, date and commit; their runs are planned again (same keys); their epoch checkpoints
    (here and parked) go, so a rerun cannot resume the old code's run; `--before` keeps rows
    made after the fix; bad requests are refused by name."""
    study = _tiny_study(tmp_path)
    study = dataclasses.replace(study, seeds=(0, 1, 2))
    data = tmp_path / "data"
    plan = study.plan(data)
    assert len(plan) == 3
    flying = leaderboard_module.checkpoint_name(plan[2]["key"])  # seed 2: unfinished
    plan_all, plan = plan, plan[:2]
    own, into = tmp_path / "tiny.json", tmp_path / "retired" / "tiny.json"
    dates = ("2026-11-27T05:00:00+00:00", "2026-11-28T15:00:00+00:00")  # before / after a fix
    rows = [
        {"dataset": p["dataset"], "model": p["model"], "fold": p["fold"], "seed": p["seed"],
         "run_key": p["key"], "test_auc": 0.7, "date": date}
        for p, date in zip(plan, dates, strict=True)
    ]  # fmt: skip
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": rows}))
    ck, parked = tmp_path / "ck", tmp_path / "parked"
    name = leaderboard_module.checkpoint_name(rows[0]["run_key"])
    for folder in (ck / "tiny", parked / "tiny"):
        folder.mkdir(parents=True)
        for run in (name, flying):
            for f in (f"{run}_last.pt", f"{run}_best.pt"):
                (folder / f).write_text("old")
            (folder / f"{run}_last.json").write_text(json.dumps({"epoch": 1}))
    kw = dict(path=own, into=into, checkpoints=ck, parked_root=parked, data_root=data)
    assert studies.in_flight_of(study, ["dkt"], None, own, data, ck, parked) == [flying]
    assert studies.retire(study, ["dkt"], None, "why", None, dry_run=True, **kw) == rows
    assert json.loads(own.read_text())["results"] == rows and not into.exists()  # dry run

    moved = studies.retire(study, ["dkt"], ["tiny"], "bank fix", "2026-11-28T12:00", **kw)
    assert moved == rows[:1]  # the row made after the fix stays
    assert json.loads(own.read_text())["results"] == rows[1:]
    (kept,) = json.loads(into.read_text())["results"]
    assert kept["run_key"] == rows[0]["run_key"] and kept["retired"]["reason"] == "bank fix"
    assert kept["retired"]["on"] and kept["retired"]["commit"]
    # the unfinished run's epochs go too: they may be the old code's (a review)
    assert not list((ck / "tiny").iterdir()) and not list((parked / "tiny").iterdir())
    rows_done, left, _ = studies.status(study, data, own)
    assert [p["key"] for p in left] == [rows[0]["run_key"], plan_all[2]["key"]]
    assert len(rows_done) == 1
    # retired again after a cut between the writes: not doubled
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": rows}))
    studies.retire(study, ["dkt"], None, "bank fix", "2026-11-28T12:00", **kw)
    assert len(json.loads(into.read_text())["results"]) == 1

    # a date without a zone is UTC; a row without a date cannot be compared with --before; a
    # row without a run key is planned by nothing and never selected
    naive = {**rows[0], "date": "2026-11-27T05:00:00"}
    unkeyed = {k: v for k, v in rows[1].items() if k != "run_key"}
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": [naive, unkeyed]}))
    assert studies.retire(study, ["dkt"], None, "w", "2026-11-28T12:00", dry_run=True, **kw) == [
        naive
    ]
    dateless = {k: v for k, v in rows[0].items() if k != "date"}
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": [dateless]}))
    with pytest.raises(ValueError, match=f"{rows[0]['run_key']}: the row has no date"):
        studies.retire(study, ["dkt"], None, "w", "2026-11-28T12:00", **kw)
    assert studies.retire(study, ["dkt"], None, "w", None, dry_run=True, **kw) == [dateless]

    for args, message in [
        ((["dkt"], None, "  ", None), "--reason"),
        ((None, None, "why", None), "never takes a whole study"),
        ((["sakt"], None, "why", None), r"has no model \['sakt'\]"),
        ((None, ["nope"], "why", None), r"has no dataset \['nope'\]"),
        ((["dkt"], None, "why", "yesterday"), "Invalid isoformat"),
    ]:
        with pytest.raises(ValueError, match=message):
            studies.retire(study, *args, **kw)

    # a label the study no longer plans (a variant since removed) is retired by name while the
    # file holds its rows; the planned rows beside it stay
    gone = {**rows[1], "model": "dkt_old", "run_key": rows[1]["run_key"].replace("dkt", "dkt_old")}
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": [rows[0], gone]}))
    assert studies.retire(study, ["dkt_old"], None, "removed", None, **kw) == [gone]
    assert json.loads(own.read_text())["results"] == [rows[0]]
    with pytest.raises(ValueError, match=r"has no model \['dkt_old'\]"):  # none left in the file
        studies.retire(study, ["dkt_old"], None, "removed", None, **kw)
    failed = {**gone, "error": "RuntimeError: boom"}  # a failed row is never retired: refused
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": [rows[0], failed]}))
    with pytest.raises(ValueError, match=r"has no model \['dkt_old'\]"):
        studies.retire(study, ["dkt_old"], None, "removed", None, **kw)

    # --stale-presets: only the rows made under another version of their preset, not the rows
    # of the same cells made since the edit (nor the rows written before digests were stored)
    now = preset_digest("dkt", "tiny")
    edited = {**rows[0], "preset": "tiny", "preset_digest": "0123456789"}
    current = {**rows[1], "preset": "tiny", "preset_digest": now}
    older = {**plan_all[2], "model": "dkt", "run_key": plan_all[2]["key"], "preset": "tiny"}
    own.write_text(json.dumps({"args": {}, "protocol": "", "results": [edited, current, older]}))
    assert studies.retire(study, ["dkt"], None, "edited", None, stale_presets=True, **kw) == [
        edited
    ]
    assert [r["run_key"] for r in json.loads(own.read_text())["results"]] == [
        current["run_key"], older["run_key"]
    ]  # fmt: skip


def test_render_names_the_retired_rows_and_why(tmp_path, monkeypatch):
    from kt_lib.runs import study as study_module

    monkeypatch.setattr(study_module, "RESULTS", tmp_path / "results")
    study = _tiny_study(tmp_path)
    row = {"dataset": "tiny", "model": "dkt", "fold": None, "seed": 0, "test_auc": 0.7,
           "run_key": "k", "date": "2026-11-27T05:00:00+00:00", "wall_seconds": 1.0,
           "best_epoch": 1, "train_seconds": 1.0, "device_name": "cpu"}  # fmt: skip
    study.path.parent.mkdir(parents=True)
    study.path.write_text(json.dumps({"args": {}, "protocol": "", "results": [row]}))
    assert "Retired" not in studies.render(study)
    studies.retire(study, ["dkt"], None, "a fix", None, checkpoints=tmp_path / "ck",
                   parked_root=tmp_path / "parked")  # fmt: skip
    empty = studies.render(study)  # the file has no row left
    assert empty.startswith("No finished run") and "tiny dkt (1). Why: a fix" in empty
    study.path.write_text(json.dumps({"args": {}, "protocol": "", "results": [row]}))
    text = studies.render(study)
    assert "(`results/retired/tiny.json`, not in the tables above): tiny dkt (1). " in text
    assert text.rstrip().endswith("Why: a fix")


def test_run_refuses_a_device_it_cannot_use_before_any_row(tmp_path, capsys):
    """Every planned run failed on it and landed as a failed row, exit 0 (a review)."""
    out = tmp_path / "mine.json"
    with pytest.raises(SystemExit) as exc:
        studies.main(["run", "pairs", "--device", "cdua", "--out", str(out)])
    assert exc.value.code == 2 and "'cdua' is not a device name" in capsys.readouterr().err
    assert not out.exists()
