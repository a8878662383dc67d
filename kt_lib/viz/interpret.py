"""Interpretability plots for AKT/iDKT: decay rates per head, attention with and without decay,
the L0/T heads against the BKT reference and the simulator's ground truth.

Inputs are what the models expose: `AKT.decay_rates()`, `forward(..., return_attention=True)`
maps (`<layer>` decayed, `<layer>/undecayed`), and `IDKT.interpretable_params(data)` (one row per
valid position: skill, L0, T, p and their BKT counterparts).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from scipy.stats import pearsonr

from .common import attention_heatmap


def pearson(a, b) -> float:
    """Pearson r (NaN when either side is constant or has fewer than 3 points)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(pearsonr(a, b)[0])


def decay_table(rates: dict[str, torch.Tensor]) -> pd.DataFrame:
    """Long table: layer, head, decay rate theta = softplus(gamma), half-distance ln 2 / theta."""
    rows = [
        (layer, h, float(v), math.log(2) / float(v))
        for layer, r in rates.items()
        for h, v in enumerate(torch.as_tensor(r).flatten().tolist())
    ]
    return pd.DataFrame(rows, columns=["layer", "head", "theta", "half_distance"])


def plot_decay_rates(rates: dict[str, torch.Tensor] | pd.DataFrame, ax=None, title: str = ""):
    """Bars of the learned decay rate per head, one colour per layer (large = short memory)."""
    table = rates if isinstance(rates, pd.DataFrame) else decay_table(rates)
    ax = ax or plt.subplots(figsize=(7, 3.2))[1]
    sns.barplot(table, x="head", y="theta", hue="layer", ax=ax)
    ax.set(ylabel="decay rate softplus(gamma)", title=title or "Learned decay rate per head")
    ax.legend(fontsize=8, title=None)
    return ax


def _head_map(w: torch.Tensor, index: int, head: int | None, length: int | None) -> np.ndarray:
    w = w.detach().float().cpu()[index]  # [H, L, S]
    w = w.mean(0) if head is None else w[head]
    if length is not None:
        w = w[:length, :length]
    return w.numpy()


def plot_attention_decay(
    maps: dict[str, torch.Tensor],
    layer: str,
    index: int = 0,
    head: int | None = None,
    length: int | None = 40,
    axes=None,
):
    """Heatmaps of one sequence's attention in `layer`: plain masked softmax, with AKT's decay,
    and their difference (head-averaged unless `head` is given)."""
    if layer not in maps or f"{layer}/undecayed" not in maps:
        have = sorted(k for k in maps if "/" not in k)
        raise KeyError(f"no attention maps for layer {layer!r}; layers: {have}")
    plain = _head_map(maps[f"{layer}/undecayed"], index, head, length)
    decayed = _head_map(maps[layer], index, head, length)
    if axes is None:
        axes = plt.subplots(1, 3, figsize=(12, 3.8))[1]
    which = "mean over heads" if head is None else f"head {head}"
    vmax = max(plain.max(), decayed.max())
    for ax, w, name in ((axes[0], plain, "without decay"), (axes[1], decayed, "with decay")):
        attention_heatmap(
            ax, w, f"{layer}: {name}", vmax=vmax, square=True, xlabel="key step", fontsize=None
        )
    diff = decayed - plain
    lim = float(np.abs(diff).max()) or 1.0
    sns.heatmap(
        diff,
        cmap="RdBu_r",
        vmin=-lim,
        vmax=lim,
        square=True,
        cbar=True,
        ax=axes[2],
        xticklabels=False,
        yticklabels=False,
    )
    axes[2].set(title=f"difference ({which})", xlabel="key step", ylabel="query step")
    return axes


def attention_by_distance(
    maps: dict[str, torch.Tensor], layer: str, max_lag: int = 30
) -> pd.DataFrame:
    """Mean attention weight per lag t - tau (batch and heads averaged), with and without decay."""
    rows = []
    for kind, key in (("without decay", f"{layer}/undecayed"), ("with decay", layer)):
        w = maps[key].detach().float().cpu().mean(dim=(0, 1))  # [L, S]
        for lag in range(min(max_lag, w.shape[0]) + 1):
            diag = torch.diagonal(w, offset=-lag)
            rows.append((kind, lag, float(diag.mean())))
    table = pd.DataFrame(rows, columns=["attention", "lag", "weight"])
    masked = table.groupby("lag")["weight"].transform("max") == 0  # e.g. lag 0 of a strict mask
    return table[~masked].reset_index(drop=True)


def skill_parameters(params: pd.DataFrame, truth=None, min_count: int = 1) -> pd.DataFrame:
    """Per-skill means of the heads and the BKT reference (+ simulator truth L0/T if given)."""
    cols = [c for c in ("L0", "T", "p", "L0_bkt", "T_bkt", "p_bkt") if c in params]
    table = params.groupby("skill")[cols].mean()
    table["count"] = params.groupby("skill").size()
    table = table[table["count"] >= min_count]
    if truth is not None:
        table["L0_true"] = np.asarray(truth.L0)[table.index]
        table["T_true"] = np.asarray(truth.T)[table.index]
    return table


def alignment_summary(params: pd.DataFrame, truth=None, min_count: int = 1) -> pd.DataFrame:
    """Pearson r of the L0/T heads with BKT (per position and per skill) and with the truth."""
    skills = skill_parameters(params, truth, min_count)
    rows = []
    for name in ("L0", "T"):
        row = {
            "parameter": name,
            "r_bkt_positions": pearson(params[name], params[f"{name}_bkt"]),
            "r_bkt_skills": pearson(skills[name], skills[f"{name}_bkt"]),
            "mae_bkt_positions": float((params[name] - params[f"{name}_bkt"]).abs().mean()),
        }
        if truth is not None:
            row["r_true_skills"] = pearson(skills[name], skills[f"{name}_true"])
            row["r_bkt_vs_true"] = pearson(skills[f"{name}_bkt"], skills[f"{name}_true"])
        rows.append(row)
    return pd.DataFrame(rows).set_index("parameter")


def _scatter(ax, x, y, xlabel: str, ylabel: str, title: str):
    ax.scatter(x, y, s=18, alpha=0.7)
    lo = float(min(np.min(x), np.min(y)))
    hi = float(max(np.max(x), np.max(y)))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=f"{title} (r = {pearson(x, y):.2f})")


def plot_l0_t(params: pd.DataFrame, truth=None, min_count: int = 1, axes=None):
    """Per-skill scatter of the L0/T heads against BKT (and against the truth when given)."""
    skills = skill_parameters(params, truth, min_count)
    refs = [("bkt", "BKT reference")] + ([("true", "simulator truth")] if truth is not None else [])
    if axes is None:
        axes = plt.subplots(len(refs), 2, figsize=(9, 4 * len(refs)), squeeze=False)[1]
    axes = np.atleast_2d(axes)
    for i, (suffix, label) in enumerate(refs):
        for j, name in enumerate(("L0", "T")):
            _scatter(
                axes[i, j],
                skills[f"{name}_{suffix}"],
                skills[name],
                f"{name} ({label})",
                f"{name} head (skill mean)",
                f"{name} vs {label}",
            )
    plt.tight_layout()
    return axes


def plot_bkt_recovery(bkt: pd.DataFrame, truth, axes=None):
    """BKT's fitted L0, T, guess, slip against the simulator's per-skill truth."""
    if axes is None:
        axes = plt.subplots(1, 4, figsize=(14, 3.4))[1]
    for ax, name in zip(axes, ("L0", "T", "guess", "slip"), strict=True):
        _scatter(
            ax,
            np.asarray(getattr(truth, name)),
            bkt[name].to_numpy(),
            f"true {name}",
            f"BKT {name}",
            name,
        )
    plt.tight_layout()
    return axes
