"""Tuned rows: a tuning budget's chosen configurations (`kt budget best NAME` ->
results/tuning/NAME.json, `kt_lib.runs.budget`) as labelled variants `<label>_tuned` of the
studies of record: the `simakt_tuned` study (seed 000 under an equal budget), and last parts of
`ordinal_oulad` and `baselines`, each tuned row paired with its untuned one."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from .budget import BUDGETS, Budget
from .study import Part, Study


def tuned_variants(budget: Budget, path: str | Path | None = None) -> dict[str, dict]:
    """{<label>_tuned: {"model": ..., "lr": ..., **fields}} from the budget's tuning file; {}
    when there is none."""
    configs = budget.chosen(path)
    return {
        f"{k}_tuned": {"model": v["model"], **({"lr": v["lr"]} if v.get("lr") else {}),
                       **v["fields"]}
        for k, v in configs.items()
    }  # fmt: skip


def tuned_study(variants: dict[str, dict]) -> Study:
    """Seed 000's rows after the equal tuning budget (`kt_lib.runs.budget`): each label's best
    configuration as `<label>_tuned`, five seeds on algebra05, each on its seed's split as the
    simakt study's rows (seed 0's is the split the search used: its validation students chose
    the configurations; seeds 1-4 draw other splits, whose training students include some of
    them; test is read once per run), paired as the simakt study."""
    tuned = [f"{label}_tuned" for label in BUDGETS["simakt"].labels if f"{label}_tuned" in variants]
    presets = [t for t in tuned if t not in ("dtransformer_tuned", "simakt_no_inter_tuned")]
    bases = [t for t in ("dtransformer_tuned", "simakt_no_inter_tuned") if t in tuned]
    pairs = [(v, b) for v in presets for b in bases]
    if len(bases) == 2:
        pairs.append(("simakt_no_inter_tuned", "dtransformer_tuned"))
    return Study(
        name="simakt_tuned",
        question="Seed 000 under an equal tuning budget: every row's best configuration of the "
        "same number of Optuna trials on algebra05's validation students, five seeds",
        parts=(Part((("algebra05", "auto"),), tuple(tuned)),),
        variants=variants,
        pairs=tuple(pairs),
        seeds=(0, 1, 2, 3, 4),
        filling=True,
        breakdown=True,
        pair_breakdown=True,
    )


def with_tuned_rows(study: Study, variants: dict[str, dict]) -> Study:
    """`study` with its tuned rows (`<label>_tuned`, the budget's best configurations) as a last
    part on the datasets of the untuned rows (the runs before keep their keys), each paired with
    its untuned row (the label without `_tuned`, else its model): the label says which rows are
    tuned."""
    tuned = tuple(variants)
    rows = {m for part in study.parts for m in part.models}
    base = {t: t.removesuffix("_tuned") if t.removesuffix("_tuned") in rows else v["model"]
            for t, v in variants.items()}  # fmt: skip
    datasets = tuple(
        dict.fromkeys(
            d
            for part in study.parts
            if set(part.models) & set(base.values())
            for d in part.datasets
        )
    )
    return dataclasses.replace(
        study,
        parts=(*study.parts, Part(datasets, tuned)),
        variants={**study.variants, **variants},
        pairs=(*study.pairs, *((t, base[t]) for t in tuned)),
    )


def add_tuned_rows(studies: dict[str, Study]) -> dict[str, Study]:
    """`studies` with the tuned rows, once `kt budget best NAME` has written
    results/tuning/NAME.json. A file that no longer parses (a field a model lost) is named in a
    warning and its rows left out: the other studies stay usable."""
    out = dict(studies)
    joins = {"ordinal": "ordinal_oulad", "sparsekt": "baselines"}  # study the tuned rows join
    for name in ("simakt", *joins):
        try:
            variants = tuned_variants(BUDGETS[name])
            if variants and name == "simakt":
                out["simakt_tuned"] = tuned_study(variants)
            elif variants:
                out[joins[name]] = with_tuned_rows(out[joins[name]], variants)
        except (ValueError, KeyError, TypeError) as e:
            warnings.warn(f"{BUDGETS[name].file}: {e}; its tuned rows are left out", stacklevel=2)
    return out
