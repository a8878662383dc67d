"""The evidence studies of record: named, typed plans whose runs land in `results/<name>.json`.

    kt study list
    kt study status simakt                  # done / left per cell, ETA
    kt study run simakt [--data-root ../shared/data] [--device cuda]
                                        [--workers 4] [--threads 1]
    kt study render simakt                   # the README's block, from the file
    kt study render simakt --write           # ... written into README.md and docs/*.md
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
from pathlib import Path

from ..provenance import ROOT
from .cost import cells, fmt_eta, kind_hours, run_cost
from .execute import ExecConfig
from .leaderboard import checkpoint_name, run_plan
from .parking import PARKED, in_flight, park, parked, price_in_flight, unpark
from .results import finished_runs, read_runs
from .study import CHECKPOINTS, DATA_ROOT, PREPARED, RESULTS, Part, Study  # noqa: F401
from .study_render import render, render_summary, write_blocks
from .tuned import add_tuned_rows

_SIMAKT = {
    "simakt_no_inter": {"model": "simakt", "similarity": "no_inter_student"},
    "simakt_pwd": {"model": "simakt", "similarity": "position_weighted_dual"},
    "simakt_cluster_only": {"model": "simakt", "similarity": "cluster_only"},
    "simakt_knn_only": {"model": "simakt", "similarity": "knn_only"},
}
A09, ALG05 = ("assist2009", "line3"), ("algebra05", "auto")
A15, STATICS = ("assist2015", "pykt"), ("statics2011", "line3")
# the field's baselines (the baselines study), cheapest first on CPU
_BASELINE_VARIANTS = {
    "sparsekt_topk": {"model": "sparsekt", "selection": "topk", "k": 5},
    "sparsekt_soft": {"model": "sparsekt", "selection": "soft", "ratio": 0.8},
    # pyKT's sparsekt.py reweights the kept keys by a second softmax of their probabilities
    "sparsekt_topk_pykt": {"model": "sparsekt", "selection": "topk", "k": 5, "reweight": "softmax"},
    # ATKT at pyKT's sizes (kt_config.json: 80/80/80, dropout 0.2) beside the authors' sizes
    "atkt_pykt": {"model": "atkt", "dropout": 0.2}
    | {f"{part}_dim": 80 for part in ("skill", "answer", "hidden", "attention")},
    # extraKT and RobustKT (4 blocks) collapsed at the recipe's 1e-3 on ASSIST2015 (see
    # docs/baselines.md): the same models at 1e-4 (RobustKT's authors' rate) test why
    "extrakt_lr1e-4": {"model": "extrakt", "lr": 1e-4},
    "robustkt_lr1e-4": {"model": "robustkt", "lr": 1e-4},
    # sparseKT at pyKT's training script's rate (wandb_sparsekt_train.py: 1e-4): its gap?
    "sparsekt_topk_lr1e-4": {"model": "sparsekt", "selection": "topk", "k": 5, "lr": 1e-4},
    # SKVMN with pyKT's in-place hidden-state write: does that defect explain SKVMN's gap?
    "skvmn_pykt_write": {"model": "skvmn", "hidden_overwrite": True},
    # DKVMN peaked at epoch 29 of the recipe's 30 on the DKVMN paper's splits: a longer cap
    "dkvmn_epochs100": {"model": "dkvmn", "epochs": 100},
}
# the baselines study's diagnostics: rows that test a reproduction, not the leaderboard's models
_DIAGNOSTICS = ("atkt_pykt", "sparsekt_topk_pykt", "extrakt_lr1e-4", "robustkt_lr1e-4")
_DIAGNOSTICS += ("skvmn_pykt_write", "sparsekt_topk_lr1e-4", "dkvmn_epochs100")
SKILL_BASELINES = (
    "deep_irt",
    "dkvmn",
    "atkt",
    "simplekt",
    "atkt_pykt",
    "sparsekt_topk",
    "sparsekt_soft",
    "skvmn",
    "saint",
    # a diagnostic (does pyKT's second softmax explain sparseKT's gap?), half-run: its checkpoint
    # is at epoch 15
    "sparsekt_topk_pykt",
    "folibikt",
    "gkt",
    "stablekt",
    "cl4kt",
    # the optional ones
    "kqn",
    "dkt_plus",
    # the "as time allows" ones, appended last: the order of the runs before them is unchanged
    "extrakt",
    "robustkt",
    "extrakt_lr1e-4",
    "robustkt_lr1e-4",
    "skvmn_pykt_write",
    "sparsekt_topk_lr1e-4",
)
PID_BASELINES = ("qdkt", "dimkt", "atdkt", "iekt", "rekt")
# the seeds' own questions, asked again on the leaderboard's folds: SimAKT against its
# DTransformer base (seed 000), iDKT against AKT (seeds 001/003) are among the pairs against AKT
_SEED_QUESTIONS = (("simakt", "dtransformer"),)
# extraKT and RobustKT collapse at the recipe's 1e-3 and train normally at 1e-4 (ASSIST2015,
# docs/baselines.md): the leaderboard runs them at 1e-4, under labels that say so
_AT_OWN_RATE = {"extrakt": "extrakt_lr1e-4", "robustkt": "robustkt_lr1e-4"}
# the leaderboard's skill-level baselines: the study's rows less its diagnostics
_LEADERBOARD_BASELINES = tuple(
    _AT_OWN_RATE.get(m, m) for m in SKILL_BASELINES if m not in _DIAGNOSTICS
)
# seed 002's plug-in mechanisms one at a time (ModularAttentionGPCM with a single mechanism)
_MECHANISMS_ALONE = {
    f"only_{m}": {"model": "modular_attention_gpcm", "mechanisms": [m]}
    for m in (
        "ordinal_aware",
        "response_conditioned",
        "ordinal_pattern",
        "qwk_aligned",
        "hierarchical_ordinal",
    )
}
# today's models beyond the three classic baselines, in the order the leaderboard fills them
_SEED_MODELS = (
    "idkt",
    "ikt3",
    "dtransformer",
    "simakt",
    "attention_gpcm",
    "modular_attention_gpcm",
)


# bf16 autocast rows of the precision study (the rest of the recipe as every row's)
_BF16 = {f"{m}_bf16": {"model": m, "precision": "bf16"} for m in ("akt", "sakt")}


# the studies as declared; STUDIES adds the tuned rows of any tuning file in results/
DECLARED = {
    s.name: s
    for s in [
        Study(
            name="simakt",
            question="Seed 000: do inter-student heads beat the intra-only baseline? Five folds "
            "(seeds on algebra05) on four datasets, AUC by history position",
            # the first part is the 30 runs of record (folds 1-3 / seeds 0-2 on one H100): its
            # keys are unchanged, the runs beyond fill in
            parts=(
                Part((A09, ALG05), ("dtransformer", *_SIMAKT)),
                Part((STATICS, A15), ("dtransformer", *_SIMAKT)),
            ),
            variants=_SIMAKT,
            # Statics2011's folds hold 176-193 training students, 88-97 a bank fold: too few
            # for the presets' 100 clusters (a variant's similarity is built as given), so 30
            # there, as the full profile does (notebooks/params/full.yaml)
            dataset_overrides={
                "statics2011": {
                    "simakt_pwd": {
                        "similarity": {"base": "position_weighted_dual", "n_clusters": 30}
                    },
                    "simakt_cluster_only": {
                        "similarity": {"base": "cluster_only", "n_clusters": 30}
                    },
                }
            },
            pairs=(
                *(
                    (v, base)
                    for v in ("simakt_pwd", "simakt_cluster_only", "simakt_knn_only")
                    for base in ("dtransformer", "simakt_no_inter")
                ),
                ("simakt_no_inter", "dtransformer"),
            ),
            folds=5,
            seeds=(0, 1, 2, 3, 4),
            filling=True,
            breakdown=True,
            pair_breakdown=True,
        ),
        Study(
            name="pairs",
            question="Seeds 001/003 and iKT3: iDKT vs AKT; iKT3 vs iKT3 without its reference",
            parts=(Part((A09, ALG05), ("akt", "idkt", "ikt3", "ikt3_lambda0")),),
            variants={"ikt3_lambda0": {"model": "ikt3", "lambda_target": 0.0}},
            overrides={"ikt3": {"warmup": 10}},
            pairs=(("idkt", "akt"), ("ikt3", "ikt3_lambda0")),
        ),
        Study(
            name="ordinal",
            question="Seed 002: does the plug-in ordinal attention help at K = 2?",
            parts=(Part((A09,), ("attention_gpcm", "modular_attention_gpcm")),),
            pairs=(("modular_attention_gpcm", "attention_gpcm"),),
        ),
        Study(
            name="base",
            question="The base leaderboard beside the published figures",
            parts=(
                Part((("statics2011", "line3"), ("assist2015", "pykt")), ("dkt", "sakt", "akt")),
                Part((A09, ALG05), ("dkt", "sakt")),
            ),
            pairs=(("sakt", "dkt"),),
        ),
        Study(
            name="baselines",
            question="The field's baselines under pyKT's protocol: ASSIST2015 fold 0 beside "
            "pyKT's published figures; the problem-id models on algebra05",
            # algebra05 first: its five runs cost minutes each where an ASSIST2015 run costs an
            # hour, and three of them are required (qDKT, DIMKT, AT-DKT)
            parts=(
                Part((ALG05,), PID_BASELINES),
                Part((A15,), SKILL_BASELINES),
                # was the cap the limit? fold 1 of the leaderboard's DKVMN cells, capped at 100
                Part((STATICS, A09), ("dkvmn_epochs100",)),
            ),
            variants=_BASELINE_VARIANTS,
            folds=1,
            seeds=(0,),
            filling=True,
            published=True,
        ),
        Study(
            name="ordinal_oulad",
            question="Seed 002 on real graded data: OULAD at K = 5 and K = 4 (the Open "
            "University's grade bands), AttentionGPCM, the plug-in mechanisms, an ordinal DKT; "
            "binary DKT and AKT on the pass/fail banding (K = 2) beside the ordinal models' "
            "pass/fail AUC (test_auc_ge1)",
            parts=(
                Part(
                    (("oulad_k5", "pykt"), ("oulad_k4", "pykt")),
                    ("dkt_gpcm", "attention_gpcm", "modular_attention_gpcm", "gpcm_irt"),
                ),
                Part((("oulad_k2", "pykt"),), ("dkt", "akt")),
                Part((("oulad_k5", "pykt"), ("oulad_k4", "pykt")), tuple(_MECHANISMS_ALONE)),
            ),
            variants=_MECHANISMS_ALONE,
            pairs=(
                ("modular_attention_gpcm", "attention_gpcm"),
                ("attention_gpcm", "dkt_gpcm"),
                ("dkt_gpcm", "gpcm_irt"),
                *((m, "attention_gpcm") for m in _MECHANISMS_ALONE),
            ),
            folds=5,
            prepare={
                "oulad_k5": ("oulad", "oulad", {"bands": 5}),
                "oulad_k4": ("oulad", "oulad", {"bands": 4}),
                "oulad_k2": ("oulad", "oulad", {"bands": 2}),
            },
            filling=True,
        ),
        Study(
            name="precision",
            question="bf16 autocast against fp32 on a CPU with bf16 instructions: does training "
            "in bf16 move test AUC? (the same folds, paired; the step ratios in "
            "benchmarks/results/precision_cpu.json)",
            parts=(Part((STATICS,), ("akt", "akt_bf16", "sakt", "sakt_bf16")),),
            variants=_BF16,
            pairs=tuple((f"{m}_bf16", m) for m in ("akt", "sakt")),
            filling=True,
        ),
        Study(
            name="leaderboard",
            question="Every model under each dataset's published protocol (five folds / seeds)",
            parts=(
                Part((ALG05, STATICS), ("dkt", "sakt", "akt")),
                Part((ALG05, STATICS), _SEED_MODELS),
                Part((A09, A15), ("dkt", "sakt", "akt")),
                # the field's baselines after every cell above: the problem-id models on
                # algebra05 alone, the others on the small datasets before the large
                Part((ALG05,), PID_BASELINES),
                Part((ALG05, STATICS), _LEADERBOARD_BASELINES),
                Part((A09, A15), _LEADERBOARD_BASELINES),
            ),
            variants=_BASELINE_VARIANTS,
            pairs=(
                *(
                    (m, b)
                    for m in ("sakt", "akt", *_SEED_MODELS, *PID_BASELINES, *_LEADERBOARD_BASELINES)
                    for b in ("dkt", "akt")
                    if m != b
                ),
                *_SEED_QUESTIONS,
            ),
            breakdown_pairs=_SEED_QUESTIONS,
            folds=5,
            seeds=(0, 1, 2, 3, 4),
            filling=True,
            published=True,
            breakdown=True,
        ),
    ]
}


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
        price_in_flight(study.name, study.epochs, left)
    cost = sum(
        p.get("in_flight", run_cost(rows, p["dataset"], p["model"], kind, pool, p.get("base"))[0])
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
            s.add_argument("--threads", type=int, default=None, help="torch threads (one worker)")
        s.add_argument(
            "--first",
            type=int,
            default=None,
            metavar="N",
            help="only each cell's first N folds (seeds): every cell gets them before any "
            "gets more",
        )
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
    study = get(a.name)
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
        planned = {checkpoint_name(p_["key"]) for p_ in study.plan()}
        kept, big = park(study.name, finished, planned=planned)
        for r in kept:
            print(f"parked {r.line()}")
        for r in big:
            print(f"not parked (over the size cap): {r.line()}")
        print(f"{len(kept)} run(s) in results/inflight/{study.name}/: commit them")
        return
    if a.cmd == "render":
        text = (render_summary if a.summary else render)(study, a.out)
        if not a.write:
            print(text, end="")
            return
        pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        block = f"{study.name}:summary" if a.summary else study.name
        for page in write_blocks(block, text, pages):
            print(f"wrote {page.relative_to(ROOT)}")
        return
    pool = other_studies_runs(study.name)
    if a.cmd == "run":
        if a.threads:
            import torch

            torch.set_num_threads(a.threads)
        rows, left, eta = status(study, a.data_root, a.out, a.device, pool)
        print(f"{study.name}: {len(rows)} runs done, {len(left)} left; ETA {fmt_eta(eta)}")
        execution = ExecConfig.from_args(a)
        run(study, a.data_root, a.device, execution, a.out, progress=sys.stderr.isatty())
    rows, left, eta = status(study, a.data_root, a.out, a.device, pool)
    # the cells the narrowed (--models, --datasets, --first) study plans; costs read every run
    keys = {p_["key"] for p_ in study.plan(a.data_root)}
    mine = [r for r in rows if r.get("run_key") in keys]
    print(f"{study.name}: {len(mine)} runs done, {len(left)} left; ETA {fmt_eta(eta)}")
    print(f"{'dataset':14s} {'model':26s} {'done':>4s} {'left':>4s} {'min/run':>8s} {'h left':>7s}")
    kind = "gpu" if a.device.startswith("cuda") else "cpu"
    planned = {(r["dataset"], r["model"]) for r in mine} | {
        (p_["dataset"], p_["model"]) for p_ in left
    }
    for c in cells(rows, left, kind, pool):
        if (c["dataset"], c["model"]) not in planned:
            continue
        cost = "-" if math.isnan(c["run_min"]) else f"{c['run_min']:.0f}"
        hours = "-" if math.isnan(c["hours_left"]) else f"{c['hours_left']:.1f}"
        print(f"{c['dataset']:14s} {c['model']:26s} {c['done']:4d} {c['left']:4d} {cost:>8s} "
              f"{hours:>7s}  {c['basis'] if c['left'] else ''}")  # fmt: skip
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
