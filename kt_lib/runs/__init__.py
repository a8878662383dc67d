"""The experiment layer: typed run specs, execution, plans, the results store, tables, stats,
search and the studies of record. Modules depend one way:

    data, spec, record -> experiment -> execute -> plan, results, tables, stats
        -> leaderboard, grid, grids, search -> studies
"""

from .data import DataSpec
from .experiment import ExperimentResult, Splits, run_experiment
from .grid import Cell, run_grid
from .leaderboard import check_plan, run_leaderboard, run_plan
from .plan import LeaderboardPlan, profile_plan
from .record import RunRecord
from .results import add_runs, load_results
from .spec import DEFAULT_PRESET, EvalConfig, ModelSettings, RunSpec, Variant

__all__ = [
    "DEFAULT_PRESET",
    "Cell",
    "DataSpec",
    "EvalConfig",
    "ExperimentResult",
    "LeaderboardPlan",
    "ModelSettings",
    "RunRecord",
    "RunSpec",
    "Splits",
    "Variant",
    "add_runs",
    "check_plan",
    "load_results",
    "profile_plan",
    "run_experiment",
    "run_grid",
    "run_leaderboard",
    "run_plan",
]
