"""A tuning budget's trials as a committed record, so that a search spread over sessions (two CPU
cores, no persistent disk) loses at most the trial in flight.

The Optuna storage (an SQLite file under runs/, not committed) is where trials run; the record
(`results/tuning/<budget>_trials.json`, committed) holds every ended trial of every label: its
state, value, settings and their distributions, the validation metric after each epoch (what
the median pruner compares against), when it ran, and its origin (`<number>@<start time>` of the
trial as first run). `save` rewrites a label's entry after each ended trial (atomically, under
a file lock: searches of several labels may run at once);
`restore` adds to a storage the recorded trials it lacks (matched by origin), so a fresh clone
resumes a search, and `kt budget best` works, from the record alone. A trial still running (or
left running by a killed search, which finishes it from its epoch checkpoint:
`search._optimise`) is not recorded until it ends; `summary` and `status_table` (`kt budget
status`) name it with the last epoch it reported.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from ..fileio import atomic_write_text, locked

ORIGIN = "origin"  # user attribute: the trial's first number and start time


def study_name(label: str) -> str:
    return f"budget_{label}"


SQLITE_WAIT = 60.0  # seconds a writer waits for the file's lock (labels searched side by side)


def opened(storage):
    """An Optuna storage for a URL: an SQLite file's folder is made if missing (a fresh clone
    has no runs/) and its writers wait up to SQLITE_WAIT seconds for each other (sqlite's own
    default is 5 s) instead of failing with "database is locked", and opening it (which creates a
    fresh file's tables) holds `<file>.lock`, so that searches started side by side do not create
    them at once; other URLs and storage objects pass through."""
    import optuna

    if not isinstance(storage, str) or not storage.startswith("sqlite:///"):
        return storage
    path = Path(storage.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):  # opening creates a fresh file's tables: two at once, and one failed
        return optuna.storages.RDBStorage(
            storage, engine_kwargs={"connect_args": {"timeout": SQLITE_WAIT}}
        )


def load(storage: str, label: str):
    """`label`'s Optuna study in `storage`, or None before its first trial."""
    import optuna

    try:
        return optuna.load_study(study_name=study_name(label), storage=opened(storage))
    except KeyError:  # no such study yet
        return None


def origin(trial) -> str:
    return trial.user_attrs.get(ORIGIN) or f"{trial.number}@{trial.datetime_start.isoformat()}"


def _row(trial) -> dict:
    from optuna.distributions import distribution_to_json

    return {
        ORIGIN: origin(trial),
        "state": trial.state.name,
        "value": trial.value,
        "params": trial.params,
        "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
        "intermediate": {str(k): v for k, v in sorted(trial.intermediate_values.items())},
        "user_attrs": {k: v for k, v in trial.user_attrs.items() if k != ORIGIN},
        "start": trial.datetime_start.isoformat() if trial.datetime_start else None,
        "complete": trial.datetime_complete.isoformat() if trial.datetime_complete else None,
    }


def _doc(path: Path) -> dict:
    if not path.exists():
        return {"labels": {}}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["labels"].items()
        return doc
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a trial record ({e}); fix or remove it") from e


def read(path: Path, pruner: dict | None = None) -> dict[str, list[dict]]:
    """{label: [trial rows]} of the record at `path` ({} when there is none). With `pruner`
    (the budget's settings), a record whose trials another rule pruned is refused: every trial
    of a budget has the same pruner."""
    doc = _doc(path)
    if None not in (pruner, doc.get("pruner")) and doc["pruner"] != pruner:
        raise ValueError(
            f"{path}: its trials were pruned with {doc['pruner']}, this budget prunes with "
            f"{pruner}; move the record (and the storage) aside to search again"
        )
    return doc["labels"]


def save(storage: str, label: str, path: Path, pruner: dict | None = None) -> int:
    """Rewrite `label`'s entry of the record at `path` with its ended trials in `storage` (and
    the budget's `pruner` settings); the number of trials written."""
    study = load(storage, label)
    rows = [] if study is None else [_row(t) for t in study.trials if t.state.is_finished()]
    with locked(path):  # searches of other labels may write their entries meanwhile
        labels = read(path, pruner)
        labels[label] = rows
        pruner = pruner if pruner is not None else _doc(path).get("pruner")  # kept if unnamed
        doc = {"about": "ended trials per label (kt_lib.runs.trials)", "pruner": pruner,
               "labels": dict(sorted(labels.items()))}  # fmt: skip
        atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return len(rows)


def restore(storage: str, label: str, path: Path, pruner: dict | None = None) -> int:
    """Add to `label`'s study in `storage` (created if absent) the trials of the record at
    `path` that it lacks; the number added. `pruner`: as in `read`."""
    with locked(path):  # two processes restoring one label at once would add its trials twice
        return _restore(storage, label, read(path, pruner).get(label, []))


def _restore(storage: str, label: str, rows: list[dict]) -> int:
    import optuna
    from optuna.distributions import json_to_distribution

    if not rows:
        return 0
    study = load(storage, label) or optuna.create_study(
        study_name=study_name(label), storage=opened(storage), direction="maximize"
    )
    have = {origin(t) for t in study.trials}
    added = 0
    for row in rows:
        if row[ORIGIN] in have:
            continue
        trial = optuna.trial.create_trial(
            state=optuna.trial.TrialState[row["state"]],
            value=row["value"] if row["state"] == "COMPLETE" else None,
            params=row["params"],
            distributions={k: json_to_distribution(d) for k, d in row["distributions"].items()},
            user_attrs={**row["user_attrs"], ORIGIN: row[ORIGIN]},
            intermediate_values={int(k): v for k, v in row["intermediate"].items()},
        )
        if row["start"]:
            trial.datetime_start = dt.datetime.fromisoformat(row["start"])
        if row["complete"]:
            trial.datetime_complete = dt.datetime.fromisoformat(row["complete"])
        study.add_trial(trial)
        added += 1
    return added


def devices(trials) -> list[str]:
    """The machines `trials` ran on (their "device" attribute; trials before the thirteenth
    session recorded none: all ran on this project's CPUs)."""
    return sorted({str(t.user_attrs["device"]) for t in trials if "device" in t.user_attrs})


def summary(storage: str, label: str, target: int) -> dict:
    """How far `label`'s search is: trials ended (by state) of `target`, the best value so far,
    the median minutes a trial took (ended ones), the hours left at that pace, and the trials
    running or left running by a killed search (number, last epoch reported or None)."""
    study = load(storage, label)
    ended = [] if study is None else [t for t in study.trials if t.state.is_finished()]
    running = [] if study is None else [t for t in study.trials if t.state.name == "RUNNING"]
    states = [t.state.name.lower() for t in ended]
    minutes = sorted(
        (t.datetime_complete - t.datetime_start).total_seconds() / 60
        for t in ended
        if t.datetime_start and t.datetime_complete
    )
    per = minutes[len(minutes) // 2] if minutes else None
    done = [t.value for t in ended if t.state.name == "COMPLETE" and t.value is not None]
    left = max(0, target - len(ended))
    return {
        "label": label,
        "ended": len(ended),
        "target": target,
        "states": {s: states.count(s) for s in sorted(set(states))},
        "best": max(done) if done else None,
        "min_per_trial": per,
        "hours_left": None if per is None else left * per / 60,
        "running": [(t.number, max(t.intermediate_values, default=None)) for t in running],
        "devices": devices(ended),
    }


def status_table(name: str, record, rows: list[dict]) -> str:
    """`kt budget status`: a budget's labels' `summary` rows as a table."""
    target = rows[0]["target"] if rows else 0
    head = [
        f"{name}: {sum(r['ended'] for r in rows)} of {target * len(rows)} trials ended "
        f"(record: {record})",
        f"{'label':<24} {'ended':>7} {'best':>7} {'min/trial':>9} {'h left':>7}  states",
    ]
    return "\n".join(head + [status_line(r) for r in rows])


def status_line(r: dict) -> str:
    """One label's line of `status_table` from its `summary`."""
    best = "-" if r["best"] is None else f"{r['best']:.4f}"
    per = "-" if r["min_per_trial"] is None else f"{r['min_per_trial']:.1f}"
    left = "?" if r["hours_left"] is None else f"{r['hours_left']:.1f}"
    mixed = [f"devices MIXED: {' | '.join(r['devices'])}"] if len(r["devices"]) > 1 else []
    chosen = [r["chosen_before"]] if r.get("chosen_before") and not r["ended"] else []
    states = ", ".join([f"{n} {s}" for s, n in r["states"].items()] + [
        f"trial {n} running (epoch {e} reported)" if e is not None else f"trial {n} running"
        for n, e in r["running"]
    ] + mixed + chosen)  # fmt: skip
    return (f"{r['label']:<24} {r['ended']:>3}/{r['target']:<3} {best:>7} {per:>9} "
            f"{left:>7}  {states}")  # fmt: skip
