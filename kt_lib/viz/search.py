"""Plots of a tuning search from its committed trial record (`kt_lib.runs.trials`: the JSON's
`labels[label]`, one dict per ended trial): learning curves and the best value so far."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def _curve(trial: dict) -> tuple[np.ndarray, np.ndarray]:
    steps = sorted(trial.get("intermediate", {}).items(), key=lambda kv: int(kv[0]))
    return np.array([int(k) for k, _ in steps]), np.array([v for _, v in steps], dtype=float)


def pruner_median(trials: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, median) of the validation metric over the trials that reported each epoch: what
    a median pruner compares a running trial against (before its own value joins)."""
    by_epoch: dict[int, list[float]] = {}
    for t in trials:
        for e, v in zip(*_curve(t), strict=True):
            by_epoch.setdefault(int(e), []).append(float(v))
    epochs = np.array(sorted(by_epoch))
    return epochs, np.array([np.median(by_epoch[e]) for e in epochs])


def best_so_far(trials: list[dict]) -> np.ndarray:
    """The best completed value after each ended trial, in the order they ended (NaN before the
    first completed one)."""
    order = sorted(trials, key=lambda t: t.get("complete") or t.get("start") or "")
    best, out = -np.inf, []
    for t in order:
        if t.get("state") == "COMPLETE" and t.get("value") is not None:
            best = max(best, float(t["value"]))
        out.append(best if np.isfinite(best) else np.nan)
    return np.array(out)


def plot_search(trials: list[dict], label: str = "", metric: str = "valid AUC", axes=None):
    """Left: each trial's validation metric per epoch (complete: solid, the best in black;
    pruned: dashed grey, ending where it was stopped; failed trials report nothing) and the
    median over trials per epoch (dotted). Right: the best completed value after each trial."""
    axes = axes if axes is not None else plt.subplots(1, 2, figsize=(11, 3.6))[1]
    done = [t for t in trials if t.get("state") == "COMPLETE" and t.get("value") is not None]
    best = max(done, key=lambda t: t["value"]) if done else None
    for t in trials:
        x, y = _curve(t)
        if not len(x):
            continue
        if t is best:
            axes[0].plot(x, y, color="black", lw=2, label=f"best: {t['value']:.4f}")
        elif t.get("state") == "COMPLETE":
            axes[0].plot(x, y, lw=1, alpha=0.8)
        else:
            axes[0].plot(x, y, color="grey", ls="--", lw=1, alpha=0.7)
    epochs, median = pruner_median(trials)
    if len(epochs):
        axes[0].plot(epochs, median, color="tab:red", ls=":", lw=2, label="median per epoch")
    states = {s: sum(t.get("state") == s for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL")}
    counts = ", ".join(f"{n} {s.lower()}" for s, n in states.items() if n)
    axes[0].set(title=f"{label}: {counts}".strip(": "), xlabel="epoch", ylabel=metric)
    axes[0].legend(fontsize=8)
    curve = best_so_far(trials)
    axes[1].plot(np.arange(1, len(curve) + 1), curve, marker="o", drawstyle="steps-post")
    axes[1].set(title=f"{label}: best so far".strip(": "), xlabel="trials ended", ylabel=metric)
    return axes
