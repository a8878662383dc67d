"""`kt prepare NAME RAW_PATH OUT_DIR [options]`: raw public dataset -> pykt CSV,
the 3/4-line layout and prepare.json (kt_lib.data.prepare)."""

from __future__ import annotations

import argparse
import sys

from .prepare import DATASETS, PrepareOptions, prepare


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kt_lib.data")
    sub = p.add_subparsers(dest="command", required=True)
    d = PrepareOptions()
    pp = sub.add_parser("prepare", help="prepare a raw public dataset")
    pp.add_argument("name", choices=sorted(DATASETS))
    pp.add_argument("raw_path", help="the raw file, or the folder holding it")
    pp.add_argument("out_dir")
    pp.add_argument("--seed", type=int, default=d.seed, help="split seed (pykt: 1024)")
    pp.add_argument("--min-seq-len", type=int, default=d.min_seq_len)
    pp.add_argument("--test-frac", type=float, default=d.test_frac)
    pp.add_argument("--folds", type=int, default=d.n_folds, dest="n_folds")
    pp.add_argument(
        "--ordinal",
        action="store_true",
        help="ordinal responses from partial credit (ASSISTments K=4, EdNet K=3)",
    )
    pp.add_argument("--max-users", type=int, default=None, help="EdNet: pykt's first N users")
    pp.add_argument("--task", default=d.task, help="Eedi task: 1_2 or 3_4")
    pp.add_argument(
        "--bands",
        type=int,
        choices=[5, 4, 2],
        default=d.bands,
        help="OULAD: K of the score bands (default 5: < 40, 40-59, 60-69, 70-84, >= 85; "
        "4 merges the top two; 2: pass >= 40)",
    )
    pp.add_argument(
        "--keep-banked",
        action="store_true",
        help="OULAD: keep banked results (grades carried over from an earlier presentation; "
        "dropped by default: their date is not when the work was done)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    args.pop("command")
    name, raw, out = args.pop("name"), args.pop("raw_path"), args.pop("out_dir")
    try:
        result = prepare(name, raw, out, **args)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = result.counts
    dropped = ", ".join(f"{k}: {v}" for k, v in c["dropped"].items() if v) or "none"
    print(
        f"{name}: {c['rows_read']} rows read, dropped {dropped}; {c['students']} students "
        f"({c['dropped_students_short']} shorter than min_seq_len dropped), "
        f"{c['interactions']} interactions, {c['skills']} skills, {c['problems']} problems, "
        f"K={result.K}\nwrote {result.pykt_dir}, {result.line_dir}, {out}/prepare.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
