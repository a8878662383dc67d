"""GPCM item calibration on OULAD: our MML estimator (kt_lib.reference_models.gpcm_mml) against
girth's (`pcm_mml`), item by item, on the same response matrix.

    python benchmarks/gpcm_crosscheck.py [--prepared-root data/prepared] [--bands 5 4]
        [--min-responses 20] [--girth-max-iteration 25] [--out FILE.json]

Data: the prepared OULAD folders PREPARED_ROOT/oulad_k{K}/pykt, which the `ordinal_oulad` study
makes on first use, or `python -m kt_lib.data prepare oulad ../shared/data/oulad
data/prepared/oulad_k5 --bands 5` (and `oulad_k4 --bands 4`). Students: every train_valid student
(all five folds; the held-out test.csv students are not read). Items: the assessments (pyKT's
`questions`), labelled by id_assessment and module/type. Matrix [students, items]: a student's
first answer to an item, -1 where they did not take it; later answers to the same item are left
out and counted (copies of a multi-skill row would count too; OULAD has one skill per item).

Items whose thresholds the data cannot identify (fewer than --min-responses responses, or a
category nobody reached) are dropped and listed with the reason; both estimators get the rest.
Ours: 41 Gauss-Legendre nodes on [-4.5, 4.5], N(0, 1), L-BFGS to a gradient below 1e-6. girth
0.8.0: the same grid by default, block-coordinate SLSQP per item within bounds alpha in [0.25, 4]
and thresholds in [-6, 6], stopping when no discrimination moves by 1e-3 or after
--girth-max-iteration outer iterations (its default 25); its iterations are counted by wrapping
its LatentPDF, which it calls once per iteration. Both estimates are scored with our marginal
log-likelihood (the same model and grid), so a gap says which is nearer the maximum.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from kt_lib.data.dataset import KTDataset
from kt_lib.data.formats.pykt import read_pykt
from kt_lib.fileio import save_json
from kt_lib.provenance import cpu_cores, device_name, git_commit, versions
from kt_lib.reference_models.gpcm_mml import MISSING, fit_gpcm_mml, marginal_log_likelihood
from kt_lib.runs.studies import PREPARED

try:  # a dev-extra dependency: without it the script still reports our own estimates
    import girth

    # the module, not the function of the same name its package re-exports
    girth_pcm = importlib.import_module("girth.unidimensional.polytomous.pcm_mml")
    GIRTH_VERSION = importlib.metadata.version("girth")
except ImportError:
    girth = girth_pcm = None
    GIRTH_VERSION = "-"


def response_matrix(dataset: KTDataset) -> tuple[np.ndarray, int]:
    """[students, items] first answers (-1: not taken) of a dataset with problem ids, one row per
    student (a student's windows merged by raw uid), and the count of later answers left out."""
    if dataset.num_pid == 0:
        raise ValueError(f"{dataset.name}: no problem ids (pyKT's `questions`), so no items")
    raw = dataset.meta.get("raw_uid", {})
    rows: dict = {}  # raw uid -> row
    for st in dataset.students:
        rows.setdefault(raw.get(st.uid, st.uid), len(rows))
    y = np.full((len(rows), dataset.num_pid), MISSING, dtype=np.int64)
    repeats = 0
    for st in dataset.students:
        row = y[rows[raw.get(st.uid, st.uid)]]
        pid, first = np.unique(st.pid, return_index=True)
        new = row[pid] == MISSING  # an earlier window may hold the first answer already
        row[pid[new]] = st.r[first[new]]
        repeats += len(st.pid) - int(new.sum())
    return y, repeats


def item_labels(folder: Path, dataset: KTDataset) -> list[dict]:
    """id_assessment (from keyid2idx.json) and module/type of each item index."""
    keys = json.loads((folder / "keyid2idx.json").read_text())
    assessment = {v: k for k, v in keys["questions"].items()}
    skill = {v: k for k, v in keys["concepts"].items()}
    skill_of = {}
    for st in dataset.students:
        skill_of.update(zip(st.pid.tolist(), st.q.tolist(), strict=True))
    return [
        {"assessment": assessment.get(i), "skill": skill.get(skill_of.get(i))}
        for i in range(dataset.num_pid)
    ]


def run_girth(y: np.ndarray, K: int, max_iteration: int) -> dict:
    """girth's pcm_mml on y [students, items] (0..K-1, -1 missing): estimates, seconds,
    iterations, or the error it raised."""
    if girth is None:
        return {"error": "girth is not installed (pip install 'girth>=0.8', the dev extra)"}
    seen = []

    class CountingPDF(girth_pcm.LatentPDF):
        def __call__(self, unweighted_integration, iteration):
            seen.append(iteration)
            return super().__call__(unweighted_integration, iteration)

    # girth takes [items, students] and marks a missing cell with INVALID_RESPONSE
    data = girth.tag_missing_data(y.T, list(range(K)))
    t0 = time.perf_counter()
    try:
        with mock.patch.object(girth_pcm, "LatentPDF", CountingPDF):
            est = girth_pcm.pcm_mml(data, {"max_iteration": max_iteration})
    except Exception as e:  # noqa: BLE001 -- a failure is a finding: recorded, ours still reported
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
    return {
        "seconds": time.perf_counter() - t0,
        "iterations": len(seen),
        "hit_max_iteration": len(seen) >= max_iteration,
        "alpha": est["Discrimination"],
        "thresholds": est["Difficulty"],
    }


def _r(x, nd: int = 4):
    return np.round(np.asarray(x, dtype=float), nd).tolist()


def crosscheck(folder: Path, K: int, min_responses: int, girth_max_iteration: int) -> dict:
    """Both calibrations of one prepared OULAD folder, their agreement and their costs."""
    dataset = read_pykt(folder, "train_valid")
    if dataset.K != K:
        raise SystemExit(f"{folder}: K={dataset.K}, expected {K}")
    y, repeats = response_matrix(dataset)
    labels = item_labels(folder, dataset)
    t0 = time.perf_counter()
    ours = fit_gpcm_mml(y, K, min_responses=min_responses, drop_unidentified=True)
    ours_s = time.perf_counter() - t0
    kept = ours.items.numpy()
    yk = y[:, kept]
    g = run_girth(yk, K, girth_max_iteration)
    a, b = ours.alpha.numpy(), ours.thresholds.numpy()
    out = {
        "K": K,
        "folder": str(folder),
        "students": int(y.shape[0]),
        "items": int(len(kept)),
        "responses": int((yk != MISSING).sum()),
        "repeats_left_out": repeats,
        "dropped": [{"item": i, **labels[i], "reason": why} for i, why in ours.dropped.items()],
        "ours": {
            "seconds": round(ours_s, 2),
            "iterations": ours.iterations,
            "converged": ours.converged,
            "log_likelihood": round(ours.log_likelihood, 3),
        },
        "girth": {k: v for k, v in g.items() if k not in ("alpha", "thresholds")},
    }
    items = [
        {"item": int(i), **labels[i], "responses": int((y[:, i] != MISSING).sum()),
         "ours": {"alpha": _r(a[j]), "thresholds": _r(b[j])}}
        for j, i in enumerate(kept)
    ]  # fmt: skip
    if "alpha" in g:
        ga, gb = np.asarray(g["alpha"]), np.asarray(g["thresholds"])
        out["girth"]["seconds"] = round(g["seconds"], 2)
        out["girth"]["log_likelihood"] = round(marginal_log_likelihood(yk, ga, gb), 3)
        da, db = np.abs(a - ga), np.abs(b - gb)
        at_bounds = (np.isclose(ga, 0.25) | np.isclose(ga, 4.0)) | np.isclose(np.abs(gb), 6).any(1)
        out["agreement"] = {
            "alpha_max_abs_diff": round(float(da.max()), 4),
            "alpha_mean_abs_diff": round(float(da.mean()), 4),
            "alpha_corr": round(float(np.corrcoef(a, ga)[0, 1]), 4),
            "thresholds_max_abs_diff": round(float(db.max()), 4),
            "thresholds_mean_abs_diff": round(float(db.mean()), 4),
            "thresholds_median_abs_diff": round(float(np.median(db)), 4),
            "thresholds_corr": round(float(np.corrcoef(b.ravel(), gb.ravel())[0, 1]), 4),
            "items_threshold_diff_over_0.1": int((db.max(1) > 0.1).sum()),
            "girth_items_at_bounds": [int(kept[j]) for j in np.flatnonzero(at_bounds)],
        }
        for j, row in enumerate(items):
            row["girth"] = {"alpha": _r(ga[j]), "thresholds": _r(gb[j])}
            row["max_abs_diff"] = round(float(max(da[j], db[j].max())), 4)
    out["per_item"] = items
    return out


def table(res: dict) -> str:
    o, g, ag = res["ours"], res["girth"], res.get("agreement")
    lines = [
        f"K={res['K']}: {res['items']} items ({len(res['dropped'])} dropped), "
        f"{res['students']} students, {res['responses']} responses",
        f"  ours : {o['seconds']:8.1f} s, {o['iterations']} iterations, converged "
        f"{o['converged']}, log L {o['log_likelihood']:.1f}",
    ]
    if ag is None:
        return "\n".join(lines + [f"  girth: {g.get('error')}"])
    lines += [
        f"  girth: {g['seconds']:8.1f} s, {g['iterations']} iterations (cap hit: "
        f"{g['hit_max_iteration']}), log L {g['log_likelihood']:.1f}",
        f"  alpha      |diff| max {ag['alpha_max_abs_diff']:.3f} mean "
        f"{ag['alpha_mean_abs_diff']:.3f}, corr {ag['alpha_corr']:.4f}",
        f"  thresholds |diff| max {ag['thresholds_max_abs_diff']:.3f} mean "
        f"{ag['thresholds_mean_abs_diff']:.3f}, corr {ag['thresholds_corr']:.4f}",
    ]
    worst = sorted(res["per_item"], key=lambda r: -r["max_abs_diff"])[:5]
    for r in worst:
        lines.append(
            f"    item {r['item']:3d} {r['skill']:9s} n={r['responses']:5d} "
            f"alpha {r['ours']['alpha']:.2f}/{r['girth']['alpha']:.2f} "
            f"thresholds {r['ours']['thresholds']} / {r['girth']['thresholds']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prepared-root", default=str(PREPARED), help="holds oulad_k{K}/pykt")
    p.add_argument("--bands", type=int, nargs="+", choices=(5, 4), default=[5, 4], help="K")
    p.add_argument("--min-responses", type=int, default=20)
    p.add_argument("--girth-max-iteration", type=int, default=25)
    p.add_argument("--out", default="benchmarks/results/gpcm_crosscheck.json")
    a = p.parse_args(argv)
    for K in a.bands:
        folder = Path(a.prepared_root) / f"oulad_k{K}" / "pykt"
        if not (folder / "train_valid.csv").is_file():
            p.error(
                f"{folder}: no prepared OULAD K={K}; make it with `python -m kt_lib.data prepare "
                f"oulad ../shared/data/oulad {folder.parent} --bands {K}`"
            )
    report = {
        "command": " ".join(["python", *sys.argv]),
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device_name": device_name("cpu"),
        "cpu_cores": cpu_cores(),
        "torch_threads": torch.get_num_threads(),
        "versions": {**versions(), "girth": GIRTH_VERSION},
        "students": "train_valid.csv, all five folds (test.csv not read)",
        "results": [],
    }
    for K in a.bands:
        folder = Path(a.prepared_root) / f"oulad_k{K}" / "pykt"
        res = crosscheck(folder, K, a.min_responses, a.girth_max_iteration)
        print(table(res), flush=True)
        report["results"].append(res)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        save_json(a.out, report)  # after each K: a cut-off run keeps what finished


if __name__ == "__main__":
    main()
