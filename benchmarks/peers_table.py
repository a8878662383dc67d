"""The docs' table of `bench_peers.py` results: one row per model, from its JSON files.

    python benchmarks/peers_table.py benchmarks/results/peers_cpu_alternated.json \
        benchmarks/results/peers_cpu_alternated_repo.json ...      # prints markdown

Per model (a later file's row replaces an earlier one's): parameters ours / pyKT, the train-step
medians, the ratio of the medians and (in brackets) the median of the per-round ratios, the
same for inference, and each side's peak RSS measured alone. The per-round ratio times both
sides back to back in each round, so it is the figure to read when the machine's load moved
during the run; a ratio whose two forms disagree by more than 0.1 is marked `~`. Skipped rows
say why, failed ones their error. Nothing is measured here; only files of the alternated-rounds
script (2026-11-28 on) are read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NEEDED = ("model", "pykt_model", "ours", "theirs", "ours_over_theirs", "ours_over_theirs_per_round")


def rows(paths: list[str]) -> dict[str, dict]:
    """Model name -> its row; a model in a later file replaces its row from an earlier one.
    Files of the alternated-rounds format only (2026-11-28 on): an older file, without the
    per-round ratios, is refused naming the file, the model and what it lacks."""
    out: dict[str, dict] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError(f"{path}: not a list of bench_peers.py rows")
        for row in data:
            need = NEEDED[:1] if "error" in row else NEEDED[:2] if "skipped" in row else NEEDED
            if missing := [k for k in need if k not in row]:
                raise ValueError(
                    f"{path}: model {row.get('model', '?')} lacks {missing} (a file of the "
                    "alternated-rounds bench_peers.py is needed)"
                )
            out[row["model"]] = {**row, "_file": Path(path).name}
    return out


def line(row: dict) -> str:
    name = f"{row['model']} ({row.get('pykt_model', '?')})"
    if "error" in row:  # the model's subprocess failed or was stopped
        return f"| {name} | - | - | error: {row['error']} | - | - | {row['_file']} |"
    if "skipped" in row:
        return f"| {name} | - | - | skipped: {row['skipped']} | - | - | - |"
    o, t = row["ours"], row["theirs"]
    med, per = row["ours_over_theirs"], row["ours_over_theirs_per_round"]
    step, infer = (_ratios(med, per, k) for k in ("train_step", "inference"))
    return (
        f"| {name} | {o['params']:,} / {t['params']:,} | "
        f"{o['train_step_s']:.2f} / {t['train_step_s']:.2f} s | {step} | {infer} | "
        f"{o['peak_rss_mb']:,.0f} / {t['peak_rss_mb']:,.0f} MB | {row['_file']} |"
    )


def _ratios(med: dict, per: dict, key: str) -> str:
    """ "ratio of medians (median of round ratios)", `~` when the two differ by more than 0.1."""
    noisy = abs(med[key] - per[key]) > 0.1
    return f"{med[key]:.2f} ({per[key]:.2f}){' ~' if noisy else ''}"


def table(paths: list[str]) -> str:
    head = (
        "| model (pyKT's) | parameters ours / pyKT | train step ours / pyKT | train ratio "
        "(per round) | inference ratio (per round) | peak RSS ours / pyKT, each alone | file |\n"
        "|---|---|---|---|---|---|---|"
    )
    return "\n".join([head, *(line(r) for r in rows(paths).values())]) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", nargs="+", help="bench_peers.py JSON files, later ones win")
    print(table(p.parse_args().files), end="")


if __name__ == "__main__":
    main()
