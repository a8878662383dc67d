"""`python -m kt_lib.leaderboard FILE...`: results files as one markdown table (see
`kt_lib.runs.leaderboard`); the names notebooks import from here."""

import sys

from .runs.leaderboard import check_plan, main, run_leaderboard, run_plan
from .runs.plan import fold_plan, profile_plan, run_key
from .runs.results import add_runs, load_results
from .runs.tables import leaderboard, protocols, published_comparison, throughput, to_markdown

__all__ = [
    "add_runs",
    "check_plan",
    "fold_plan",
    "leaderboard",
    "load_results",
    "main",
    "profile_plan",
    "protocols",
    "published_comparison",
    "run_key",
    "run_leaderboard",
    "run_plan",
    "throughput",
    "to_markdown",
]

if __name__ == "__main__":
    sys.exit(main())
