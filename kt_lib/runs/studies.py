"""The evidence studies of record: named, typed plans whose runs land in `results/<name>.json`.

    kt study list
    kt study status simakt                  # done / left per cell, ETA
    kt study run simakt [--data-root ../shared/data] [--device cuda]
                                        [--workers 4] [--threads 1]
    kt study render simakt                   # the README's block, from the file
    kt study render simakt --write           # ... written into README.md and docs/*.md
    kt study retire leaderboard --models simakt --datasets statics2011 --before 2026-11-28T10:52 \
        --reason "bank positions past the first window (fixed in b7b606d, eaeb91e)"  # rerun them
    kt study adopt leaderboard [--from baselines] [--dry-run]  # runs other studies finished
    kt leaderboard results/simakt.json --pairs simakt_pwd:dtransformer ...

A study is a list of parts (datasets x models) that share one training recipe, one preset and one
results file. `run` is resumable: each finished run is merged into the file at once (file lock,
atomic rewrite, `runs.results.add_runs`) and runs already there under the same `run_key` (dataset,
model, fold, seed, preset and a hash of every setting that changes the numbers) are skipped, so a
study is filled piece by piece: a CPU in the background, a GPU session when one is lent. The data
folders are found under `--data-root` by name (never copied into the repository). The file is
tracked by git: commit it after each batch of finished runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

from ..provenance import ROOT, git_commit
from ..runtime import check_device
from .adoption import adopt, adoptable, adopted_copies
from .cost import cells, fmt_eta, kind_hours, run_cost
from .declared import DECLARED
from .execute import ExecConfig
from .leaderboard import checkpoint_name, run_plan
from .parking import (
    MAX_MB,
    PARKED,
    discard,
    held,
    in_flight,
    park,
    parked,
    price_in_flight,
    unpark,
)
from .record import now, preset_changes, stale_preset_rows, utc
from .results import finished_runs, read_runs, retire_runs
from .study import CHECKPOINTS, DATA_ROOT, PREPARED, RESULTS, Part, Study  # noqa: F401
from .study_render import render, render_summary, write_blocks
from .tuned import add_tuned_rows

STUDIES = add_tuned_rows(DECLARED)


def get(name: str) -> Study:
    if name not in STUDIES:
        raise KeyError(f"no study {name!r}; the studies are {sorted(STUDIES)}")
    return STUDIES[name]


def status(
    study: Study,
    data_root: str | Path = DATA_ROOT,
    path: str | Path | None = None,
    device: str = "cpu",
    pool: list[dict] | tuple = (),
):
    """(done rows, left plan entries, ETA seconds, or None while no finished run, here or in
    `pool`, can price them). A left run costs `run_cost` on `device`'s kind (see there; `pool`:
    the other studies' runs)."""
    rows = [r for r in read_runs(path or study.path) if not r.get("error")]
    have = {r["run_key"] for r in rows if r.get("run_key")}
    left = [p for p in study.plan(data_root) if p["key"] not in have]
    kind = "gpu" if str(device).startswith("cuda") else "cpu"
    if kind == "cpu":  # a run with an epoch checkpoint costs its epochs left at its own pace
        price_in_flight(study.name, study.epochs, left, patience=study.patience)
    cost = sum(
        p.get(
            "in_flight",
            run_cost(rows, p["dataset"], p["model"], kind, pool, p.get("base"), p.get("epochs"))[0],
        )
        for p in left
    )
    return rows, left, None if math.isnan(cost) else cost


def other_studies_runs(name: str) -> list[dict]:
    """The finished runs of every study but `name` (what `run_cost` may borrow from)."""
    return [r for s in STUDIES.values() if s.name != name
            for r in read_runs(s.path) if not r.get("error")]  # fmt: skip


def run(
    study: Study,
    data_root: str | Path = DATA_ROOT,
    device: str = "cpu",
    execution: ExecConfig | None = None,
    path: str | Path | None = None,
    progress: bool = True,
    checkpoints: str | Path | None = CHECKPOINTS,
    parked_root: str | Path = PARKED,
) -> None:
    """Fill the study's results file (resumable; see the module docstring). Each run also writes
    an epoch checkpoint of its own under `checkpoints/<study>/` (None: none), with one worker or
    several, so a run killed mid-way resumes from its last finished epoch when the study is
    started again; the checkpoint is removed once the run's row is in the results file. Runs
    parked in `results/inflight/` (`kt_lib.runs.parking`) are put back first."""
    execution = execution or ExecConfig()
    ckpt = Path(checkpoints) / study.name if checkpoints is not None else None
    for back in unpark(study.name, checkpoints, parked_root) if checkpoints is not None else ():
        print(f"resuming parked run {back.line()}", flush=True)
    study.ensure_prepared(data_root)
    for part, plan in zip(study.parts, study.part_plans(data_root), strict=True):
        for folder, _ in part.datasets:
            if not study.folder(folder, data_root).is_dir():
                raise FileNotFoundError(
                    f"study {study.name}: no dataset folder {study.folder(folder, data_root)}"
                )
        run_plan(
            plan,
            study.train_config(device),
            results_file=path or study.path,
            execution=execution,
            progress=progress,
            checkpoint_dir=ckpt,
        )


def in_flight_of(
    study: Study, models, datasets, path=None, data_root=DATA_ROOT, checkpoints=CHECKPOINTS,
    parked_root=PARKED,
) -> list[str]:  # fmt: skip
    """Checkpoint names of the unfinished runs of `study` on `models` x `datasets` that hold an
    epoch checkpoint here or parked: what `retire` drops with the rows."""
    finished = set(finished_runs(Path(path or study.path)))
    names = {
        checkpoint_name(p_["key"])
        for p_ in study.only(models, datasets).plan(data_root)
        if p_["key"] not in finished
    }
    return sorted(names & held(study.name, checkpoints, parked_root))


def retired_in_flight(
    study: Study, models, datasets, path=None, data_root=DATA_ROOT, checkpoints=CHECKPOINTS,
    parked_root=PARKED,
) -> list[str]:  # fmt: skip
    """The epoch checkpoints `retire` drops beside the rows of `models` x `datasets`: those of
    their unfinished runs (`in_flight_of`). A label the study no longer plans but whose rows its
    file still holds (a variant since removed) is retired by name and has none in flight; any
    other name the study lacks is refused, not matched by nothing."""
    rows = read_runs(Path(path or study.path))
    kept = {r.get("model") for r in rows if not r.get("error") and r.get("run_key")}  # retirable
    planned = {m for part in study.parts for m in part.models}
    live = [m for m in models or () if m in planned or m not in kept]
    if models and not live:  # removed labels only: nothing planned, nothing in flight
        study.only(None, datasets)
        return []
    return in_flight_of(study, live, datasets, path, data_root, checkpoints, parked_root)


def retire(
    study: Study, models, datasets, reason: str, before: str | None, path=None, into=None,
    dry_run: bool = False, checkpoints=CHECKPOINTS, parked_root=PARKED, data_root=DATA_ROOT,
    flying: list[str] | None = None, stale_presets: bool = False,
) -> list[dict]:  # fmt: skip
    """Move the finished rows of `study` on `models` x `datasets` (None: any), dated before
    `before` (an ISO time; None: any), to `into` (default `study.retired_path`) with
    `reason`, the date and the commit, and remove their epoch checkpoints (here and parked);
    the study then plans those runs again. The epoch checkpoints of those cells' unfinished runs
    go too (`in_flight_of`), whatever `before` says: an epoch records no commit, so a run in
    flight may hold the old code's epochs and, resumed, land as a row dated after the fix
    (`flying`: those names when the caller has them already, else found here).
    `stale_presets`: only the rows made under another version of their preset
    (`stale_preset_rows`). `dry_run`: only return the rows."""
    if not reason.strip():
        raise ValueError("--reason: say why these rows are retired (it is stored with them)")
    if not models and not datasets:
        raise ValueError("name --models and/or --datasets: retire never takes a whole study")
    path = Path(path or study.path)
    if flying is None:  # (and the names checked)
        flying = retired_in_flight(
            study, models, datasets, path, data_root, checkpoints, parked_root
        )
    cut = None if before is None else utc(before)
    rows = read_runs(path)
    stale = {r["run_key"] for r in stale_preset_rows(rows)} if stale_presets else None

    def select(r: dict) -> bool:
        if r.get("error") or not r.get("run_key"):  # an unkeyed row is planned by nothing
            return False
        if stale is not None and r["run_key"] not in stale:
            return False
        if (models and r.get("model") not in models) or (
            datasets and r.get("dataset") not in datasets
        ):
            return False
        if cut is None:
            return True
        if not r.get("date"):
            raise ValueError(f"{r['run_key']}: the row has no date to compare with --before")
        return utc(r["date"]) < cut

    chosen = [r for r in rows if select(r)]
    if dry_run:
        return chosen
    # the checkpoints first (repeatable): a cut after the rows moved must not leave an epoch
    # checkpoint of the old code for the rerun to resume from
    for name in [checkpoint_name(r["run_key"]) for r in chosen] + flying:
        discard(study.name, name, checkpoints, parked_root)
    note = {"reason": reason, "on": now(), "commit": git_commit()}
    return retire_runs(path, into or study.retired_path, select, note)


def _add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--add",
        nargs="+",
        default=None,
        metavar="MODEL",
        help="instead of the study's cells, these registered models' on its datasets under its "
        "recipe and folds, with --out FILE (a file of your own); compare with `kt leaderboard "
        "results/NAME.json FILE --pairs M:dkt ...`",
    )


def _hint_adopt(study: Study, keys: set[str], out, training: bool) -> None:
    """Say how many runs left are finished in other studies, which `adopt` would take (`keys`:
    the study's planned run keys)."""
    n = 0 if out else len(adoptable(study, STUDIES, planned=keys))
    if n:
        then = " (this run trains them again)" if training else ""
        print(f"  {n} run(s) left here are finished in other studies{then}: `kt study adopt "
              f"{study.name}` takes them instead")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("render", help="the README block of a study, from its results file")
    r.add_argument("name", choices=sorted(STUDIES))
    r.add_argument("--out", default=None, help="results file (default results/<name>.json)")
    r.add_argument(
        "--summary",
        action="store_true",
        help="the short table (model x dataset) of the README's <!-- study:NAME:summary --> block",
    )
    r.add_argument(
        "--write",
        action="store_true",
        help="replace the study's <!-- study:NAME --> blocks in README.md and docs/*.md",
    )
    k = sub.add_parser(
        "park", help="copy its unfinished runs' epoch checkpoints into results/inflight/ (commit "
        "them: the next session resumes them)",
    )  # fmt: skip
    k.add_argument("name", choices=sorted(STUDIES))
    k.add_argument("--out", default=None, help="results file (default results/<name>.json)")
    _add_argument(k)
    t = sub.add_parser(
        "retire", help="move rows a code fix made wrong (same run keys) to results/retired/, "
        "with why; the study then runs them again",
    )  # fmt: skip
    t.add_argument("name", choices=sorted(STUDIES))
    t.add_argument("--models", nargs="+", default=None, metavar="MODEL")
    t.add_argument("--datasets", nargs="+", default=None, metavar="DATASET")
    t.add_argument("--before", default=None, help="only rows dated before this ISO time (UTC)")
    t.add_argument("--reason", required=True, help="why (stored with each row)")
    t.add_argument("--stale-presets", action="store_true",
                   help="only rows made under another version of their preset")  # fmt: skip
    t.add_argument("--dry-run", action="store_true", help="list the rows, move nothing")
    t.add_argument("--data-root", default=str(DATA_ROOT))
    d = sub.add_parser(
        "adopt", help="take into the study's file the runs it plans that other studies have "
        "finished (the same run key: the same run), instead of training them again",
    )  # fmt: skip
    d.add_argument("name", choices=sorted(STUDIES))
    d.add_argument(
        "--from", dest="sources", nargs="+", default=None, metavar="STUDY",
        choices=sorted(STUDIES), help="only these studies' runs (default: every other one)",
    )  # fmt: skip
    d.add_argument("--dry-run", action="store_true", help="list the runs, write nothing")
    d.add_argument("--data-root", default=str(DATA_ROOT))
    for cmd in ("status", "run"):
        s = sub.add_parser(cmd)
        s.add_argument("name", choices=sorted(STUDIES))
        s.add_argument("--data-root", default=str(DATA_ROOT))
        s.add_argument("--out", default=None, help="results file (default results/<name>.json)")
        s.add_argument(
            "--device", default="cpu", help="run on it; status: ETAs from runs made on its kind"
        )
        if cmd == "run":
            ExecConfig.add_arguments(s)
        s.add_argument(
            "--first",
            type=int,
            default=None,
            metavar="N",
            help="only each cell's first N folds (seeds): every cell gets them before any "
            "gets more",
        )
        _add_argument(s)
        for flag, what in (("--models", "model"), ("--datasets", "dataset")):
            s.add_argument(
                flag,
                nargs="+",
                default=None,
                metavar=what.upper(),
                help=f"only these {what}s' cells (as status lists them); the others are left",
            )
    a = p.parse_args(argv)
    if a.cmd == "list":
        head = ("study", "done", "left", "CPU-h left", "GPU-h left")
        print("{:14s} {:>5s} {:>5s} {:>10s} {:>10s}  question".format(*head))
        done = {name: status(s) for name, s in STUDIES.items()}
        pool = [r for rows, _, _ in done.values() for r in rows]
        for s in STUDIES.values():
            rows, left, _ = done[s.name]
            eta = [kind_hours(rows, left, kind, pool) for kind in ("cpu", "gpu")]
            print(f"{s.name:14s} {len(rows):5d} {len(left):5d} {eta[0]:>10s} {eta[1]:>10s}  "
                  f"{s.question}")  # fmt: skip
        print("(hours from the study's finished runs on that kind of device; '~': from the other "
              "studies' runs on one, by cell, model or all; '?': none has run on one)")  # fmt: skip
        return
    study = declared = get(a.name)
    if a.cmd == "retire":
        try:
            flying = retired_in_flight(study, a.models, a.datasets, data_root=a.data_root)
            moved = retire(study, a.models, a.datasets, a.reason, a.before, dry_run=a.dry_run,
                           data_root=a.data_root, flying=flying,
                           stale_presets=a.stale_presets)  # fmt: skip
        except ValueError as e:
            p.error(str(e))
        for name in flying:  # they may hold the old code's epochs
            print(f"{'would drop' if a.dry_run else 'dropped'} the epoch checkpoint of {name}")
        for r in moved:
            print(
                f"{'would retire' if a.dry_run else 'retired'} {r['dataset']} {r['model']} "
                f"fold={r.get('fold')} seed={r.get('seed')} {r.get('date')} {r.get('device_name')}"
            )
        where = (
            f" -> results/retired/{study.name}.json: commit it, the study's file and "
            f"results/inflight/{study.name}/ (parked pairs of these runs removed)"
        )
        print(f"{len(moved)} row(s){where if moved and not a.dry_run else ''}")
        copies = adopted_copies(study.name, [r["run_key"] for r in moved], STUDIES)
        for other, n in sorted(copies.items()):  # `kt study adopt` took them there
            print(f"{other} holds {n} adopted copy(ies) of these runs: retire them there too "
                  f"(`kt study retire {other} ...`)")  # fmt: skip
        return
    if a.cmd == "adopt":
        try:
            rows, dropped = adopt(study, STUDIES, a.data_root, sources=a.sources, dry_run=a.dry_run)
        except ValueError as e:
            p.error(str(e))
        for r in rows:
            print(f"{'would adopt' if a.dry_run else 'adopted'} {r['dataset']} {r['model']} "
                  f"fold={r.get('fold')} seed={r.get('seed')} from {r['adopted_from']} "
                  f"({r.get('device_name')}, {r.get('date')})")  # fmt: skip
        for name in dropped:
            print(f"dropped the epoch checkpoint of {name} (here and in results/inflight/)")
        where = "" if a.dry_run or not rows else f" -> results/{study.path.name}: commit it"
        if dropped:
            where += f" and results/inflight/{study.name}/"
        print(f"{len(rows)} run(s){where}")
        return
    if getattr(a, "add", None):
        if not a.out or Path(a.out).resolve() == study.path.resolve():
            p.error(f"--add: give --out FILE, a file of your own (results/{study.name}.json holds "
                    "the study's declared rows only)")  # fmt: skip
        models, datasets = getattr(a, "models", None), getattr(a, "datasets", None)
        if set(models or ()) - set(a.add):
            p.error("with --add, --models may name added models only")
        try:  # the added models' cells only (--models narrows further): the study's own rows
            # are in its results file, not in --out
            study = study.adding(a.add).only(models or a.add, datasets)
        except ValueError as e:
            p.error(str(e))
    if getattr(a, "first", None) is not None:
        if a.first < 1:
            p.error(f"--first {a.first}: must be >= 1")
        study = study.first(a.first)
    if getattr(a, "models", None) or getattr(a, "datasets", None):
        try:
            study = study.only(a.models, a.datasets)
        except ValueError as e:
            p.error(str(e))
    if a.cmd == "park":
        finished = {checkpoint_name(k) for k in finished_runs(a.out or study.path)}
        # parked runs outside the plan are removed (their key changed): the whole declared plan
        # (and the added models'), not the narrowed one, or --first/--models/--add would remove
        # the study's other parked runs
        whole = declared.adding(a.add) if getattr(a, "add", None) else declared
        planned = {checkpoint_name(p_["key"]) for p_ in whole.plan()}
        kept, big = park(study.name, finished, planned=planned)
        for r in kept:
            print(f"parked {r.line()}")
        for r in big:
            print(f"not parked (over the {MAX_MB:g} MiB cap of a tracked file): {r.line()}")
        print(f"{len(kept)} run(s) in results/inflight/{study.name}/: commit them")
        return
    if a.cmd == "render":
        if a.write and a.out and Path(a.out).resolve() != study.path.resolve():
            p.error(f"--write puts the study of record's table into README.md and docs/*.md; "
                    f"--out {a.out} is another file: print its table without --write")  # fmt: skip
        text = (render_summary if a.summary else render)(study, a.out)
        if not a.write:
            print(text, end="")
            return
        pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        block = f"{study.name}:summary" if a.summary else study.name
        for page in write_blocks(block, text, pages):
            print(f"wrote {page.relative_to(ROOT)}")
        return
    if a.cmd == "run":  # before the data, the unparking and the first (failed) row
        try:
            check_device(a.device)
        except ValueError as e:
            p.error(str(e))
    pool = other_studies_runs(study.name)
    if a.out and Path(a.out).resolve() != study.path.resolve():  # the study's own rows price too
        pool += [r for r in read_runs(study.path) if not r.get("error")]
    # the cells the narrowed (--models, --datasets, --first) study plans; costs read every run
    keys = {p_["key"] for p_ in study.plan(a.data_root)}
    if a.cmd == "run":
        execution = ExecConfig.from_args(a)
        rows, left, eta = status(study, a.data_root, a.out, a.device, pool)
        done = sum(r.get("run_key") in keys for r in rows)
        print(f"{study.name}: {done} runs done, {len(left)} left; ETA {fmt_eta(eta)}")
        _hint_adopt(study, keys, a.out, training=True)
        run(study, a.data_root, a.device, execution, a.out, progress=sys.stderr.isatty())
    rows, left, eta = status(study, a.data_root, a.out, a.device, pool)
    mine = [r for r in rows if r.get("run_key") in keys]
    print(f"{study.name}: {len(mine)} runs done, {len(left)} left; ETA {fmt_eta(eta)}")
    print(f"{'dataset':14s} {'model':26s} {'done':>4s} {'left':>4s} {'min/run':>8s} {'h left':>7s}")
    kind = "gpu" if a.device.startswith("cuda") else "cpu"
    planned = {(r["dataset"], r["model"]) for r in mine} | {
        (p_["dataset"], p_["model"]) for p_ in left
    }
    for c in cells(rows, left, kind, pool, keys):
        if (c["dataset"], c["model"]) not in planned:
            continue
        cost = "-" if math.isnan(c["run_min"]) else f"{c['run_min']:.0f}"
        hours = "-" if math.isnan(c["hours_left"]) else f"{c['hours_left']:.1f}"
        print(f"{c['dataset']:14s} {c['model']:26s} {c['done']:4d} {c['left']:4d} {cost:>8s} "
              f"{hours:>7s}  {c['basis'] if c['left'] else ''}")  # fmt: skip
    _hint_adopt(study, keys, a.out, training=False)
    stale = stale_preset_rows(mine)
    for m, n in Counter(r["model"] for r in stale).items():
        what = sorted({c for r in stale if r["model"] == m for c in preset_changes(r)})
        fix = f"`kt study retire {study.name} --models {m} --stale-presets --reason ...`"
        print(f"  {n} {m} run(s) were made under another version of their preset "
              f"({'; '.join(what)}): {fix}")  # fmt: skip
    for p_ in left[:5]:
        print(f"  next: {p_['dataset']} {p_['model']} fold={p_['fold']} seed={p_['seed']}")
    here = {r.name: r for r in in_flight(study.name)}
    for r in here.values():  # an epoch checkpoint of this checkout (runs/checkpoints/)
        print(f"  in flight (here): {r.line()}")
    for r in parked(study.name):  # one in results/inflight/ that this checkout has not passed
        if r.name not in here or here[r.name].epoch < r.epoch:
            print(f"  in flight (parked): {r.line()}")


if __name__ == "__main__":
    main()
