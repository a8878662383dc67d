"""The docs' table of `bench_peers.py` results: one row per model, from its JSON files.

    python benchmarks/peers_table.py benchmarks/results/peers_cpu_alternated.json \
        benchmarks/results/peers_cpu_alternated_repo.json ...      # prints markdown

Per model (a later file's row replaces an earlier one's): parameters ours / pyKT, the train-step
medians, the ratio of the medians and (in brackets) the median of the per-round ratios, the
same for inference, and each side's peak RSS measured alone. The per-round ratio times both
sides back to back in each round, so it is the figure to read when the machine's load moved
during the run; rows whose two ratios disagree by more than 0.1 are marked `~`. Skipped rows
say why. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(paths: list[str]) -> dict[str, dict]:
    """Model name -> its row; a model in a later file replaces its row from an earlier one."""
    out: dict[str, dict] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text()):
            out[row["model"]] = {**row, "_file": Path(path).name}
    return out


def line(row: dict) -> str:
    name = f"{row['model']} ({row['pykt_model']})"
    if "skipped" in row:
        return f"| {name} | - | - | skipped: {row['skipped']} | - | - | - |"
    o, t = row["ours"], row["theirs"]
    med, per = row["ours_over_theirs"], row["ours_over_theirs_per_round"]
    step = f"{med['train_step']:.2f} ({per['train_step']:.2f})"
    infer = f"{med['inference']:.2f} ({per['inference']:.2f})"
    noisy = abs(med["train_step"] - per["train_step"]) > 0.1
    return (
        f"| {name} | {o['params']:,} / {t['params']:,} | "
        f"{o['train_step_s']:.2f} / {t['train_step_s']:.2f} s | {step}{' ~' if noisy else ''} | "
        f"{infer} | {o['peak_rss_mb']:,.0f} / {t['peak_rss_mb']:,.0f} MB | {row['_file']} |"
    )


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
