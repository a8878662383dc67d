"""Hyperparameter search with Optuna: SimAKT's typed configuration (seed 000, phase 4) and the
ordinal models' fields (seed 002, phase 2: `ORDINAL_SPACE`, `run_ordinal_study`).

A trial draws settings from a search space (`SIMAKT_SPACE`: influence weights, bank sizes,
future_weight, decay_factor, learning rate; `preset_space` keeps those the preset's heads
read), applies them with
`SimilarityConfig.with_settings` (the one definition of every SimAKT field), trains with `fit`
and returns the validation AUC; after each epoch it reports the validation AUC to Optuna, whose
pruner may stop it (median pruner by default). Studies live in a storage URL (an SQLite file:
`sqlite:///runs/simakt_study.db`), so a study interrupted or run from several processes at once
is resumed by naming it again: `n_jobs` runs trials in threads of one process, and several
processes (or machines) that open the same study share its trials.

    study = run_study(bundle, n_trials=20, storage="sqlite:///runs/simakt.db")
    importance(study)                      # which setting mattered (fANOVA)
    best_overrides(study)                  # the winning configuration: a RunSpec's fields

Optuna samples, prunes and stores; this module only states the space and the objective.
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import threading
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..checkpoint import remove_checkpoint
from ..fileio import locked, short_digest
from ..heads.inter.trajectory import SEED_MEMORY_SIZE
from ..heads.simakt_config import load_simakt_config
from ..models import MODELS
from ..provenance import device_name
from ..train import TrainConfig
from .ablations import simakt_similarity
from .experiment import Splits, run_experiment
from .spec import DEFAULT_PRESET, RunSpec
from .trials import opened


@dataclass(frozen=True)
class Dim:
    """One dimension of a search space: float (log or linear) or int, or a choice."""

    low: float = 0.0
    high: float = 1.0
    log: bool = False
    kind: str = "float"  # float | int | choice
    choices: tuple = ()

    def suggest(self, trial, name: str):
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        if self.kind == "choice":
            return trial.suggest_categorical(name, list(self.choices))
        return trial.suggest_float(name, self.low, self.high, log=self.log)


# Settings of SimilarityConfig.with_settings (and "lr" for the optimiser). The ranges contain
# seed 000's: influence weights 0-2.5 (its default 1.0, its examples 0.3-2.5; 0 turns a head
# off), future_weight 0-1 (strict_causal 0, full_collaborative 1), memory_size 50-500 (its
# stated range), 10-200 clusters (examples 50-200), k 5-50 (examples 10-20), decay 0.8-0.99
# (examples 0.95-0.98); callers shrink bank sizes for small data (see `small_space`).
SIMAKT_SPACE: dict[str, Dim] = {
    "lr": Dim(1e-4, 3e-3, log=True),
    "cluster_weight": Dim(0.0, 2.5),
    "knn_weight": Dim(0.0, 2.5),
    "n_clusters": Dim(10, 200, log=True, kind="int"),
    "k_neighbors": Dim(5, 50, log=True, kind="int"),
    "memory_size": Dim(SEED_MEMORY_SIZE[0], SEED_MEMORY_SIZE[1], log=True, kind="int"),
    "future_weight": Dim(0.0, 1.0),
    "decay_factor": Dim(0.8, 0.99),
}


def small_space(n_students: int) -> dict[str, Dim]:
    """SIMAKT_SPACE with bank sizes that a training set of `n_students` can fill."""
    space = dict(SIMAKT_SPACE)
    top = max(4, n_students // 4)
    space["n_clusters"] = Dim(2, min(200, top), log=True, kind="int")
    # a bank holds one cross-fitting fold of the training students (half, with 2 folds)
    bank = max(8, n_students // 3)
    high = min(SEED_MEMORY_SIZE[1], bank)
    space["memory_size"] = Dim(min(8, top), high, log=True, kind="int")
    space["k_neighbors"] = Dim(2, min(50, max(2, top // 2)), log=True, kind="int")
    return space


def preset_space(space: dict[str, Dim], similarity: str = "position_weighted_dual") -> dict:
    """`space` without the settings that act on nothing in `similarity` (a preset, file or
    mapping): decay_factor / future_weight when no head's strategy reads them, knn_weight
    without a KNN head, a bank size whose heads stay off whatever weights the space draws.
    `with_settings` refuses those, so drawing them would fail every trial; "lr" is kept."""
    sim = load_simakt_config(similarity, warn=False)
    weights = {n: 1.0 for n in space if n in sim.weight_names() and sim.takes(n)}
    probe = sim.with_settings(**weights)  # every head the space may turn on, on
    return {n: d for n, d in space.items() if n == "lr" or n in weights or probe.takes(n)}


def trial_settings(trial, space: dict[str, Dim]) -> dict:
    """The settings one trial draws from `space`; k_neighbors never exceeds memory_size (a KNN
    head reads k of the bank's entries)."""
    settings = {name: dim.suggest(trial, name) for name, dim in space.items()}
    if "k_neighbors" in settings and "memory_size" in settings:
        settings["k_neighbors"] = min(settings["k_neighbors"], settings["memory_size"])
    return settings


def simakt_overrides(settings: dict, preset: str = "position_weighted_dual") -> dict:
    """Model fields of a SimAKT `RunSpec`: the similarity preset with the
    drawn settings applied (lr excluded: it is a training setting)."""
    changes = {k: v for k, v in settings.items() if k != "lr"}
    return {"similarity": simakt_similarity(preset, **changes)}


def _optimise(
    make_spec,
    bundle,
    space: dict[str, Dim],
    metric: str,
    n_trials: int,
    storage: str | None,
    study_name: str,
    seed: int,
    n_jobs: int,
    pruner,
    timeout: float | None,
    progress: bool,
    callbacks=(),
    checkpoints: Path | None = None,
):
    """An Optuna study maximising the validation `metric` of `make_spec(settings)`'s run on
    `bundle` (train/valid; test is not read), reported per epoch to the pruner; `callbacks`
    (study, trial) after each ended trial. With `checkpoints` (a folder, and a storage), each
    trial keeps an epoch checkpoint there (`_trial_prefix`, removed when it ends) and the
    trials a killed search left running are finished first, from their last epoch, with their
    own settings (`_finish_stale`); one search at a time holds the folder (a lock)."""
    import optuna

    def objective(trial) -> float:
        settings = trial_settings(trial, space)

        def report(epoch: int, row: dict) -> None:
            trial.report(row[f"valid_{metric}"], epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        spec = make_spec(settings)
        prefix = None if checkpoints is None else _trial_prefix(checkpoints, trial, settings)
        if prefix is not None:
            spec = dataclasses.replace(
                spec, train=dataclasses.replace(spec.train, checkpoint=prefix, resume=True)
            )
        trial.set_user_attr("device", device_name(spec.train.device))  # pruned ones too
        if "sampler_seed" not in trial.user_attrs:  # the seed that drew it (a resume reseeds)
            trial.set_user_attr("sampler_seed", seed)
        try:
            res = run_experiment(spec, Splits(bundle.train, bundle.valid, None), on_epoch=report)
        except Exception:  # pruned or failed: the trial ends (a kill or Ctrl-C resumes it)
            remove_checkpoint(prefix)
            raise
        remove_checkpoint(prefix)
        trial.set_user_attr("best_epoch", res.best_epoch)
        return res.valid.get(metric, math.nan)

    study = optuna.create_study(
        study_name=study_name,
        storage=opened(storage),
        load_if_exists=storage is not None,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=pruner or optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
    )
    with ExitStack() as stack:
        if checkpoints is not None and storage is not None:
            stack.enter_context(locked(Path(checkpoints) / "search", wait=False))
            stack.enter_context(_interrupt_leaves_trials_running())
            n_trials -= _finish_stale(study, objective, callbacks)
        study.optimize(  # a trial whose settings a model cannot take fails alone (state FAIL)
            objective,
            n_trials=max(0, n_trials),
            n_jobs=n_jobs,
            timeout=timeout,
            show_progress_bar=progress,
            catch=(ValueError,),
            callbacks=list(callbacks),
        )
    return study


@contextmanager
def _interrupt_leaves_trials_running():
    """Ctrl-C as SystemExit while a resumable search runs: Optuna marks a trial that raises
    KeyboardInterrupt FAIL (it would count as ended and never resume), while SystemExit passes
    through it and leaves the trial RUNNING, to be finished from its checkpoint next time."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a background job: left as it is
    ):
        yield  # (signal handlers belong to the main thread)
        return

    def stop(signum, frame):
        raise SystemExit(f"interrupted (signal {signum}): the running trial resumes next time")

    before = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _trial_prefix(folder, trial, settings: dict) -> str:
    """A trial's epoch checkpoint prefix: its number and a digest of its study and settings
    (the folder is per storage: `kt budget search --storage` gets its own)."""
    key = json.dumps([trial.study.study_name, settings], sort_keys=True, default=str)
    return str(Path(folder) / f"trial{trial.number}-{short_digest(key, 12)}")


def _finish_stale(study, objective, callbacks=()) -> int:
    """Run to their end the trials of `study` left RUNNING by a killed search (its storage keeps
    their settings and the epochs they reported; `objective` resumes them from their epoch
    checkpoint, or from epoch 0 without one) and tell Optuna how each ended, as
    `study.optimize` would; `callbacks` after each. Returns how many it finished."""
    import optuna
    from optuna.trial import TrialState

    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for frozen in stale:
        # Optuna's own handle on an existing trial: its suggest_* return the stored settings
        trial = optuna.trial.Trial(study, frozen._trial_id)
        try:
            with warnings.catch_warnings():  # an epoch reported before the kill comes again
                warnings.filterwarnings("ignore", "The reported value is ignored")
                value = objective(trial)
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED)
        except ValueError as e:  # as `optimize(catch=(ValueError,))`: this trial fails alone
            warnings.warn(f"trial {frozen.number} failed: {e}", stacklevel=2)
            study.tell(trial, state=TrialState.FAIL)
        except Exception:  # as `optimize`: any other error ends the trial FAIL and stops
            study.tell(trial, state=TrialState.FAIL)  # (a kill, SystemExit, leaves it running)
            for callback in callbacks:
                callback(study, study.get_trials(deepcopy=False)[frozen.number])
            raise
        else:
            if math.isnan(value):
                study.tell(trial, state=TrialState.FAIL)
            else:
                study.tell(trial, value)
        for callback in callbacks:
            callback(study, study.get_trials(deepcopy=False)[frozen.number])
    return len(stale)


def run_study(
    bundle,
    n_trials: int = 20,
    train_config: TrainConfig | None = None,
    model_preset: str = DEFAULT_PRESET,
    similarity: str = "position_weighted_dual",
    space: dict[str, Dim] | None = None,
    storage: str | None = None,
    study_name: str = "simakt",
    seed: int = 0,
    n_jobs: int = 1,
    pruner=None,
    timeout: float | None = None,
    progress: bool = False,
):
    """Optimise SimAKT's validation AUC on `bundle` (train/valid; test is not read).

    `storage`: an Optuna storage URL (e.g. "sqlite:///runs/simakt.db"); with one, an existing
    study of that name is resumed (`load_if_exists`). The sampler is seeded (TPE), so a study
    with n_jobs=1 repeats. Returns the `optuna.Study`.
    """
    space = preset_space(space or small_space(len(bundle.train)), similarity)
    base = train_config or TrainConfig(progress=False)

    def make_spec(settings: dict) -> RunSpec:
        cfg = TrainConfig(**{**base.__dict__, "lr": settings.get("lr", base.lr)})
        return RunSpec("simakt", model_preset, simakt_overrides(settings, similarity), seed=seed,
                       train=cfg)  # fmt: skip

    return _optimise(make_spec, bundle, space, "auc", n_trials, storage, study_name, seed,
                     n_jobs, pruner, timeout, progress)  # fmt: skip


# Seed 002's phase 2: the ordinal models' settings (fields of their configs, and "lr"). The
# mechanism settings exist on ModularAttentionGPCM only; `ordinal_space` keeps a model's own.
ORDINAL_SPACE: dict[str, Dim] = {
    "lr": Dim(1e-4, 3e-3, log=True),
    "d": Dim(kind="choice", choices=(32, 64, 128)),  # embedding size (4 heads divide each)
    "distance_penalty": Dim(0.0, 2.0),  # ordinal_aware's penalty per category of distance
    "window_size": Dim(2, 7, kind="int"),  # ordinal_pattern's causal window
    # "gated" fuses exactly two mechanisms: not a choice for the seed's four
    "fusion": Dim(kind="choice", choices=("concat", "weighted", "mean")),
}


def ordinal_space(model: str, space: dict[str, Dim] | None = None) -> dict[str, Dim]:
    """`space` (default ORDINAL_SPACE) cut to the settings `model`'s config has, and lr."""
    fields = {f.name for f in dataclasses.fields(MODELS[model].config_cls)}
    return {k: v for k, v in (space or ORDINAL_SPACE).items() if k == "lr" or k in fields}


def run_ordinal_study(
    bundle,
    model: str = "modular_attention_gpcm",
    n_trials: int = 20,
    train_config: TrainConfig | None = None,
    model_preset: str = DEFAULT_PRESET,
    space: dict[str, Dim] | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int = 0,
    n_jobs: int = 1,
    pruner=None,
    timeout: float | None = None,
    progress: bool = False,
):
    """Optimise an ordinal model's validation QWK on `bundle` (train/valid) over
    `ordinal_space(model, space)`; as `run_study` otherwise. `best_params` are its fields."""
    base = train_config or TrainConfig(progress=False)

    def make_spec(settings: dict) -> RunSpec:
        cfg = TrainConfig(**{**base.__dict__, "lr": settings.get("lr", base.lr)})
        fields = {k: v for k, v in settings.items() if k != "lr"}
        return RunSpec(model, model_preset, fields, seed=seed, train=cfg)

    return _optimise(make_spec, bundle, ordinal_space(model, space), "qwk", n_trials, storage,
                     study_name or model, seed, n_jobs, pruner, timeout, progress)  # fmt: skip


def trials_frame(study) -> pd.DataFrame:
    """One row per trial: number, state, validation AUC and the drawn settings."""
    return study.trials_dataframe(attrs=("number", "state", "value", "params", "user_attrs"))


def importance(study) -> pd.Series:
    """Each setting's importance for the validation AUC (Optuna's fANOVA evaluator), largest
    first; needs at least two completed trials."""
    import optuna

    got = optuna.importance.get_param_importances(study)
    return pd.Series(got, name="importance").sort_values(ascending=False)


def best_overrides(study, similarity: str = "position_weighted_dual") -> tuple[dict, float]:
    """(model fields, lr) of the best trial, ready for a SimAKT `RunSpec`."""
    params = dict(study.best_params)
    if "k_neighbors" in params and "memory_size" in params:  # as the trial clamped it
        params["k_neighbors"] = min(params["k_neighbors"], params["memory_size"])
    return simakt_overrides(params, similarity), params.get("lr", TrainConfig().lr)
