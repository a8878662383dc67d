"""What SimAKT's inter-student heads read: attention per memory slot, what each slot holds (with
the simulator's archetypes), and how strongly each archetype is attended (notebook 09).
Re-exported by kt_lib.viz.attention."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
import torch

from ..data.dataset import BatchLoader, KTDataset
from .common import is_memory, panel_grid


def memory_attention(maps: dict[str, np.ndarray]) -> pd.DataFrame:
    """Mean weight per memory slot over the student's steps, for each memory map."""
    rows = []
    for key, w in maps.items():
        if is_memory(key):
            mean = w.mean(0)
            rows += [{"map": key, "slot": j, "weight": float(v)} for j, v in enumerate(mean)]
    return pd.DataFrame(rows, columns=["map", "slot", "weight"])


def _bank_fold(model, uid: int) -> int:
    if getattr(model, "folds", None) is None:
        return 0
    return int(model.folds.fold_of(torch.tensor([uid]))[0])


def memory_slots(model, uid: int | None = None, truth=None, fold: int | None = None):
    """What each memory slot of each active inter-student head holds, for the bank `uid` reads
    (or bank `fold`).

    One row per (head, slot): map key ("block3/<head>"), kind, label, member uids and size; with
    the simulator's truth, the share of each archetype among the members and the majority one.
    Cluster slots hold a cluster's members, KNN slots one student, graph slots a skill,
    prototype slots no student.
    """
    inter = getattr(model, "inter", None)
    if inter is None:
        return pd.DataFrame(columns=["map", "head", "kind", "slot", "label", "uids", "size"])
    if fold is None:
        fold = 0 if uid is None else _bank_fold(model, uid)
    rows = []
    for head in inter.heads:
        if not head.active:
            continue
        name, kind = head.spec.name, head.spec.type
        key = f"block3/{name}"
        if head.has_banks and hasattr(head.banks[fold], "labels"):  # cluster bank
            bank = head.banks[fold]
            for c in range(len(bank.centroids)):
                members = bank.uids[bank.labels == c].tolist()
                rows.append((key, name, kind, c, f"c{c}", members))
        elif head.has_banks and hasattr(head.banks[fold], "encodings"):  # KNN-style bank
            for j, u in enumerate(head.banks[fold].uids.tolist()):
                rows.append((key, name, kind, j, f"s{u}", [u]))
        elif kind == "graph":
            rows += [(key, name, kind, c, f"skill {c}", []) for c in range(model.config.num_c)]
        elif hasattr(head, "prototypes"):
            rows += [(key, name, kind, p, f"p{p}", []) for p in range(len(head.prototypes))]
    table = pd.DataFrame(rows, columns=["map", "head", "kind", "slot", "label", "uids"])
    table["size"] = table["uids"].map(len)
    if truth is not None and len(table):
        names = list(truth.arch_names)
        shares = np.zeros((len(table), len(names)))
        for i, members in enumerate(table["uids"]):
            if members:
                counts = np.bincount(truth.archetype[members], minlength=len(names))
                shares[i] = counts / counts.sum()
        for a, n in enumerate(names):
            table[n] = shares[:, a]
        table["majority"] = [names[int(np.argmax(s))] if s.sum() > 0 else "" for s in shares]
    return table


def plot_memory_attention(
    maps: dict[str, np.ndarray],
    slots: pd.DataFrame | None = None,
    top: int = 20,
    ncols: int = 3,
    title: str | None = None,
):
    """Bars of the mean attention per memory slot (over steps) for each inter-student head;
    with `memory_slots(..., truth)` the bars are coloured by the slot's majority archetype."""
    table = memory_attention(maps)
    if table.empty:
        raise ValueError("no memory maps: the model has no active inter-student head")
    names = list(table["map"].unique())
    archetypes: list[str] = []
    if slots is not None and "majority" in slots:
        cols = list(slots.columns)
        archetypes = cols[cols.index("size") + 1 : cols.index("majority")]
    palette = dict(
        zip(archetypes, sns.color_palette(n_colors=max(len(archetypes), 1)), strict=False)
    )
    fig, axes = panel_grid(len(names), ncols, (4.2, 3.2))
    for ax, key in zip(axes, names, strict=False):
        t = table[table["map"] == key].nlargest(top, "weight")
        hue = None
        if slots is not None and len(slots):
            info = slots[slots["map"] == key].set_index("slot")
            t = t.assign(label=info["label"].reindex(t["slot"]).to_numpy())
            if archetypes and (info["size"] > 0).any():
                t = t.assign(archetype=info["majority"].reindex(t["slot"]).to_numpy())
                hue = "archetype"
        else:
            t = t.assign(label=[str(s) for s in t["slot"]])
        if hue:
            sns.barplot(t, x="label", y="weight", hue=hue, palette=palette, dodge=False, ax=ax)
            ax.legend(fontsize=7, title=None)
        else:
            sns.barplot(t, x="label", y="weight", color="steelblue", ax=ax)
        ax.set(title=f"{key} (top {len(t)})", xlabel="memory slot", ylabel="mean weight")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


@torch.no_grad()
def archetype_affinity(
    model, data: KTDataset, truth, max_len: int = 200, batch_size: int = 64
) -> pd.DataFrame:
    """How much attention each inter-student head puts on each archetype, by true archetype.

    For every student of `data` (first window), the head's weights are averaged over valid steps
    and spread over archetypes by the archetype shares of each slot's members (bank of the
    student's fold). Returns the mean mass per (head, true archetype, attended archetype); for
    heads over students (cluster, KNN) a row sums to 1 over the attended archetypes.
    """
    names = list(truth.arch_names)
    first: dict[int, int] = {}
    for i, s in enumerate(data.students):
        first.setdefault(s.uid, i)
    cache: dict[tuple[str, int], np.ndarray | None] = {}

    def shares(key: str, fold: int, M: int) -> np.ndarray | None:  # [M, A] or None
        if (key, fold) not in cache:
            slots = memory_slots(model, truth=truth, fold=fold)
            slots = slots[slots["map"] == key]
            mat = None
            if len(slots) and slots["size"].sum() > 0:
                mat = np.zeros((M, len(names)))
                mat[slots["slot"].to_numpy()] = slots[names].to_numpy()
            cache[key, fold] = mat
        return cache[key, fold]

    rows = []
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        for batch in BatchLoader(data.subset(list(first.values())), batch_size, max_len):
            batch = batch.to(device)
            out = model(batch, return_attention=True)
            valid = batch.mask.float().unsqueeze(-1)
            uids = batch.uid.tolist()
            folds = [_bank_fold(model, u) for u in uids]
            for name, w in (out.attention or {}).items():
                if w is None or w.dim() != 3:
                    continue
                key = name.replace(".", "/")
                mean = ((w * valid).sum(1) / valid.sum(1).clamp(min=1)).cpu().numpy()  # [B, M]
                for b, (uid, fold) in enumerate(zip(uids, folds, strict=True)):
                    mat = shares(key, fold, w.shape[-1])
                    if mat is None:
                        continue
                    true = names[int(truth.archetype[uid])]
                    rows += [
                        {"map": key, "uid": uid, "true": true, "attended": n, "mass": float(m)}
                        for n, m in zip(names, mean[b] @ mat, strict=True)
                    ]
    finally:
        model.train(was_training)
    table = pd.DataFrame(rows, columns=["map", "uid", "true", "attended", "mass"])
    return table.groupby(["map", "true", "attended"], sort=False)["mass"].mean().reset_index()


def plot_archetype_affinity(affinity: pd.DataFrame, ncols: int = 3):
    """Heatmap per head: rows the student's true archetype, columns the attended archetypes."""
    if affinity.empty:
        raise ValueError("empty affinity table (no inter-student head over students?)")
    maps = list(affinity["map"].unique())
    fig, axes = panel_grid(len(maps), ncols, (4.4, 3.6))
    for ax, key in zip(axes, maps, strict=False):
        m = affinity[affinity["map"] == key].pivot(index="true", columns="attended", values="mass")
        sns.heatmap(m, annot=True, fmt=".2f", cmap="mako", vmin=0, cbar=False, ax=ax)
        ax.set(title=key, xlabel="attended archetype", ylabel="student's archetype")
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig
