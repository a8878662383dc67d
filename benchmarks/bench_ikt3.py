"""iKT3 on the simulator: parameter recovery, AUC and time of a modest run (JSON to stdout/--out).

    python benchmarks/bench_ikt3.py [--epochs 6 --warmup 2 --lr 1e-2 --preset tiny]

Reports Spearman(learned beta, true beta), Spearman(learned beta, beta_IRT), Spearman(mean theta per
student, true theta) on train and held-out test students, the reference's own recovery, the loss
terms of the first and last epoch, test AUC and seconds (reference fit, training, per epoch).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from scipy.stats import spearmanr

from kt_lib.checkpoint import save_json
from kt_lib.data import load_bundle
from kt_lib.models import build_model
from kt_lib.models.ikt3 import ikt3_traces, student_abilities
from kt_lib.train import evaluate, fit


def rho(a, b) -> float:
    return round(float(spearmanr(a, b)[0]), 4)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-students", type=int, default=1000)
    p.add_argument("--seq-len", type=int, default=100)
    p.add_argument("--emission", default="hybrid")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lambda-target", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    bundle = load_bundle(
        data_format="synthetic",
        seed=a.seed,
        num_students=a.num_students,
        seq_len=a.seq_len,
        emission=a.emission,
    )
    truth = bundle.truth
    torch.manual_seed(a.seed)
    model = build_model(
        "ikt3",
        dataset=bundle.train,
        preset=a.preset,
        max_len=a.seq_len,
        warmup=a.warmup,
        lambda_target=a.lambda_target,
    )
    t0 = time.perf_counter()
    model.prepare(bundle.train)
    ref_s = time.perf_counter() - t0
    res = fit(
        model,
        bundle.train,
        bundle.valid,
        epochs=a.epochs,
        patience=a.epochs,
        lr=a.lr,
        batch_size=a.batch_size,
        max_len=a.seq_len,
        seed=a.seed,
        device=a.device,
        progress=False,
    )
    model = res.model.cpu()
    ref = model.reference
    beta = model.skill_beta().detach().numpy()
    out = {
        "args": vars(a),
        "params": sum(x.numel() for x in model.parameters()),
        "reference_fit_seconds": round(ref_s, 2),
        "train_seconds": round(res.seconds, 1),
        "epoch_seconds": round(float(res.history["train_seconds"].mean()), 2),
        "best_epoch": res.best_epoch,
        "test_auc": round(evaluate(model, bundle.test)["auc"], 4),
        "rho_beta_learned_true": rho(beta, truth.beta),
        "rho_beta_learned_ref": rho(beta, ref.beta.numpy()),
        "rho_beta_ref_true": rho(ref.beta.numpy(), truth.beta),
        "rho_theta_ref_true": rho(ref.theta.numpy(), truth.theta[ref.uids.numpy()]),
    }
    for split, data in (("train", bundle.train), ("test", bundle.test)):
        ab = student_abilities(ikt3_traces(model, data))
        out[f"rho_mean_theta_true_{split}"] = rho(ab["mean_theta"], truth.theta[ab["uid"]])
    terms = ["train_bce", "train_l_21", "train_l_22", "train_l_23", "train_lambda", "valid_auc"]
    h = res.history
    out["first_epoch"] = {k: round(float(h[k].iloc[0]), 4) for k in terms}
    out["last_epoch"] = {k: round(float(h[k].iloc[-1]), 4) for k in terms}
    print(json.dumps(out, indent=2))
    if a.out:
        save_json(a.out, out)
    return out


if __name__ == "__main__":
    main()
