"""kt_lib.runs.plan: folds or seeds per dataset, run keys, and the one plan of a profile."""

from __future__ import annotations

import ast
import json

import pytest

from kt_lib.provenance import ROOT
from kt_lib.runs.plan import (
    PROFILE_DEFAULTS,
    RUN_DEFAULTS,
    fold_plan,
    profile_plan,
    run_key,
    unused_with_results,
)


def test_fold_plan(tmp_path):
    assert fold_plan("line3", 3, [7, 8]) == [(1, 7), (2, 7), (3, 7)]
    assert fold_plan("pykt", 2, [0]) == [(0, 0), (1, 0)]
    assert fold_plan("synthetic", 5, [0, 1]) == [(None, 0), (None, 1)]
    assert fold_plan("line3", 0, [3]) == [(None, 3)]
    (tmp_path / "x_train.csv").write_text("")  # a line3 folder without fold files: seeds
    assert fold_plan("line3", 5, [0, 1], tmp_path) == [(None, 0), (None, 1)]


def test_fold_plan_of_auto_plans_the_detected_layouts_folds(tmp_path):
    """A folder given without a format (auto) gets the folds of the layout it holds, as the
    same folder named line3 does; a folder without fold files gets seeds."""
    from kt_lib.data import simulate, write_line3

    sim = simulate(num_students=20, seq_len=8, num_c=4, seed=0).data
    for name in ("x_train.csv", "x_test.csv", "x_train1.csv", "x_valid1.csv", "x_train2.csv",
                 "x_valid2.csv"):  # fmt: skip
        write_line3(sim, tmp_path / name)
    assert fold_plan("auto", 2, [0, 1], tmp_path) == fold_plan("line3", 2, [0, 1], tmp_path)
    assert fold_plan("auto", 2, [0, 1], tmp_path) == [(1, 0), (2, 0)]
    for name in ("x_train1.csv", "x_valid1.csv", "x_train2.csv", "x_valid2.csv"):
        (tmp_path / name).unlink()
    assert fold_plan("auto", 2, [0, 1], tmp_path) == [(None, 0), (None, 1)]
    (tmp_path / "x_train1.csv").write_text("")
    assert fold_plan("line3", 2, [0, 1], tmp_path) == [(1, 0), (2, 0)]


def test_profile_defaults_are_notebook_10s():
    """`reports check` plans from PROFILE_DEFAULTS, notebook 10 from its parameter cell: both
    must be the same values (the library does not read the notebook; this test does)."""
    nb = json.loads((ROOT / "notebooks" / "10_compare_models.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    declared = {}
    for node in ast.parse("".join(cell["source"])).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            declared[target.id] = ast.literal_eval(node.value)
    assert {k: declared[k] for k in PROFILE_DEFAULTS} == PROFILE_DEFAULTS


def test_profile_plan_keys_its_runs_and_refuses_bad_fields():
    plan = profile_plan({"models": ["dkt", "idkt"], "seeds": [0, 1], "workers": 4})
    runs = plan.runs()
    assert [(r.dataset, r.name, r.spec.seed) for r in runs] == [
        ("synthetic", "dkt", 0), ("synthetic", "idkt", 0),
        ("synthetic", "dkt", 1), ("synthetic", "idkt", 1),
    ]  # fmt: skip
    idkt = runs[1].spec
    assert idkt.fields == {"bkt_max_iter": 20} and idkt.data.kw["num_students"] == 200
    assert len({r.key for r in runs}) == 4
    assert runs[0].key.startswith("synthetic/dkt/fold=None/seed=0/tiny/")
    with pytest.raises(ValueError, match=r"overrides\['dkt'\]: dkt has no config field"):
        profile_plan({"overrides": {"dkt": {"no_such_field": 1}}})


def test_run_keys_of_plain_models_are_unchanged():
    """Keys of the committed results files (results/*.json) hash these exact settings."""
    key = run_key("assist2009", "dkt", 1, 0, "paper", {"train": {"lr": 1e-3}, "model": {}})
    assert key == "assist2009/dkt/fold=1/seed=0/paper/" + key.rsplit("/", 1)[1]
    assert key.rsplit("/", 1)[1] == run_key("x", "y", None, 1, "tiny", {
        "model": {}, "train": {"lr": 1e-3}}).rsplit("/", 1)[1]  # fmt: skip


def test_a_plan_built_directly_keys_its_histories_as_of_does():
    from kt_lib.runs.data import DataSpec
    from kt_lib.runs.plan import LeaderboardPlan

    direct = LeaderboardPlan((DataSpec(),), ("dkt",), histories=("sliding",))
    made = LeaderboardPlan.of([(None, None)], ["dkt"], histories=["sliding"])
    assert direct.histories == made.histories == ("window", "sliding")
    assert [r.key for r in direct.runs()] == [r.key for r in made.runs()]


def test_a_variant_with_its_own_lr_trains_with_it_and_keys_it():
    from kt_lib.runs.plan import LeaderboardPlan
    from kt_lib.train import TrainConfig

    variants = {"dkt_fast": {"model": "dkt", "lr": 3e-3}, "dkt_same": {"model": "dkt"}}
    plan = LeaderboardPlan.of([(None, None)], ["dkt", "dkt_fast", "dkt_same"], variants=variants)
    train = TrainConfig(lr=1e-3)
    runs = {r.name: r for r in plan.runs(train)}
    assert runs["dkt_fast"].spec.train.lr == 3e-3 and runs["dkt"].spec.train.lr == 1e-3
    assert runs["dkt_same"].spec.train is train  # no lr of its own: the plan's config itself
    keys = [r.key.rsplit("/", 1)[1] for r in (runs["dkt_fast"], runs["dkt_same"])]
    assert keys[0] != keys[1]  # the lr is in the key
    plain = LeaderboardPlan.of([(None, None)], ["dkt"]).runs(train)[0]
    assert plain.key == runs["dkt"].key  # rows without a variant lr keep their keys
    for bad in (0, -1e-3, "fast", True):
        with pytest.raises(ValueError, match="lr must be a number > 0"):
            LeaderboardPlan.of([(None, None)], ["x"], variants={"x": {"model": "dkt", "lr": bad}})


def test_a_variant_with_its_own_epochs_and_batch_size_trains_with_them_and_keys_them():
    from kt_lib.runs.plan import LeaderboardPlan
    from kt_lib.train import TrainConfig

    variants = {
        "dkt_e100": {"model": "dkt", "epochs": 100},
        "dkt_b10": {"model": "dkt", "batch_size": 10, "epochs": 100, "d": 8},
        "dkt_none": {"model": "dkt", "lr": None},  # None: the recipe's
    }
    plan = LeaderboardPlan.of([(None, None)], ["dkt", *variants], variants=variants)
    train = TrainConfig(lr=1e-3, epochs=30, patience=5)
    runs = {r.name: r for r in plan.runs(train)}
    assert runs["dkt_e100"].spec.train.epochs == 100 and runs["dkt"].spec.train.epochs == 30
    assert runs["dkt_e100"].spec.train.patience == 5  # the rest of the recipe as every row's
    b10 = runs["dkt_b10"].spec
    assert (b10.train.batch_size, b10.train.epochs, b10.fields) == (10, 100, {"d": 8})
    assert runs["dkt_none"].spec.train is train
    keys = {runs[n].key.rsplit("/", 1)[1] for n in ("dkt", "dkt_e100", "dkt_b10")}
    assert len(keys) == 3  # each setting is in the key
    for name in ("epochs", "batch_size"):
        for bad in (0, 2.5, "long", True):
            with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
                LeaderboardPlan.of(
                    [(None, None)], ["x"], variants={"x": {"model": "dkt", name: bad}}
                )


def test_a_variant_with_an_authors_optimiser_is_checked_against_the_plans_recipe():
    from kt_lib.runs.plan import LeaderboardPlan
    from kt_lib.train import TrainConfig

    sgd = {"optimizer": "sgd", "momentum": 0.9, "lr_decay": 0.5, "lr_decay_every": 10}
    variants = {"dkt_sgd": {"model": "dkt", **sgd, "grad_clip": None, "patience": 50}}
    plan = LeaderboardPlan.of([(None, None)], ["dkt", "dkt_sgd"], variants=variants)
    run = {r.name: r for r in plan.runs(TrainConfig(grad_clip=1.0))}["dkt_sgd"]
    t = run.spec.train
    assert (t.optimizer, t.momentum, t.lr_decay, t.lr_decay_every) == ("sgd", 0.9, 0.5, 10)
    assert t.grad_clip is None and t.patience == 50  # None: no clipping, not the recipe's 1.0
    # momentum alone: valid on a plan whose recipe is SGD, refused on an AdamW one
    alone = {"x": {"model": "dkt", "momentum": 0.5}}
    on_sgd = LeaderboardPlan.of([(None, None)], ["x"], variants=alone)
    assert on_sgd.runs(TrainConfig(optimizer="sgd"))[0].spec.train.momentum == 0.5
    with pytest.raises(ValueError, match=r"variant 'x': .*momentum 0.5 is SGD's"):
        on_sgd.runs(TrainConfig())
    with pytest.raises(ValueError, match="optimizer must be a name"):
        LeaderboardPlan.of([(None, None)], ["x"], variants={"x": {"model": "dkt", "optimizer": 1}})


def test_a_variant_with_its_own_precision_trains_with_it_and_keys_it():
    from kt_lib.runs.plan import LeaderboardPlan
    from kt_lib.train import TrainConfig

    variants = {"dkt_bf16": {"model": "dkt", "precision": "bf16"}}
    plan = LeaderboardPlan.of([(None, None)], ["dkt", "dkt_bf16"], variants=variants)
    train = TrainConfig(lr=1e-3)
    runs = {r.name: r for r in plan.runs(train)}
    assert runs["dkt_bf16"].spec.train.precision == "bf16"
    assert runs["dkt_bf16"].spec.train.lr == 1e-3  # the rest of the recipe as every row's
    assert runs["dkt"].spec.train is train and runs["dkt"].spec.train.precision is None
    assert runs["dkt_bf16"].key.rsplit("/", 1)[1] != runs["dkt"].key.rsplit("/", 1)[1]
    with pytest.raises(ValueError, match="precision must be one of"):
        LeaderboardPlan.of(
            [(None, None)], ["x"], variants={"x": {"model": "dkt", "precision": "fp8"}}
        )


def _notebook_10_cells() -> list[str]:
    nb = json.loads((ROOT / "notebooks" / "10_compare_models.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize(
    "given, named",
    [({"models": ["dkt"]}, "'models'"), ({"folds": 5}, "'folds'"),
     ({"resume_file": "runs/x.json"}, "'resume_file'"), ({"workers": 2}, "'workers'"),
     ({"seeds": [0, 1, 2], "ordinal_models": []}, "'seeds'")],
)  # fmt: skip
def test_notebook_10_refuses_plan_parameters_it_would_ignore_with_results(given, named):
    """With `results_file` set the notebook shows stored runs and trains no binary plan: a
    parameter only that plan (or its execution) reads, given a value of its own, is refused by
    name, not ignored; seeds, preset, the simulator's sizes and max_len are refused only when
    no ordinal model is trained (the ordinal section reads them)."""
    imports, params, run = _notebook_10_cells()[:3]
    ns: dict = {}
    exec(imports, ns)
    exec(params, ns)
    ns.update(given)  # papermill's injected cell
    with pytest.raises(ValueError, match=named):
        exec(run, ns)
    assert "runs" not in ns


def test_notebook_10_loads_the_store_when_the_plan_is_left_at_its_defaults():
    """...and accepts what its ordinal section reads (seeds, preset, simulator sizes)."""
    imports, params, run = _notebook_10_cells()[:3]
    ns: dict = {}
    exec(imports, ns)
    exec(params, ns)
    ns.update(seeds=[0, 1, 2], num_c=12, preset="default")
    exec(run, ns)
    assert len(ns["runs"]) > 0 and set(ns["runs"]["device_name"]) == {ns["device_name"]}


def test_unused_with_results_names_only_changed_parameters_nothing_reads():
    assert unused_with_results({**PROFILE_DEFAULTS, **RUN_DEFAULTS}, ordinal=True) == []
    given = {**PROFILE_DEFAULTS, "folds": 5, "epochs": 30, "datasets": [["d", "line3"]]}
    assert unused_with_results(given, ordinal=True) == ["datasets", "folds"]  # epochs: read
    given = {**PROFILE_DEFAULTS, "seeds": [3], "executor": "ray"}
    assert unused_with_results(given, ordinal=True) == ["executor"]
    assert unused_with_results(given, ordinal=False) == ["seeds", "executor"]


def test_run_defaults_are_notebook_10s():
    nb = json.loads((ROOT / "notebooks" / "10_compare_models.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    declared = {}
    for node in ast.parse("".join(cell["source"])).body:
        if isinstance(node, ast.AnnAssign):
            declared[node.target.id] = ast.literal_eval(node.value)
    assert {k: declared[k] for k in RUN_DEFAULTS} == RUN_DEFAULTS


def test_fold_plan_finds_txt_fold_files_as_load_bundle_reads_them(tmp_path):
    """DTransformer-style folders name their folds `x_train1.txt`: load_bundle reads them, so
    the plan must plan folds there too (it looked for .csv only and planned seeds)."""
    from kt_lib.data import simulate, write_line3

    sim = simulate(num_students=20, seq_len=8, num_c=4, seed=0).data
    for name in ("x_train.txt", "x_test.txt", "x_train1.txt", "x_valid1.txt"):
        write_line3(sim, tmp_path / name)
    assert fold_plan("auto", 1, [0, 1], tmp_path) == [(1, 0)]
    assert fold_plan("line3", 1, [0, 1], tmp_path) == [(1, 0)]


def test_two_layouts_of_one_prepared_folder_do_not_share_a_run_key(tmp_path, monkeypatch):
    """`prepare` writes OUT/pykt and OUT/line3: both rows say dataset OUT, so the key tells the
    layouts apart (else the second layout's runs would count as done); a plain folder's key
    hashes exactly what it did before (the committed results' keys)."""
    import kt_lib.runs.plan as plan_module
    from kt_lib.runs.data import DataSpec
    from kt_lib.runs.plan import LeaderboardPlan

    out = tmp_path / "assist2015"
    specs = (DataSpec(str(out / "pykt"), fold=0), DataSpec(str(out / "line3"), fold=0),
             DataSpec(str(out / "line4"), fold=0),
             DataSpec(str(tmp_path / "statics2011"), fold=1))  # fmt: skip
    plan = LeaderboardPlan(specs, ("dkt",), preset="paper")
    runs = plan.runs()
    assert [r.dataset for r in runs] == ["assist2015"] * 3 + ["statics2011"]
    assert len({r.key for r in runs}) == 4
    monkeypatch.setattr(plan_module, "layout_key", lambda data: {})  # the keys before
    before = [r.key for r in plan.runs()]
    assert before[0] == before[1] == before[2]  # the three layouts collided
    # OUT/pykt (where the studies read OULAD: data/prepared/oulad_k4/pykt) and a plain folder
    # keep their keys
    assert before[0] == runs[0].key and before[3] == runs[3].key


@pytest.mark.skipif(
    not (ROOT.parent / "shared" / "data" / "assist2009").is_dir(),
    reason="needs the datasets under ../shared/data (the plans read their fold files)",
)
def test_every_committed_run_is_in_its_studys_plan():
    """The committed rows' keys are the plan's: a change of how keys are made that would
    retrain (and orphan) a study's finished runs fails here, study by study."""
    from kt_lib.runs.results import finished_runs
    from kt_lib.runs.studies import STUDIES

    data_root = ROOT.parent / "shared" / "data"
    for study in STUDIES.values():
        if not study.path.exists():
            continue
        if study.prepare and not all(study.folder(n).is_dir() for n in study.prepare):
            continue  # a prepared dataset (OULAD) not prepared on this machine
        planned = {r["key"] for r in study.plan(data_root)}
        done = set(finished_runs(study.path))
        assert done <= planned, (study.name, sorted(done - planned)[:3])
