"""What the runs a study has left cost: per cell, from the wall times of finished runs.

A left run of a (dataset, model) cell costs the mean wall time of the newest finished runs
closest to it, on the device kind it will run on (`run_cost`); `cells` tabulates a study's
cells for `kt study status`, `kind_hours` a study's hours for `kt study list`.
"""

from __future__ import annotations

import math

from ..provenance import device_kind

NEWEST = 3  # a cost is the mean of this many newest matching runs (every run for "guess")


def _kind(row: dict) -> str:
    """The device kind a run's wall time speaks for; a row without a device name counts as a
    CPU run (the default device) for costing, though it pairs with nothing in the tests."""
    kind = device_kind(row.get("device_name"))
    return "cpu" if kind == "unknown" else kind


def run_cost(
    rows: list[dict],
    dataset: str,
    model: str,
    kind: str = "cpu",
    pool: list[dict] | tuple = (),
    base: str | None = None,
    epochs: int | None = None,
) -> tuple[float, str]:
    """(seconds, basis) a run of `model` on `dataset` costs on a device of `kind` ("cpu" or
    "gpu"): the mean wall time of its cell's NEWEST newest finished runs by `date` ("measured";
    the newest, since the code gets faster), else of the same cell in another study (`pool`:
    "other study"), else of the model's on other datasets ("model";
    "model, other study"), else, for a variant (`model` a label, `base` its registered model),
    of its registered model's runs in any study, on the same dataset ("registered model") or any
    ("registered model, any dataset"), else of every finished run ("guess": rough until the
    model's first run lands; every other basis takes its NEWEST newest runs too), each from
    runs made on that kind of device. Where no run was made
    on one, the other kind's figures are used and the basis says so ("measured on gpu"): a GPU
    run's wall time says little of a CPU's. A model's runs on another dataset are not scaled to
    this one. A variant with its own epochs cap (`epochs`) priced from its registered model's
    runs scales each run's wall time by the ratio of the caps (an upper bound: early stopping
    may end it sooner)."""
    cell = lambda r: (r["dataset"], r["model"]) == (dataset, model)  # noqa: E731
    same_model = lambda r: r["model"] == model  # noqa: E731
    registered = lambda r: base is not None and (r.get("variant_of") or r["model"]) == base  # noqa: E731
    for same_kind in (True, False):
        made, borrowed = ([r for r in rs if (_kind(r) == kind) == same_kind] for rs in (rows, pool))
        for basis, runs, same in (
            ("measured", made, cell),
            ("other study", borrowed, cell),
            ("model", made, same_model),
            ("model, other study", borrowed, same_model),
            (
                "registered model",
                made + borrowed,
                lambda r: registered(r) and r["dataset"] == dataset,
            ),
            ("registered model, any dataset", made + borrowed, registered),
            ("guess", made, lambda r: True),
        ):
            match = [r for r in runs if same(r)]
            if basis != "guess":  # the newest: kernels get faster (the native chains: -30%)
                match = sorted(match, key=lambda r: str(r.get("date") or ""))[-NEWEST:]
            walls = [float(r.get("wall_seconds") or 0) for r in match]
            if epochs and basis.startswith("registered model"):
                caps = [(r.get("train") or {}).get("epochs") or epochs for r in match]
                walls = [w * epochs / cap for w, cap in zip(walls, caps, strict=True)]
            if walls:
                other = "gpu" if kind == "cpu" else "cpu"
                return sum(walls) / len(walls), basis + ("" if same_kind else f" on {other}")
    return math.nan, "guess"


def cells(
    rows: list[dict],
    left: list[dict],
    kind: str = "cpu",
    pool: list[dict] | tuple = (),
    keys: set[str] | None = None,
) -> list[dict]:
    """Per (dataset, model) cell: runs done and left, the cost of one run on a device of `kind`
    (`pool`: the other studies' runs, see `run_cost`) and its basis, and the hours left, in plan
    order (cells with nothing left last). `keys`: the run keys of a narrowed plan (`--first`):
    `done` counts those rows only, while every row prices."""
    order = list(dict.fromkeys([(p["dataset"], p["model"]) for p in left]
                               + [(r["dataset"], r["model"]) for r in rows]))  # fmt: skip
    out = []
    for dataset, model in order:
        mine = [p for p in left if (p["dataset"], p["model"]) == (dataset, model)]
        n_left = len(mine)
        base, epochs = (mine[0].get("base"), mine[0].get("epochs")) if mine else (None, None)
        cost, basis = run_cost(rows, dataset, model, kind, pool, base, epochs)
        done = sum(
            (r["dataset"], r["model"]) == (dataset, model)
            and (keys is None or r.get("run_key") in keys)
            for r in rows
        )
        # a run resumed from an epoch checkpoint ("in_flight": its epochs left, at most, at
        # its own pace) costs that instead
        flying = [p["in_flight"] for p in mine if "in_flight" in p]
        seconds = sum(flying) + (n_left - len(flying)) * cost if n_left else 0.0
        if flying:
            basis = "in flight" if len(flying) == n_left else f"{basis}; {len(flying)} in flight"
        out.append(
            dict(dataset=dataset, model=model, done=done, left=n_left, run_min=cost / 60,
                 basis=basis, hours_left=seconds / 3600)
        )  # fmt: skip
    return out


def kind_hours(rows: list[dict], left: list[dict], kind: str, pool: list[dict] = ()) -> str:
    """Hours the `left` runs cost on a device of `kind`: `run_cost` from the study's runs made on
    one, borrowing from `pool` (the other studies' runs on one) where it says; only from `pool`
    when the study has no run on one (the figure then ends in "~"); "?" if neither has one."""
    if not left:
        return "0"
    on = lambda rs: [r for r in rs if _kind(r) == kind]  # noqa: E731
    made, borrowed, mark = on(rows), on(pool), ""
    if not made:
        made, borrowed, mark = borrowed, [], "~"
    if not made:
        return "?"
    hours = sum(
        p["in_flight"]
        if kind == "cpu" and "in_flight" in p  # measured on this CPU: its epochs left
        else run_cost(
            made, p["dataset"], p["model"], kind, borrowed, p.get("base"), p.get("epochs")
        )[0]
        for p in left
    )
    hours /= 3600
    return f"{hours:.1f}{mark}"


def fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no finished run yet)"
    return f"{seconds / 3600:.1f} h from the finished runs' wall times (each cell's basis below)"
