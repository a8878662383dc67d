"""Ordinal KT analysis: GPCM parameter recovery tables, confusion matrix, per-category F1,
parameter-recovery plots, mechanism maps.

# B batch, H heads, L query steps, S key steps, K categories, C concepts
Metric names (kt_lib.metrics.ordinal_metrics): `acc` is exact-match accuracy, what seed 002 calls
"ordinal accuracy"; `adjacent_acc` (formerly `ordinal_acc`) is within-one accuracy,
|predicted - true| <= 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from ..data.dataset import BatchLoader, KTDataset
from .common import attention_heatmap, panel_grid

if TYPE_CHECKING:
    from ..models.attention_gpcm import GPCMModel

# --- GPCM parameter recovery: the tables the plots below draw ----------------------------------


@torch.no_grad()
def concept_theta_moments(
    model: GPCMModel,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
) -> dict[str, np.ndarray]:
    """Mean and sd of the ability theta the model assigns on each concept over `data` [C]."""
    was_training = model.training
    model.eval()
    C = model.config.num_c
    s0, s1, s2 = (torch.zeros(C, dtype=torch.float64) for _ in range(3))
    for batch in BatchLoader(data, batch_size, max_len):
        batch = batch.to(device)
        theta = model(batch).extras["theta"][batch.mask].double().cpu()
        q = batch.q[batch.mask].cpu()
        s0 += torch.bincount(q, minlength=C)
        s1.index_add_(0, q, theta)
        s2.index_add_(0, q, theta.square())
    model.train(was_training)
    n = s0.clamp_min(1)
    mean = s1 / n
    sd = (s2 / n - mean.square()).clamp_min(0).sqrt()
    unseen = s0 == 0
    mean[unseen], sd[unseen] = float("nan"), float("nan")
    return {"mean": mean.numpy(), "sd": sd.numpy()}


def item_parameter_recovery(
    model: GPCMModel,
    alpha_true: np.ndarray,
    thresholds_true: np.ndarray,
    theta_moments: dict[str, np.ndarray] | None = None,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Learned vs true GPCM parameters per concept: a long table and Pearson correlations.

    The scale and origin of theta are not identified, so learned parameters match the truth up to
    an affine map; Pearson correlation is invariant to it. Because theta also reads the current
    question, even the per-concept origin and scale are not identified: (theta + d_c, beta_c + d_c)
    predict the same. With `theta_moments` (from `concept_theta_moments` on the training data) the
    table also gives the parameters in the identified frame where the model's ability on each
    concept has mean 0 and sd 1 (thresholds (beta - mean) / sd, discrimination alpha * sd), the
    convention IRT uses for its ability distribution; correlations `*_anchored`.
    """
    learned = model.item_parameters()
    C, Km1 = thresholds_true.shape
    if learned["thresholds"].shape != (C, Km1):
        raise ValueError(f"model thresholds {learned['thresholds'].shape} vs truth {(C, Km1)}")
    thr, alpha = learned["thresholds"], learned["alpha"]
    frames = {"learned": (thr, alpha)}
    if theta_moments is not None:
        m, sd = theta_moments["mean"][:, None], theta_moments["sd"]
        frames["anchored"] = ((thr - m) / sd[:, None], alpha * sd)
    rows = []
    for c in range(C):
        for h in range(Km1):
            rows.append(
                {
                    "concept": c,
                    "parameter": f"beta_{h}",
                    "true": thresholds_true[c, h],
                    **{k: f[0][c, h] for k, f in frames.items()},
                }
            )
        rows.append(
            {
                "concept": c,
                "parameter": "alpha",
                "true": alpha_true[c],
                **{k: f[1][c] for k, f in frames.items()},
            }
        )
    table = pd.DataFrame(rows)
    is_alpha = table.parameter == "alpha"
    corr = {}
    for frame in frames:
        suffix = "" if frame == "learned" else f"_{frame}"
        for key, part in (("threshold_r", table[~is_alpha]), ("alpha_r", table[is_alpha])):
            ok = np.isfinite(part[frame])
            corr[key + suffix] = float(np.corrcoef(part.true[ok], part[frame][ok])[0, 1])
    return table, corr


# --- plots ---------------------------------------------------------------------------------------


def plot_confusion(cm: np.ndarray, normalize: bool = True, title: str = "confusion", ax=None):
    """Heatmap of a [K, K] confusion matrix (rows true, columns predicted), row-normalised."""
    ax = ax or plt.subplots(figsize=(4.2, 3.6))[1]
    cm = np.asarray(cm, dtype=float)
    shown = cm / np.maximum(cm.sum(1, keepdims=True), 1) if normalize else cm
    sns.heatmap(
        shown,
        annot=True,
        fmt=".2f" if normalize else ".0f",
        cmap="Blues",
        cbar=False,
        vmin=0,
        vmax=1 if normalize else None,
        square=True,
        ax=ax,
    )
    ax.set(xlabel="predicted category", ylabel="true category", title=title)
    return ax


def plot_category_f1(metrics: dict[str, dict] | pd.DataFrame, ax=None):
    """Grouped bars of f1_k per model, from `ordinal_metrics` dicts or a table of f1_k columns."""
    table = pd.DataFrame(metrics).T if isinstance(metrics, dict) else metrics
    cols = sorted((c for c in table.columns if c.startswith("f1_")), key=lambda c: int(c[3:]))
    long = (
        table[cols]
        .rename_axis("model")
        .reset_index()
        .melt(id_vars="model", var_name="category", value_name="F1")
    )
    long["category"] = long["category"].str[3:]
    ax = ax or plt.subplots(figsize=(max(6.0, 0.9 * len(table) + 3), 3.5))[1]
    sns.barplot(long, x="category", y="F1", hue="model", ax=ax)
    ax.set(ylim=(0, 1), title="F1 per response category")
    ax.legend(fontsize=8, ncol=2)
    return ax


def plot_parameter_recovery(
    table: pd.DataFrame, corr: dict[str, float] | None = None, frame: str = "learned", axes=None
):
    """Learned vs true thresholds (coloured by level) and discriminations, from
    `item_parameter_recovery`; `frame` is "learned" (raw) or "anchored" (identified frame)."""
    axes = axes if axes is not None else plt.subplots(1, 2, figsize=(9, 3.8))[1]
    suffix = "" if frame == "learned" else f"_{frame}"
    thr = table[table.parameter != "alpha"]
    sns.scatterplot(thr, x="true", y=frame, hue="parameter", s=25, ax=axes[0])
    alp = table[table.parameter == "alpha"]
    sns.scatterplot(alp, x="true", y=frame, s=25, color="darkorange", ax=axes[1])
    corr = corr or {}
    for ax, what, key in (
        (axes[0], "thresholds", "threshold_r"),
        (axes[1], "discrimination", "alpha_r"),
    ):
        r = f" (r = {corr[key + suffix]:.2f})" if key + suffix in corr else ""
        ax.set(xlabel=f"true {what}", ylabel=f"{frame} {what}", title=f"{what}, {frame}{r}")
    return axes


def plot_attention_maps(
    maps: dict[str, torch.Tensor],
    index: int = 0,
    length: int | None = None,
    max_maps: int = 8,
    ncols: int = 4,
):
    """Head-averaged attention heatmaps (query step vs key step) of one sequence per map."""
    names = list(maps)[:max_maps]
    fig, axes = panel_grid(len(names), ncols, (3.2, 3.0))
    for ax, name in zip(axes, names, strict=False):
        w = maps[name].detach().float().cpu()
        w = w[index] if w.dim() >= 3 else w  # [H, L, S] or [L, S]
        w = w.mean(0) if w.dim() == 3 else w
        if length is not None:
            w = w[:length, :length]
        attention_heatmap(ax, w.numpy(), name, square=True, xlabel="key step", fontsize=None)
    fig.tight_layout()
    return fig
