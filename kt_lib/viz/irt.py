"""Plots for IRT-aligned models (iKT3): difficulty and ability recovery, mastery, loss schedule.

Inputs are arrays and the DataFrames of `kt_lib.models.ikt3.ikt3_traces` / `student_abilities`
(one row per valid step: uid, step, skill, r, p, theta, beta, mastery, beta_ref, theta_ref, m_ref).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import spearmanr

LOSS_TERMS = ("bce", "l_21", "l_22", "l_23")


def spearman(a, b) -> float:
    """Spearman correlation of two 1-D arrays (NaN pairs dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok])[0]) if ok.sum() > 2 else float("nan")


def scatter_recovery(x, y, xlabel: str, ylabel: str, ax=None, title: str = "", **kw):
    """Scatter of y against x with the identity line and Spearman rho in the title."""
    ax = ax or plt.subplots(figsize=(4.2, 4))[1]
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ax.scatter(x, y, s=kw.pop("s", 18), alpha=kw.pop("alpha", 0.8), **kw)
    lo, hi = np.nanmin([x.min(), y.min()]), np.nanmax([x.max(), y.max()])
    ax.plot([lo, hi], [lo, hi], color="grey", ls=":", lw=1)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(f"{title}{' ' if title else ''}Spearman {spearman(x, y):.3f}", fontsize=10)
    return ax


def plot_beta_recovery(learned, beta_ref, beta_true=None, axes=None):
    """Learned skill difficulty against the reference's beta_IRT and (simulator) the true beta."""
    n = 2 if beta_true is not None else 1
    axes = axes if axes is not None else plt.subplots(1, n, figsize=(4.3 * n, 4))[1]
    axes = np.atleast_1d(axes)
    scatter_recovery(beta_ref, learned, "beta_IRT (reference)", "learned beta", axes[0])
    if beta_true is not None:
        scatter_recovery(beta_true, learned, "true beta (simulator)", "learned beta", axes[1])
    return axes


def plot_theta_recovery(abilities: pd.DataFrame, true_theta=None, theta_ref=None, axes=None):
    """Mean learned theta per student against the true ability and/or theta_IRT.

    `true_theta` / `theta_ref`: arrays aligned with `abilities` rows (NaN where unknown).
    """
    pairs = [
        (v, lab)
        for v, lab in ((true_theta, "true theta (simulator)"), (theta_ref, "theta_IRT (reference)"))
        if v is not None
    ]
    axes = (
        axes if axes is not None else plt.subplots(1, len(pairs), figsize=(4.3 * len(pairs), 4))[1]
    )
    axes = np.atleast_1d(axes)
    for ax, (v, lab) in zip(axes, pairs, strict=False):
        scatter_recovery(v, abilities["mean_theta"], lab, "mean learned theta", ax, s=8)
    return axes


def plot_theta_trajectories(
    traces: pd.DataFrame, uids=None, n: int = 4, true_theta=None, ax=None, seed: int = 0
):
    """theta_t along the sequence for a few students, with the reference's prefix ability
    (dashed) and the true ability (dotted, simulator); dots mark correct/incorrect responses."""
    ax = ax or plt.subplots(figsize=(9, 3.8))[1]
    if uids is None:
        all_uids = traces["uid"].unique()
        uids = np.random.default_rng(seed).choice(all_uids, min(n, len(all_uids)), replace=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, uid in enumerate(uids):
        t = traces[traces["uid"] == uid].sort_values("step")
        col = colors[i % len(colors)]
        ax.plot(t["step"], t["theta"], color=col, lw=1.5, label=f"student {uid}")
        if "theta_ref" in t and t["theta_ref"].notna().any():
            ax.plot(t["step"], t["theta_ref"], color=col, lw=1, ls="--", alpha=0.7)
        ax.scatter(
            t["step"],
            np.where(t["r"] == 1, 1.0, -1.0) * 0.15 + t["theta"],
            color=col,
            s=4,
            alpha=0.4,
        )
        if true_theta is not None:
            ax.axhline(float(true_theta[uid]), color=col, ls=":", lw=1)
    ax.set(
        xlabel="step",
        ylabel="theta",
        title="Ability trajectories (solid: learned theta_t, dashed: reference theta_hat_<t, "
        "dotted: truth)",
    )
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, ncol=min(len(uids), 4))
    return ax


def mastery_curves(traces: pd.DataFrame, max_opportunity: int = 20) -> pd.DataFrame:
    """Mean M_IRT, M_ref and observed correctness per skill by practice opportunity (1-based)."""
    t = traces.sort_values(["uid", "step"]).copy()
    t["opportunity"] = t.groupby(["uid", "skill"]).cumcount() + 1
    t = t[t["opportunity"] <= max_opportunity]
    return (
        t.groupby(["skill", "opportunity"])
        .agg(
            mastery=("mastery", "mean"),
            m_ref=("m_ref", "mean"),
            correct=("r", "mean"),
            n=("r", "size"),
        )
        .reset_index()
    )


def plot_mastery_curves(
    traces: pd.DataFrame,
    skills=None,
    n: int = 6,
    max_opportunity: int = 20,
    min_count: int = 5,
    axes=None,
):
    """Per skill: M_IRT (solid), the reference M_ref (dashed) and observed correctness (dots)
    against the practice opportunity. Default skills: the `n` most practised."""
    curves = mastery_curves(traces, max_opportunity)
    curves = curves[curves["n"] >= min_count]
    if skills is None:
        counts = traces["skill"].value_counts()
        skills = counts.index[:n].tolist()
    skills = list(skills)
    cols = min(3, len(skills))
    rows = int(np.ceil(len(skills) / cols))
    if axes is None:
        _, axes = plt.subplots(
            rows, cols, figsize=(3.6 * cols, 2.8 * rows), sharey=True, squeeze=False
        )
    axes = np.atleast_1d(axes).ravel()
    for ax, skill in zip(axes, skills, strict=False):
        c = curves[curves["skill"] == skill]
        ax.plot(c["opportunity"], c["mastery"], lw=1.8, label="M_IRT")
        ax.plot(c["opportunity"], c["m_ref"], ls="--", lw=1.2, label="M_ref")
        ax.scatter(c["opportunity"], c["correct"], s=10, color="k", alpha=0.5, label="correct")
        ax.set_title(f"skill {skill}", fontsize=10)
        ax.set_ylim(0, 1)
    for ax in axes[len(skills) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    for ax in axes[-cols:]:
        ax.set_xlabel("practice opportunity")
    return axes


def plot_loss_terms(history: pd.DataFrame, axes=None, terms=LOSS_TERMS):
    """Training loss terms per epoch (left) and the lambda schedule with validation AUC (right)."""
    axes = axes if axes is not None else plt.subplots(1, 2, figsize=(10, 3.6))[1]
    for term in terms:
        col = f"train_{term}"
        if col in history:
            axes[0].plot(history["epoch"], history[col], marker="o", ms=3, label=term)
    axes[0].set(xlabel="epoch", ylabel="loss", title="loss terms (train, per epoch)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    if "train_lambda" in history:
        axes[1].plot(
            history["epoch"], history["train_lambda"], color="C4", marker="o", ms=3, label="lambda"
        )
    axes[1].set(xlabel="epoch", ylabel="lambda", title="lambda warm-up and validation AUC")
    axes[1].set_ylim(0, 1)
    if "valid_auc" in history:
        twin = axes[1].twinx()
        twin.plot(
            history["epoch"], history["valid_auc"], color="C2", marker="s", ms=3, label="valid AUC"
        )
        twin.set_ylabel("valid AUC")
        lines = axes[1].get_lines() + twin.get_lines()
        axes[1].legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="lower right")
    return axes
