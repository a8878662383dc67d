"""Plots for ordinal KT: confusion matrix, per-category F1, GPCM parameter recovery, mechanism maps.

# B batch, H heads, L query steps, S key steps, K categories
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from .common import attention_heatmap, panel_grid


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
