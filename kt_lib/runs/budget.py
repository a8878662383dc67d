"""Comparisons under an equal tuning budget: every row of a comparison is searched with the same
Optuna sampler (seeded TPE), pruner (median, on the validation metric after each epoch), epochs
cap, patience and number of trials, on the validation students of one split; the best
configuration of each then trains as a labelled variant (`<label>_tuned`, its learning rate
included) in a study of record, paired.

    kt budget search simakt [--trials 20] [--labels dtransformer ...] [--device cuda] [--workers N]
    kt budget best simakt              # results/tuning/simakt.json -> the simakt_tuned study
    kt budget search ordinal           # seed 002's phase 2 on OULAD K = 5 (see below)
    kt budget best ordinal             # results/tuning/ordinal.json -> ordinal_oulad's _tuned rows
    kt budget search sparsekt          # pyKT's own sweep space, ASSIST2015 fold 0
    kt budget status simakt            # trials ended per label, best so far, hours left

`simakt` (seed 000): DTransformer, SimAKT without its inter-student heads and the three presets on
algebra05 (split seed 0), validation AUC. Every label searches `SHARED_SPACE` (learning rate,
the encoder's dropout, its knowledge slots, the prediction MLP's width: DTransformer's own
settings, which SimAKT inherits); a preset with inter-student heads also searches its own in the
same trials (`search.preset_space`: influence weights of the heads it has on, bank sizes,
decay, within seed 000's ranges; a head the preset leaves off stays off, so cluster_only stays
cluster-only).
`ordinal` (seed 002, phase 2): ModularAttentionGPCM, AttentionGPCM and the ordinal DKT on OULAD
K = 5 fold 0, validation QWK, each over `search.ordinal_space` (its own fields of
distance_penalty, window size, fusion, embedding size, and the learning rate); the K = 4 rows
reuse K = 5's choice. A search without `--labels` leaves out a label the tuning file already
chose whose trials are in neither storage nor record (the ordinal DKT's: its rows have run).
`sparsekt` (the baselines issue's open gap): sparseKT's top-k and soft selection on ASSIST2015
fold 0, validation AUC, over pyKT's own sweep (`SPARSEKT_SPACE`, from its
examples/seedwandb/sparsekt.yaml); `kt budget best sparsekt` adds `sparsekt_topk_tuned` and
`sparsekt_soft_tuned` rows to the baselines study, paired with the untuned ones.

Trials live in an SQLite storage per budget (one Optuna study per label, runs/, not committed):
a killed search resumes with the trials it lacks, and the trial it was in from its last epoch
(an epoch checkpoint per trial under runs/checkpoints/budget/; one search per label at a time);
every ended trial is also in a committed record (results/tuning/<budget>_trials.json,
`kt_lib.runs.trials`), from which a fresh clone's search resumes. Test students are never scored
(their file only sizes the shared vocabulary). Until 2026-11-29 `future_weight` was not searched.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..data import load_bundle
from ..data.prepare import prepare as prepare_raw
from ..fileio import atomic_write_text, short_digest
from ..heads.simakt_config import load_simakt_config
from ..provenance import ROOT
from ..runtime import check_device
from ..train import TrainConfig
from .execute import exit_with_parent
from .labels import search_side_by_side
from .search import Dim, _optimise, ordinal_space, preset_space, simakt_overrides, small_space
from .spec import RunSpec
from .study import CHECKPOINTS, DATA_ROOT, PREPARED, RESULTS
from .trials import devices, restore, save, status_table, study_name, summary
from .trials import load as _load

EPOCHS, PATIENCE = 30, 5  # the studies' recipe: every trial and every tuned row
# DTransformer's settings, searched by every SimAKT label (paper: lr 1e-3, dropout 0.2, 16, 256)
SHARED_SPACE: dict[str, Dim] = {
    "lr": Dim(1e-4, 3e-3, log=True),
    "dropout": Dim(0.0, 0.4),
    "n_know": Dim(4, 32, log=True, kind="int"),
    "d_fc": Dim(kind="choice", choices=(128, 256, 512)),
}


def _simakt_space(label: str, model: str, similarity: str | None, n: int) -> dict[str, Dim]:
    space = dict(SHARED_SPACE)
    if similarity not in (None, "no_inter_student"):
        sim = load_simakt_config(similarity, warn=False)
        for name, dim in preset_space(small_space(n), similarity).items():
            off = name in sim.weight_names() and sim.influence(name[: -len("_weight")]) == 0
            if name not in space and sim.takes(name) and not off:
                space[name] = dim
    return space


def _simakt_fields(label: str, similarity: str | None, settings: dict) -> dict:
    fields = {k: settings[k] for k in SHARED_SPACE if k in settings and k != "lr"}
    if similarity is None:
        return fields
    own = {k: v for k, v in settings.items() if k not in SHARED_SPACE}
    if not own:
        return {**fields, "similarity": similarity}
    return {**fields, **simakt_overrides(own, similarity)}


def _ordinal_space(label: str, model: str, similarity: str | None, n: int) -> dict[str, Dim]:
    return ordinal_space(model)


def _ordinal_fields(label: str, similarity: str | None, settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k != "lr"}


# pyKT's own sweep for sparseKT (examples/seedwandb/sparsekt.yaml: every value it lists), the
# selection's parameter per label; the question is whether its published ASSIST2015 figures need it
SPARSEKT_SPACE: dict[str, Dim] = {
    "lr": Dim(kind="choice", choices=(1e-3, 1e-4, 1e-5)),
    "d": Dim(kind="choice", choices=(64, 256)),
    "d_ff": Dim(kind="choice", choices=(64, 256)),
    "final_fc_dim": Dim(kind="choice", choices=(64, 256)),
    "final_fc_dim2": Dim(kind="choice", choices=(64, 256)),
    "dropout": Dim(kind="choice", choices=(0.05, 0.1, 0.3, 0.5)),
    "n_heads": Dim(kind="choice", choices=(4, 8)),
    "n_blocks": Dim(kind="choice", choices=(1, 2, 4)),
}
SELECTION = {"sparsekt_topk": ("topk", "k", Dim(1, 10, kind="int")),
             "sparsekt_soft": ("soft", "ratio", Dim(kind="choice", choices=(
                 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)))}  # fmt: skip


def _sparsekt_space(label: str, model: str, similarity: str | None, n: int) -> dict[str, Dim]:
    _, name, dim = SELECTION[label]
    return {**SPARSEKT_SPACE, name: dim}


def _sparsekt_fields(label: str, similarity: str | None, settings: dict) -> dict:
    return {"selection": SELECTION[label][0], **{k: v for k, v in settings.items() if k != "lr"}}


@dataclass(frozen=True)
class Budget:
    """One comparison under an equal tuning budget: its labels (label -> registered model and
    SimAKT similarity preset, None elsewhere), the split searched, the metric, and how a label's
    drawn settings become its search space and its model fields (the learning rate, when drawn,
    is a training setting: it goes to the variant's `lr`)."""

    name: str
    labels: dict[str, tuple[str, str | None]]
    dataset: str  # folder under the data root, or a prepared one (`prepare`)
    data_format: str
    fold: int | None  # the fold whose validation students choose (None: split seed 0)
    metric: str
    space_of: Callable[[str, str, str | None, int], dict[str, Dim]]
    fields_of: Callable[[str, str | None, dict], dict]
    prepare: tuple | None = None  # (dataset name, raw folder, options) for `prepare`
    preset: str = "paper"  # the sizes searched: the tuned rows' studies train this preset
    # the median pruner, the same for every label: trials that run whole before it prunes, and
    # epochs a trial runs before it can be pruned (its validation metric after epoch `warmup`
    # is the first one compared)
    startup: int = 3
    warmup: int = 1

    @property
    def pruner(self) -> dict:
        return {"kind": "median", "n_startup_trials": self.startup, "n_warmup_steps": self.warmup}

    @property
    def file(self) -> Path:
        return RESULTS / "tuning" / f"{self.name}.json"  # not results/*.json: those are runs

    @property
    def record(self) -> Path:
        return RESULTS / "tuning" / f"{self.name}_trials.json"  # every ended trial, committed

    def chosen(self, path: str | Path | None = None) -> dict[str, dict]:
        """The labels' chosen configurations in the tuning file (`kt budget best`); {} before
        it exists."""
        path = Path(path or self.file)
        return json.loads(path.read_text(encoding="utf-8"))["labels"] if path.exists() else {}

    @property
    def storage(self) -> str:
        return f"sqlite:///{ROOT / 'runs' / f'{self.name}_budget.db'}"

    def data_dir(self, data_root: str | Path = DATA_ROOT) -> Path:
        """The split's folder; a prepared one is made from its raw files on first use."""
        if self.prepare is None:
            return Path(data_root) / self.dataset
        name, raw, options = self.prepare
        out = PREPARED / self.dataset
        if not (out / "pykt").is_dir():
            prepare_raw(name, Path(data_root) / raw, out, **options)
        return out / "pykt"

    def space(self, label: str, n_students: int) -> dict[str, Dim]:
        """What `label` searches on a training set of `n_students` (bank sizes it can fill)."""
        model, similarity = self.label_of(label)
        return self.space_of(label, model, similarity, n_students)

    def fields(self, label: str, settings: dict) -> dict:
        """Model fields of `label` with the drawn `settings` (the learning rate excluded)."""
        return self.fields_of(label, self.label_of(label)[1], settings)

    def label_of(self, label: str) -> tuple[str, str | None]:
        if label not in self.labels:
            raise ValueError(f"budget {self.name!r} has no label {label!r}; labels: "
                             f"{list(self.labels)}")  # fmt: skip
        return self.labels[label]


BUDGETS: dict[str, Budget] = {
    "simakt": Budget(
        "simakt",
        {
            "dtransformer": ("dtransformer", None),
            "simakt_no_inter": ("simakt", "no_inter_student"),
            "simakt_pwd": ("simakt", "position_weighted_dual"),
            "simakt_cluster_only": ("simakt", "cluster_only"),
            "simakt_knn_only": ("simakt", "knn_only"),
        },
        "algebra05",
        "auto",
        None,
        "auc",
        _simakt_space,
        _simakt_fields,
        # pruning after epoch 1 kept runs by their first two epochs' AUC (a first search on
        # this CPU pruned 12 of 15 there, by margins of 0.003, while the best runs peak after
        # epoch 20): five whole trials, then no pruning before epoch 5
        startup=5,
        warmup=5,
    ),
    "ordinal": Budget(
        "ordinal",
        {m: (m, None) for m in ("modular_attention_gpcm", "attention_gpcm", "dkt_gpcm")},
        "oulad_k5",
        "pykt",
        0,
        "qwk",
        _ordinal_space,
        _ordinal_fields,
        prepare=("oulad", "oulad", {"bands": 5}),
    ),
    # issue 29's open question: does sparseKT reach pyKT's ASSIST2015 figures once searched as
    # pyKT searched it? The tuned rows join the baselines study, paired with the untuned ones
    "sparsekt": Budget(
        "sparsekt",
        {label: ("sparsekt", None) for label in SELECTION},
        "assist2015",
        "pykt",
        0,
        "auc",
        _sparsekt_space,
        _sparsekt_fields,
        startup=5,  # as simakt's (it has not run under any other rule)
        warmup=5,
    ),
}


def finished_trials(storage: str, label: str) -> int:
    """Trials of `label`'s study in `storage` that ended (complete, pruned or failed)."""
    study = _load(storage, label)
    return 0 if study is None else sum(t.state.is_finished() for t in study.trials)


def started_trials(storage: str, label: str) -> int:
    """Trials of `label`'s study in `storage` in any state, those a kill left running included."""
    study = _load(storage, label)
    return 0 if study is None else len(study.trials)


def search_label(
    budget: Budget,
    bundle,
    label: str,
    n_trials: int = 20,
    train_config: TrainConfig | None = None,
    storage: str | None = None,
    preset: str | None = None,
    seed: int = 0,
    progress: bool = False,
    record: Path | None = None,
    checkpoints: Path | None = None,
):
    """Run `label`'s trials until `n_trials` have ended in `storage` (default the budget's; a
    resumed search adds only the missing ones) at `preset` (default the budget's); the Optuna
    study, named budget_<label>. A resumed search seeds its sampler with `seed` plus the trials
    already started (running ones included: a stale trial is finished with its stored settings
    and draws nothing, so seeding by the ended ones replayed its draws in the next trial), so
    it draws new settings rather than replaying earlier ones. A trial that crashes (an error
    other than its settings' ValueError) ends FAIL and counts, as pruned ones do, and is
    recorded before the error stops the search. With
    `record` (a trial record, `kt_lib.runs.trials`), the storage first gains the recorded
    trials it lacks, and each ended trial is written back to the record. With `checkpoints` (a
    folder; the CLI's is runs/checkpoints/budget/<budget>) every trial keeps an epoch
    checkpoint under `<checkpoints>/<label>`, and a search killed mid-trial resumes that trial
    from its last epoch (`search._optimise`)."""
    import optuna

    model, _ = budget.label_of(label)
    storage = storage or budget.storage
    if record is not None:
        restore(storage, label, record, budget.pruner)
    preset = preset or budget.preset
    cfg = train_config or TrainConfig.recipe("workbook", epochs=EPOCHS, patience=PATIENCE,
                                             progress=False)  # fmt: skip
    ended = finished_trials(storage, label)
    left = max(0, n_trials - ended)

    def make_spec(settings: dict) -> RunSpec:
        train = TrainConfig(**{**cfg.__dict__, "lr": settings.get("lr", cfg.lr)})
        fields = budget.fields(label, settings)
        return RunSpec(model, preset, fields, seed=seed, label=label, train=train)

    space = budget.space(label, len(bundle.train))
    keep = [lambda study, trial: save(storage, label, record, budget.pruner)] if record else []
    pruner = optuna.pruners.MedianPruner(n_startup_trials=budget.startup,
                                         n_warmup_steps=budget.warmup)  # fmt: skip
    try:
        return _optimise(make_spec, bundle, space, budget.metric, left, storage,
                         study_name(label), seed + started_trials(storage, label), 1, pruner,
                         None, progress, callbacks=keep,
                         checkpoints=checkpoints and Path(checkpoints) / label)  # fmt: skip
    finally:  # a crash ends its trial FAIL without Optuna's callbacks: the record still has it
        if record is not None:
            save(storage, label, record, budget.pruner)


def best_configs(budget: Budget, storage: str | None = None) -> dict:
    """Per label with a completed trial: its model, the best trial's fields and learning rate,
    its validation metric, and how its trials ended (the budget each label got, pruned and
    failed ones included)."""
    out = {}
    for label, (model, _) in budget.labels.items():
        study = _load(storage or budget.storage, label)
        if study is None:
            continue
        ended = [t for t in study.trials if t.state.is_finished()]
        states = [t.state.name.lower() for t in ended]
        if "complete" not in states:
            continue
        best = study.best_trial
        params = dict(best.params)
        if "k_neighbors" in params and "memory_size" in params:  # as the trial clamped it
            params["k_neighbors"] = min(params["k_neighbors"], params["memory_size"])
        out[label] = {
            "model": model,
            "fields": budget.fields(label, params),
            "lr": params.get("lr"),
            "params": params,
            f"best_valid_{budget.metric}": best.value,
            "best_trial": best.number,
            "trials": {s: states.count(s) for s in sorted(set(states))},
            "devices": devices(ended),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="run each label's trials (resumable)")
    s.add_argument("budget", choices=sorted(BUDGETS))
    s.add_argument("--labels", nargs="+", default=None, help="some of the budget's labels")
    s.add_argument("--trials", type=int, default=20, help="trials per label (the record: 20)")
    s.add_argument("--data-root", default=str(DATA_ROOT))
    s.add_argument("--device", default="cpu")
    s.add_argument("--storage", default=None, help="Optuna storage (default the budget's)")
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        help="labels searched side by side, one process each (kt_lib.runs.labels)",
    )
    s.add_argument("--parent", type=int, default=None, help=argparse.SUPPRESS)  # fmt: skip
    b = sub.add_parser("best", help="write each label's best configuration")
    b.add_argument("budget", choices=sorted(BUDGETS))
    b.add_argument("--storage", default=None)
    b.add_argument("--out", default=None, help="default results/tuning/<budget>.json")
    b.add_argument("--trials", type=int, default=20, help="the budget every label must have used")
    b.add_argument(
        "--partial",
        action="store_true",
        help="write even where labels' budgets differ (the file records each one's)",
    )
    t = sub.add_parser("status", help="trials ended per label, best so far, hours left")
    t.add_argument("budget", choices=sorted(BUDGETS))
    t.add_argument("--trials", type=int, default=20, help="trials per label (the record: 20)")
    a = p.parse_args(argv)
    budget = BUDGETS[a.budget]
    if a.cmd == "search":
        if a.trials < 1 or a.workers < 1:
            p.error(f"--trials {a.trials} --workers {a.workers}: each must be >= 1")
        try:  # a trial failed on a bad device counts as ended: one of the label's budget gone
            check_device(a.device)
        except ValueError as e:
            p.error(str(e))
        labels = a.labels or list(budget.labels)
        for label in labels:
            budget.label_of(label)  # an unknown label fails before any trial
        if a.parent is not None:  # a child of `--workers`: it ends with its parent
            exit_with_parent(a.parent)
    if a.cmd == "status":  # a table, not Optuna's log of the storage it rebuilds
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    record = budget.record if getattr(a, "storage", None) is None else None
    if record is not None:  # the default storage: bring in what the committed record holds
        for label in labels if a.cmd == "search" else budget.labels:  # a child: its own only
            restore(budget.storage, label, record, budget.pruner)
    if a.cmd == "status":
        print(_status(budget, a.trials))
        return
    if a.cmd == "search" and not a.labels:  # chosen before, trials unrecorded: not again
        chosen = budget.chosen()
        store = a.storage or budget.storage
        skip = [x for x in labels if x in chosen and not finished_trials(store, x)]
        for label in skip:
            print(
                f"{label}: chosen before in {budget.file.name}, its trials unrecorded: not "
                "searched again (name it in --labels to search it anew)",
                flush=True,
            )
        labels = [x for x in labels if x not in skip]
        if not labels:
            print(f"{budget.name}: no label left to search")
            return
    if a.cmd == "search" and a.workers > 1 and len(labels) > 1:
        options = ["--trials", str(a.trials), "--data-root", a.data_root, "--device", a.device]
        storage = ["--storage", a.storage] if a.storage else []
        return search_side_by_side(budget.name, labels, options + storage, a.workers)
    if a.cmd == "search" and a.workers > 1:  # a setting that cannot act says so
        print(f"--workers {a.workers}: one label to search, in this process", flush=True)
    if a.cmd == "search":
        bundle = load_bundle(budget.data_dir(a.data_root), budget.data_format, fold=budget.fold,
                             seed=0)  # fmt: skip
        cfg = TrainConfig.recipe(
            "workbook", epochs=EPOCHS, patience=PATIENCE, device=a.device, progress=False,
            verbose=True,
        )  # fmt: skip
        storage = a.storage or budget.storage
        for label in labels:
            study = search_label(budget, bundle, label, a.trials, cfg, storage, record=record,
                                 checkpoints=_checkpoints(budget, a.storage))  # fmt: skip
            states = [t.state.name.lower() for t in study.trials if t.state.is_finished()]
            counts = ", ".join(f"{states.count(x)} {x}" for x in sorted(set(states)))
            print(f"{label}: {len(states)} trials ended ({counts})", flush=True)
            if "complete" not in states:
                print(f"warning: {label} has no completed trial: each failed (see the log "
                      "above); `kt budget best` will leave it out", flush=True)  # fmt: skip
        return
    if a.storage and not a.out:  # another storage's choices must not replace the record's
        p.error(
            f"--storage {a.storage} is not {budget.name}'s own storage: name the file its "
            f"choices go to with --out ({budget.file} holds the studies' choices)"
        )
    unequal = _unequal(budget, a.storage or budget.storage, a.trials)
    if unequal and not a.partial:
        p.error(f"{budget.name}: the labels' budgets are not yet equal ({'; '.join(unequal)}): "
                "finish the search, or pass --partial to choose from unequal budgets")  # fmt: skip
    configs = best_configs(budget, a.storage)
    if not configs:
        p.error(f"no label of {budget.name!r} has a completed trial in "
                f"{a.storage or budget.storage}")  # fmt: skip
    out = Path(a.out or budget.file)
    # a label chosen before (its tuned rows may have run) is kept when the storage has none of
    # its trials (the ordinal DKT's 20 ran before trials were recorded): never dropped silently
    old = budget.chosen(out)
    store = a.storage or budget.storage
    kept = {label: cfg for label, cfg in old.items()
            if label in budget.labels and _load(store, label) is None}  # fmt: skip
    doc = {"budget": budget.name, "dataset": budget.dataset, "fold": budget.fold,
           "metric": budget.metric, "labels": {**kept, **configs}}  # fmt: skip
    atomic_write_text(out, json.dumps(doc, indent=2) + "\n")
    note = f"; kept from before (no trials here): {', '.join(kept)}" if kept else ""
    print(f"wrote {out}: {', '.join(configs)}{note}")


def _unequal(budget: Budget, storage: str, target: int) -> list[str]:
    """The labels with trials whose budget is not `target` ended trials, none running."""
    out = []
    for label in budget.labels:
        study = _load(storage, label)
        if study is None or not study.trials:
            continue  # never searched: left out of the file, not a smaller budget
        ended = sum(t.state.is_finished() for t in study.trials)
        running = len(study.trials) - ended
        if ended != target or running:
            more = f", {running} running" if running else ""
            out.append(f"{label} {ended}/{target} ended{more}")
    return out


def _checkpoints(budget: Budget, storage: str | None) -> Path:
    """The trials' epoch checkpoints: a folder per budget, and per storage when not the budget's
    (trial numbers and seeded settings repeat across storages)."""
    folder = CHECKPOINTS / "budget" / budget.name
    return folder if storage is None else folder / f"storage-{short_digest(storage)}"


def _status(budget: Budget, target: int) -> str:
    chosen = budget.chosen()
    rows = [summary(budget.storage, label, target) for label in budget.labels]
    for r in rows:  # a label chosen before trials were recorded (the search leaves it out)
        if r["label"] in chosen:
            r["chosen_before"] = f"chosen before in {budget.file.name}, its trials unrecorded"
    return status_table(budget.name, budget.record.relative_to(ROOT), rows)


if __name__ == "__main__":
    main()
