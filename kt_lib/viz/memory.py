"""Plots of SimAKT's memory banks: projections, cluster composition, position weights, attention."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from ..memory.analysis import fit_projection
from ..memory.banks import ClusterBank, KNNBank
from ..memory.temporal import position_weights


def plot_projection(
    encodings,
    groups,
    names=None,
    cluster: ClusterBank | None = None,
    knn: KNNBank | None = None,
    ax=None,
    title: str = "Trajectory encodings",
):
    """2-D PCA of encodings [N, D] coloured by a known group (e.g. the simulator's archetype),
    with the cluster centroids (x) and the KNN bank's entries (circled) placed by the same PCA."""
    ax = ax or plt.subplots(figsize=(6.5, 5))[1]
    x = np.asarray(encodings, dtype=np.float64)
    pca = fit_projection(x)
    xy = pca.transform(x)
    groups = np.asarray(groups)
    labels = [names[g] if names is not None else str(g) for g in groups]
    sns.scatterplot(
        x=xy[:, 0],
        y=xy[:, 1],
        hue=labels,
        hue_order=sorted(set(labels)),
        s=14,
        alpha=0.6,
        linewidth=0,
        ax=ax,
    )
    if cluster is not None:
        c = pca.transform(cluster.centroids.double().numpy())
        ax.scatter(c[:, 0], c[:, 1], marker="x", c="k", s=40, label="cluster centroids")
    if knn is not None:
        k = pca.transform(knn.encodings.double().numpy())
        ax.scatter(
            k[:, 0],
            k[:, 1],
            facecolors="none",
            edgecolors="crimson",
            s=45,
            lw=1,
            label="KNN bank entries",
        )
    ev = pca.explained_variance_ratio_
    ax.set_xlabel(f"PC1 ({ev[0]:.0%})")
    ax.set_ylabel(f"PC2 ({ev[1]:.0%})")
    ax.set_title(title)
    ax.legend(fontsize=8, markerscale=1.2, loc="best")
    return ax


def plot_composition(labels, groups, names=None, ax=None, title: str = "Clusters vs truth"):
    """Heatmap of students per (cluster, true group), clusters sorted by their majority group."""
    table = pd.crosstab(
        pd.Series(np.asarray(labels), name="cluster"), pd.Series(np.asarray(groups), name="group")
    )
    if names is not None:
        table.columns = [names[g] for g in table.columns]
    table = table.loc[table.idxmax(axis=1).sort_values(kind="stable").index]
    ax = ax or plt.subplots(figsize=(5, max(2.5, 0.18 * len(table))))[1]
    sns.heatmap(table, cmap="Blues", annot=len(table) <= 12, fmt="d", cbar=False, ax=ax)
    ax.set_title(title)
    return ax


def plot_cluster_sizes(bank: ClusterBank, ax=None):
    """Members per cluster (sorted) and each cluster's intra-cluster variance."""
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    sizes = bank.sizes.numpy()
    order = np.argsort(-sizes)
    ax.bar(np.arange(len(sizes)), sizes[order], color="steelblue")
    ax.set_xlabel("cluster (sorted by size)")
    ax.set_ylabel("members")
    twin = ax.twinx()
    twin.plot(np.arange(len(sizes)), bank.variance.numpy()[order], "o", ms=3, color="darkorange")
    twin.set_ylabel("intra-cluster variance", color="darkorange")
    ax.set_title("Cluster bank")
    return ax


def plot_position_weights(steps: int, current: int, decay: float, future_weights, ax=None):
    """Seed 000's weights over memory steps for a student at step `current`, per future_weight."""
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    for fw in future_weights:
        past, future = position_weights(current + 1, steps, decay, fw)
        w = (past[current] + future[current]).numpy()
        ax.plot(np.arange(steps), w, label=f"future_weight={fw}")
    ax.axvline(current + 0.5, color="k", ls="--", lw=1)
    ax.text(
        current + 1, ax.get_ylim()[1] * 0.9, "later steps of the\nhistorical student", fontsize=8
    )
    ax.set_xlabel("memory step i")
    ax.set_ylabel("weight")
    ax.set_title(f"Position weights at step t={current} (decay {decay})")
    ax.legend(fontsize=8)
    return ax


def plot_inter_attention(
    weights: torch.Tensor, steps: int | None = None, ax=None, title: str = "Inter-student attention"
):
    """Heatmap of one student's weights over memory slots [L, M] (steps x slots)."""
    w = weights.detach().cpu().numpy()
    if steps is not None:
        w = w[:steps]
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    sns.heatmap(w.T, cmap="viridis", cbar=True, ax=ax, xticklabels=10, yticklabels=False)
    ax.set_xlabel("step t")
    ax.set_ylabel("memory slot")
    ax.set_title(title)
    return ax
