"""Plots shared by the notebooks: data overview, training curves, ROC, metrics tables."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from sklearn.metrics import roc_curve

from ..data.dataset import KTDataset


def show_source(text: str) -> None:
    """Display where a notebook's results come from; `kt report` copies it into its index."""
    from IPython.display import Markdown, display

    display(Markdown(f"**Source:** {text}"), metadata={"kt_source": text})


def setup(context: str = "notebook") -> None:
    """One consistent look for every notebook."""
    sns.set_theme(context=context, style="whitegrid")
    plt.rcParams["figure.dpi"] = 90


def plot_lengths(datasets: dict[str, KTDataset], max_len: int | None = None, ax=None):
    """Histogram of sequence lengths per split, with the chunk length marked."""
    ax = ax or plt.subplots(figsize=(7, 3.5))[1]
    frame = pd.DataFrame(
        [(name, len(s)) for name, d in datasets.items() for s in d.students],
        columns=["split", "length"],
    )
    sns.histplot(frame, x="length", hue="split", bins=40, element="step", ax=ax)
    if max_len:
        ax.axvline(max_len, color="k", ls="--", lw=1)
        ax.text(max_len, ax.get_ylim()[1] * 0.9, f" max_len={max_len}", fontsize=9)
    ax.set_title("Sequence lengths")
    return ax


def skill_table(data: KTDataset) -> pd.DataFrame:
    """Per-skill interaction count and mean response."""
    q = np.concatenate([s.q for s in data.students])
    r = np.concatenate([s.r for s in data.students]) / max(data.K - 1, 1)
    frame = pd.DataFrame({"skill": q, "response": r})
    return (
        frame.groupby("skill")["response"]
        .agg(count="size", mean="mean")
        .reset_index()
        .sort_values("mean")
    )


def plot_skill_correctness(data: KTDataset, ax=None, top: int = 60):
    """Mean correctness per skill (sorted), bar width ~ count."""
    table = skill_table(data)
    if len(table) > top:
        table = table.iloc[np.linspace(0, len(table) - 1, top).astype(int)]
    ax = ax or plt.subplots(figsize=(9, 3.5))[1]
    sns.barplot(table, x="skill", y="mean", order=table["skill"], color="steelblue", ax=ax)
    ax.set_xticks([])
    ax.set_xlabel(f"skill (sorted; {len(table)} shown)")
    ax.set_ylabel("mean response")
    ax.set_title("Per-skill correctness")
    return ax


def plot_archetypes(per_student: pd.DataFrame, ax=None):
    """Mean correctness against true ability, coloured by the simulator's archetype."""
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    hue = "arch_name" if "arch_name" in per_student else "archetype"
    sns.scatterplot(per_student, x="theta", y="mean_response", hue=hue, s=14, ax=ax)
    ax.set_title("Simulated students: ability vs correctness by archetype")
    return ax


def plot_histories(histories: dict[str, pd.DataFrame], metric: str = "valid_auc", axes=None):
    """Training loss and a validation metric per epoch for several models."""
    axes = axes if axes is not None else plt.subplots(1, 2, figsize=(10, 3.5))[1]
    for name, h in histories.items():
        axes[0].plot(h["epoch"], h["train_total"], marker="o", label=name)
        axes[1].plot(h["epoch"], h[metric], marker="o", label=name)
    axes[0].set(title="training loss", xlabel="epoch")
    axes[1].set(title=metric, xlabel="epoch")
    for ax in axes[:2]:
        ax.legend(fontsize=8)
    return axes


def plot_roc(predictions: dict[str, dict], ax=None):
    """ROC curves from `kt_lib.train.predict` outputs."""
    ax = ax or plt.subplots(figsize=(4.5, 4.5))[1]
    for name, p in predictions.items():
        fpr, tpr, _ = roc_curve(p["y_true"], p["prob"])
        ax.plot(fpr, tpr, label=name)
    ax.plot([0, 1], [0, 1], color="grey", ls=":")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (test)")
    ax.legend()
    return ax


def plot_metric_bars(
    table: pd.DataFrame, metric: str, by: str = "model", ax=None, hue: str | None = None
):
    """Mean +- std of a metric per group (rows are runs, e.g. seeds), side by side per `hue`."""
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    lo = max(0.0, table[metric].min() - 0.05)
    if table[by].nunique() > 6:  # many groups: horizontal bars keep every label whole
        sns.barplot(table, y=by, x=metric, hue=hue, errorbar="sd", capsize=0.2, ax=ax)
        ax.set_xlim(lo, None)
        ax.tick_params(axis="y", labelsize=8)
    else:
        sns.barplot(table, x=by, y=metric, hue=hue, errorbar="sd", capsize=0.2, ax=ax)
        ax.set_ylim(lo, None)
        ax.tick_params(axis="x", rotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    return ax


def bars_height(table: pd.DataFrame, by: str = "model", base: float = 3.4) -> float:
    """Figure height for `plot_metric_bars` panels: room for every group's bar."""
    n = table[by].nunique()
    return base if n <= 6 else max(base, 0.3 * n + 1)


def panel_grid(n: int, ncols: int, size: tuple[float, float]):
    """(figure, first n axes) of a grid of at most `ncols` columns, `size` per panel; spare
    panels are switched off."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, squeeze=False, figsize=(size[0] * ncols, size[1] * nrows)
    )
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)


def attention_heatmap(
    ax,
    w,
    title: str,
    rows=None,
    cols=None,
    vmax=None,
    cbar: bool = False,
    square: bool = False,
    xlabel: str = "key",
    fontsize: float | None = 9,
):
    """One [query, key] weight map (viridis from 0), tick labels when given, else none."""
    sns.heatmap(
        w,
        cmap="viridis",
        vmin=0,
        vmax=vmax,
        cbar=cbar,
        square=square,
        ax=ax,
        xticklabels=cols if cols is not None else False,
        yticklabels=rows if rows is not None else False,
    )
    ax.set_title(title, fontsize=fontsize)
    ax.tick_params(labelsize=6, length=0)
    ax.set(xlabel=xlabel, ylabel="query step")


# --- attention map keys ('layer/head'; memory maps name their head, others are h<i>) ----------

HEAD = re.compile(r"h\d+")


def split_key(key: str) -> tuple[str, str]:
    """'layer/head' -> (layer, head); the layer may itself contain '/'."""
    layer, _, head = key.rpartition("/")
    return layer, head


def is_memory(key: str) -> bool:
    """True for maps over memory slots (their head is named, not h<i>)."""
    return HEAD.fullmatch(split_key(key)[1]) is None
