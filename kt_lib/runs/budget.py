"""Seed 000's comparison under an equal tuning budget: DTransformer, SimAKT without its
inter-student heads and each SimAKT preset are searched with the same Optuna sampler (seeded
TPE), pruner (median, on the validation AUC after each epoch), epochs cap, patience and number of
trials, on the validation students of one split; the best configuration of each then trains as a
labelled variant (`<label>_tuned`) on five seeds in the `simakt_tuned` study, paired.

    kt budget search [--trials 20] [--labels dtransformer ...] \
        [--data-dir ../shared/data/algebra05] [--device cuda]
    kt budget best                             # writes results/simakt_tuning.json
    kt study run simakt_tuned                  # the tuned rows, five seeds

What a label searches: `SHARED_SPACE` (the encoder's dropout, its knowledge slots and the
prediction MLP's width: DTransformer's own settings, which SimAKT inherits), and for a preset with
inter-student heads its own settings in the same trials (`search.preset_space`: influence
weights, bank sizes, future weight, decay, within seed 000's ranges). The learning rate stays the
recipe's for every label: a variant carries model fields, and the tuned rows train under the
study's recipe. Trials live in an SQLite storage (one Optuna study per label), so a search that
is killed resumes with the trials it lacks; test students are never read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..data import load_bundle
from ..fileio import atomic_write_text
from ..heads.simakt_config import load_simakt_config
from ..provenance import ROOT
from ..train import TrainConfig
from .search import Dim, _optimise, preset_space, simakt_overrides, small_space
from .spec import DEFAULT_PRESET, RunSpec
from .study import DATA_ROOT, RESULTS

# label -> (registered model, similarity preset; None: DTransformer itself)
BUDGET: dict[str, tuple[str, str | None]] = {
    "dtransformer": ("dtransformer", None),
    "simakt_no_inter": ("simakt", "no_inter_student"),
    "simakt_pwd": ("simakt", "position_weighted_dual"),
    "simakt_cluster_only": ("simakt", "cluster_only"),
    "simakt_knn_only": ("simakt", "knn_only"),
}
# DTransformer's settings every label searches (the paper preset: dropout 0.2, 16 slots, 256)
SHARED_SPACE: dict[str, Dim] = {
    "dropout": Dim(0.0, 0.4),
    "n_know": Dim(4, 32, log=True, kind="int"),
    "d_fc": Dim(kind="choice", choices=(128, 256, 512)),
}
TUNING_FILE = RESULTS / "simakt_tuning.json"
STORAGE = f"sqlite:///{ROOT / 'runs' / 'simakt_budget.db'}"
DATASET = "algebra05"  # the split searched: its seed-0 validation students
EPOCHS, PATIENCE = 30, 5  # the simakt study's recipe: every trial and every tuned row


def label_space(label: str, n_students: int) -> dict[str, Dim]:
    """The settings `label` searches on a training set of `n_students` (bank sizes it can fill)."""
    _, similarity = BUDGET[label]
    space = dict(SHARED_SPACE)
    if similarity not in (None, "no_inter_student"):
        sim = load_simakt_config(similarity, warn=False)
        for name, dim in preset_space(small_space(n_students), similarity).items():
            off = name.endswith("_weight") and sim.influence(name.removesuffix("_weight")) == 0
            if name != "lr" and sim.takes(name) and not off:  # a preset keeps its own heads
                space[name] = dim
    return space


def label_fields(label: str, settings: dict) -> dict:
    """Model fields of `label` with the drawn `settings`: the shared ones as config fields, a
    preset's own applied to its similarity configuration."""
    _, similarity = BUDGET[label]
    fields = {k: settings[k] for k in SHARED_SPACE if k in settings}
    if similarity is None:
        return fields
    own = {k: v for k, v in settings.items() if k not in SHARED_SPACE}
    if not own:
        return {**fields, "similarity": similarity}
    return {**fields, **simakt_overrides(own, similarity)}


def finished_trials(storage: str, label: str) -> int:
    """Trials of `label`'s study in `storage` that ended (complete, pruned or failed)."""
    import optuna

    try:
        study = optuna.load_study(study_name=f"budget_{label}", storage=storage)
    except KeyError:  # no such study yet
        return 0
    return sum(t.state.is_finished() for t in study.trials)


def search_label(
    bundle,
    label: str,
    n_trials: int = 20,
    train_config: TrainConfig | None = None,
    storage: str = STORAGE,
    preset: str = DEFAULT_PRESET,
    seed: int = 0,
    progress: bool = False,
):
    """Run `label`'s trials until `n_trials` have ended in `storage` (a resumed search adds only
    the missing ones); the Optuna study, named budget_<label>."""
    if label not in BUDGET:
        raise ValueError(f"no label {label!r} in the tuning budget; labels: {list(BUDGET)}")
    model, _ = BUDGET[label]
    cfg = train_config or TrainConfig.recipe(
        "workbook", epochs=EPOCHS, patience=PATIENCE, progress=False
    )
    left = max(0, n_trials - finished_trials(storage, label))

    def make_spec(settings: dict) -> RunSpec:
        fields = label_fields(label, settings)
        return RunSpec(model, preset, fields, seed=seed, label=label, train=cfg)

    space = label_space(label, len(bundle.train))
    return _optimise(make_spec, bundle, space, "auc", left, storage, f"budget_{label}", seed,
                     1, None, None, progress)  # fmt: skip


def best_configs(storage: str = STORAGE, labels=tuple(BUDGET)) -> dict:
    """Per label with a completed trial: its model, the best trial's fields and validation AUC,
    and how its trials ended (the budget each label got, pruned and failed ones included)."""
    import optuna

    out = {}
    for label in labels:
        try:
            study = optuna.load_study(study_name=f"budget_{label}", storage=storage)
        except KeyError:
            continue
        states = [t.state.name.lower() for t in study.trials if t.state.is_finished()]
        if "complete" not in states:
            continue
        best = study.best_trial
        params = dict(best.params)
        if "k_neighbors" in params and "memory_size" in params:  # as the trial clamped it
            params["k_neighbors"] = min(params["k_neighbors"], params["memory_size"])
        out[label] = {
            "model": BUDGET[label][0],
            "fields": label_fields(label, params),
            "params": params,
            "best_valid_auc": best.value,
            "best_trial": best.number,
            "trials": {s: states.count(s) for s in sorted(set(states))},
        }
    return out


def tuned_variants(path: str | Path = TUNING_FILE) -> dict[str, dict]:
    """{<label>_tuned: {"model": ..., **fields}} from a tuning file; {} when there is none."""
    path = Path(path)
    if not path.exists():
        return {}
    configs = json.loads(path.read_text(encoding="utf-8"))["labels"]
    return {f"{k}_tuned": {"model": v["model"], **v["fields"]} for k, v in configs.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="run each label's trials (resumable)")
    s.add_argument("--labels", nargs="+", choices=list(BUDGET), default=list(BUDGET))
    s.add_argument("--trials", type=int, default=20, help="trials per label (at least 20)")
    s.add_argument("--data-dir", default=str(DATA_ROOT / DATASET))
    s.add_argument("--device", default="cpu")
    s.add_argument("--storage", default=STORAGE)
    b = sub.add_parser("best", help="write each label's best configuration")
    b.add_argument("--storage", default=STORAGE)
    b.add_argument("--out", default=str(TUNING_FILE))
    a = p.parse_args(argv)
    if a.cmd == "search":
        if a.trials < 1:
            p.error(f"--trials {a.trials}: must be >= 1")
        bundle = load_bundle(a.data_dir, "auto", seed=0)
        cfg = TrainConfig.recipe(
            "workbook",
            epochs=EPOCHS,
            patience=PATIENCE,
            device=a.device,
            progress=False,
            verbose=True,
        )
        for label in a.labels:
            search_label(bundle, label, a.trials, cfg, a.storage)
            print(f"{label}: {finished_trials(a.storage, label)} trials ended", flush=True)
        return
    configs = best_configs(a.storage)
    if not configs:
        p.error(f"no label has a completed trial in {a.storage}")
    doc = {"dataset": DATASET, "split_seed": 0, "storage": a.storage, "labels": configs}
    atomic_write_text(Path(a.out), json.dumps(doc, indent=2) + "\n")
    print(f"wrote {a.out}: {', '.join(configs)}")


if __name__ == "__main__":
    main()
