"""Attention maps of every model, collected for one student and drawn, so notebooks only call.

# L steps (the student's valid length), S key steps, M memory slots, H heads, A archetypes
`collect_attention(model, batch, index)` runs `model(batch, return_attention=True)` in eval mode
and returns the maps of row `index` as numpy arrays keyed "layer/head":
- step maps [L, S] per head, "<map>/h<i>", from the model's [B, H, L, S] maps (AKT's plain
  softmax is "<layer>/undecayed/h<i>", ordinal mechanisms "<mechanism>/<map>/h<i>");
- memory maps [L, M], "<layer>/<head name>", from [B, L, M] maps: SimAKT's inter-student heads
  ("block3/cluster", "block3/knn", ...) over the slots of the bank the student reads.
The last "/" separates the layer from the head (`split_key`). A model without attention (DKT)
gives {}. Models whose key j holds interaction j - `attention_key_shift` (iKT3's streams are
shifted right behind a start token) get their key labels from `key_labels`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
import torch.nn.functional as F

from ..data.dataset import Batch, BatchLoader, KTDataset
from .common import HEAD, attention_heatmap, is_memory, panel_grid, split_key
from .memory_attention import (
    archetype_affinity,
    memory_attention,
    memory_slots,
    plot_archetype_affinity,
    plot_memory_attention,
)

CORRECT, WRONG = "\u2713", "\u2717"  # check mark, ballot x

__all__ = [
    "CORRECT",
    "HEAD",
    "WRONG",
    "archetype_affinity",
    "collect_attention",
    "decay_curves",
    "decay_rates",
    "default_layer",
    "fusion_weights",
    "head_average",
    "heads",
    "is_memory",
    "key_labels",
    "layers",
    "memory_attention",
    "memory_slots",
    "plot_archetype_affinity",
    "plot_decay_curves",
    "plot_fusion_weights",
    "plot_heads",
    "plot_layers",
    "plot_maps",
    "plot_memory_attention",
    "plot_side_by_side",
    "split_key",
    "step_labels",
    "student_attention",
    "student_batch",
]


# --- collecting -----------------------------------------------------------------------------


def layers(maps: dict[str, np.ndarray], memory: bool = False) -> list[str]:
    """Layer names in model order: step-map layers (memory=False) or memory-map layers."""
    out: list[str] = []
    for key in maps:
        layer = split_key(key)[0]
        if is_memory(key) == memory and layer not in out:
            out.append(layer)
    return out


def heads(maps: dict[str, np.ndarray], layer: str) -> list[str]:
    """Keys of one layer's step maps, in head order."""
    return [k for k in maps if split_key(k)[0] == layer and not is_memory(k)]


@torch.no_grad()
def collect_attention(model, batch: Batch, index: int = 0) -> dict[str, np.ndarray]:
    """Maps of row `index` of `batch` as {"layer/head": [L, S] or [L, M]}, cropped to its length."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        out = model(batch.to(device), return_attention=True)
    finally:
        model.train(was_training)
    n = int(batch.mask[index].sum())
    found: dict[str, np.ndarray] = {}
    for name, w in (out.attention or {}).items():
        if w is None:
            continue
        name = name.replace(".", "/")  # SimAKT names its inter heads "block3.<head>"
        w = w[index].detach().float().cpu().numpy()
        if w.ndim == 3:  # [H, L, S]: one step map per head
            for h in range(w.shape[0]):
                found[f"{name}/h{h}"] = w[h, :n, :n]
        elif w.ndim == 2:  # [L, M]: a head over memory slots
            found[name] = w[:n]
        else:
            raise ValueError(f"attention map {name!r} has unexpected shape {tuple(w.shape)}")
    return found


def student_batch(data: KTDataset, uid: int, max_len: int = 200) -> Batch:
    """A one-row batch with the first window of student `uid`."""
    where = [i for i, s in enumerate(data.students) if s.uid == uid]
    if not where:
        raise KeyError(f"student {uid} is not in {data.name}")
    return next(iter(BatchLoader(data.subset(where[:1]), 1, max_len)))


def student_attention(
    model, data: KTDataset, uid: int, max_len: int = 200
) -> tuple[dict[str, np.ndarray], Batch]:
    """`collect_attention` on the first window of student `uid` of `data`, and that batch."""
    batch = student_batch(data, uid, max_len)
    return collect_attention(model, batch, 0), batch


def step_labels(batch: Batch, index: int = 0, K: int = 2) -> list[str]:
    """Tick labels per step: 'q12✓' / 'q3✗' (binary) or 'q4:2' (ordinal, category 2)."""
    n = int(batch.mask[index].sum())
    q = batch.q[index, :n].tolist()
    r = batch.r[index, :n].tolist()
    if K > 2:
        return [f"q{a}:{b}" for a, b in zip(q, r, strict=True)]
    return [f"q{a}{CORRECT if b else WRONG}" for a, b in zip(q, r, strict=True)]


def key_labels(model, batch: Batch, index: int = 0, K: int = 2) -> list[str]:
    """Labels of the key axis: `step_labels` moved right by the model's key shift."""
    labels = step_labels(batch, index, K)
    shift = int(getattr(model, "attention_key_shift", 0))
    return ["start"] * shift + labels[: len(labels) - shift] if shift else labels


def head_average(maps: dict[str, np.ndarray], layer: str) -> np.ndarray:
    """Mean over the heads of one layer [L, S]."""
    keys = heads(maps, layer)
    if not keys:
        raise KeyError(f"no step maps for layer {layer!r}; layers: {layers(maps)}")
    return np.mean([maps[k] for k in keys], axis=0)


def default_layer(maps: dict[str, np.ndarray]) -> str | None:
    """The last step-map layer, skipping AKT's undecayed copies: the one nearest the output."""
    names = [n for n in layers(maps) if not n.endswith("undecayed")]
    return names[-1] if names else None


# --- heatmaps -------------------------------------------------------------------------------


def _crop(labels, n):
    return None if labels is None else list(labels)[:n]


def plot_maps(
    panels: dict[str, np.ndarray],
    labels: list[str] | None = None,
    key_labels: list[str] | dict[str, list[str]] | None = None,
    max_steps: int | None = 30,
    ncols: int = 4,
    size: tuple[float, float] = (3.6, 3.4),
    shared_scale: bool = False,
    suptitle: str | None = None,
):
    """One heatmap per panel (name -> [L, S]); rows labelled by step, columns by key.

    `key_labels` is one list for every panel or a dict per panel (defaults to `labels` for
    square maps); the first `max_steps` steps are shown.
    """
    if not panels:
        raise ValueError("nothing to draw: no attention maps (a model without attention?)")
    fig, axes = panel_grid(len(panels), ncols, size)
    vmax = max(float(w.max()) for w in panels.values()) if shared_scale else None
    for ax, (name, w) in zip(axes, panels.items(), strict=False):
        n = w.shape[0] if max_steps is None else min(max_steps, w.shape[0])
        square = w.shape[0] == w.shape[1]
        w = w[:n, :n] if square else w[:n]
        kl = key_labels.get(name) if isinstance(key_labels, dict) else key_labels
        cols = _crop(kl if kl is not None else (labels if square else None), w.shape[1])
        attention_heatmap(ax, w, name, _crop(labels, n), cols, vmax)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def plot_heads(
    maps: dict[str, np.ndarray],
    layer: str | None = None,
    labels: list[str] | None = None,
    key_labels: list[str] | None = None,
    max_steps: int | None = 30,
    ncols: int = 4,
):
    """Every head of one layer (default: the layer nearest the output), one panel per head."""
    layer = layer or default_layer(maps)
    keys = heads(maps, layer) if layer is not None else []
    if not keys:
        raise KeyError(f"no step maps for layer {layer!r}; layers: {layers(maps)}")
    return plot_maps(
        {k: maps[k] for k in keys}, labels, key_labels, max_steps, ncols, suptitle=layer
    )


def plot_layers(
    maps: dict[str, np.ndarray],
    labels: list[str] | None = None,
    key_labels: list[str] | None = None,
    which: list[str] | None = None,
    max_steps: int | None = 30,
    ncols: int = 4,
):
    """Head-averaged map of each layer (or of the layers in `which`), one panel per layer."""
    which = which or layers(maps)
    panels = {f"{name} (mean of heads)": head_average(maps, name) for name in which}
    return plot_maps(panels, labels, key_labels, max_steps, ncols)


def plot_side_by_side(
    per_model: dict[str, dict[str, np.ndarray]],
    labels: list[str] | dict[str, list[str]] | None = None,
    key_labels: dict[str, list[str]] | None = None,
    layer: dict[str, str] | None = None,
    max_steps: int | None = 30,
    ncols: int = 4,
):
    """Each model's head-averaged map of one layer (default: nearest the output), side by side.

    Models without attention maps get an empty panel saying so.
    """
    layer = layer or {}
    panels, missing = {}, []
    for model, maps in per_model.items():
        name = layer.get(model) or default_layer(maps)
        if name is None:
            missing.append(model)
            continue
        panels[f"{model}: {name}"] = head_average(maps, name)
    keyed = {
        f"{m}: {layer.get(m) or default_layer(per_model[m])}": kl
        for m, kl in (key_labels or {}).items()
        if m in per_model and m not in missing
    }
    rows = labels if not isinstance(labels, dict) else next(iter(labels.values()), None)
    n = len(panels) + len(missing)
    fig, axes = panel_grid(n, ncols, (3.6, 3.4))
    for ax, (name, w) in zip(axes, panels.items(), strict=False):
        k = w.shape[0] if max_steps is None else min(max_steps, w.shape[0])
        cols = keyed.get(name, rows)
        attention_heatmap(ax, w[:k, :k], name, _crop(rows, k), _crop(cols, k))
    for ax, model in zip(axes[len(panels) :], missing, strict=False):
        ax.axis("on")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"{model}\nno attention", ha="center", va="center")
    fig.tight_layout()
    return fig


# --- decay (AKT, DTransformer, SimAKT) ------------------------------------------------------


def decay_rates(model) -> dict[str, np.ndarray]:
    """Per-head decay rates theta = softplus(gamma) by layer: the model's own `decay_rates()`
    (AKT, iDKT), else every attention module with a per-head `gamma` (DTransformer, SimAKT)."""
    if hasattr(model, "decay_rates"):
        return {k: np.asarray(v, dtype=float) for k, v in model.decay_rates().items()}
    found = {}
    for name, module in model.named_modules():
        gamma = getattr(module, "gamma", None)
        if isinstance(gamma, torch.nn.Parameter) and gamma.dim() == 1:
            found[name.removesuffix(".attn")] = F.softplus(gamma.detach()).cpu().numpy()
    return found


def decay_curves(rates: dict[str, np.ndarray], max_distance: float = 30, n: int = 61):
    """Long table of exp(-theta_h d) against distance d per layer and head."""
    d = np.linspace(0, max_distance, n)
    rows = [
        pd.DataFrame(
            {"layer": layer, "head": f"h{h}", "theta": t, "distance": d, "factor": np.exp(-t * d)}
        )
        for layer, theta in rates.items()
        for h, t in enumerate(np.asarray(theta, dtype=float))
    ]
    return pd.concat(rows, ignore_index=True)


def plot_decay_curves(
    model_or_rates,
    max_distance: float = 30,
    ncols: int = 4,
    log: bool = True,
):
    """Decay factor exp(-theta_h d) per head against the (context-aware) distance d, per layer."""
    rates = model_or_rates if isinstance(model_or_rates, dict) else decay_rates(model_or_rates)
    if not rates:
        raise ValueError("no decay parameters: the model has no monotonic attention")
    table = decay_curves(rates, max_distance)
    fig, axes = panel_grid(len(rates), ncols, (3.6, 3.0))
    for ax, layer in zip(axes, rates, strict=False):
        sns.lineplot(table[table.layer == layer], x="distance", y="factor", hue="head", ax=ax)
        ax.set(title=layer, xlabel="distance d", ylabel="exp(-theta d)")
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7, title=None, ncol=2)
    fig.tight_layout()
    return fig


# --- ordinal mechanisms ---------------------------------------------------------------------


def fusion_weights(model) -> pd.DataFrame:
    """How a ModularAttentionGPCM weighs its mechanisms, per stacked pipeline.

    `weighted` fusion: the learned softmax weights; `concat`: each mechanism's share of the
    fusion layer's weight norm; `mean`: equal weights.
    """
    encoder = getattr(model, "encoder", None)
    pipelines = getattr(encoder, "pipelines", None)
    if pipelines is None:
        return pd.DataFrame(columns=["block", "mechanism", "weight", "fusion"])
    rows = []
    for i, p in enumerate(pipelines):
        n = len(p.names)
        if p.fusion_method == "weighted":
            w = p.fusion_weights().detach().cpu().numpy()
        elif p.fusion_method == "concat":
            W = p.fusion_layer.weight.detach().cpu()  # [D, n * D]
            norms = torch.stack([c.norm() for c in W.chunk(n, dim=1)]).numpy()
            w = norms / norms.sum()
        else:
            w = np.full(n, 1.0 / n)
        rows += [
            {"block": i, "mechanism": m, "weight": float(v), "fusion": p.fusion_method}
            for m, v in zip(p.names, w, strict=True)
        ]
    return pd.DataFrame(rows)


def plot_fusion_weights(model, ax=None, title: str | None = None):
    """Bars of `fusion_weights(model)` (one group per stacked pipeline)."""
    table = fusion_weights(model)
    if table.empty:
        raise ValueError("the model has no mechanism pipeline (not a ModularAttentionGPCM)")
    ax = ax or plt.subplots(figsize=(5, 3))[1]
    hue = "block" if table["block"].nunique() > 1 else None
    sns.barplot(table, x="mechanism", y="weight", hue=hue, ax=ax)
    fusion = ", ".join(table["fusion"].unique())
    ax.set(title=title or f"mechanism weights ({fusion} fusion)", ylabel="weight")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    return ax
