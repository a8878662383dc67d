"""The names notebooks import for SimAKT's hyperparameter search (see `kt_lib.runs.search`)."""

from .runs.search import best_overrides, importance, run_study, trials_frame

__all__ = ["best_overrides", "importance", "run_study", "trials_frame"]
