"""The names notebooks import for ablation grids: `kt_lib.runs.grid` (running, tables) and
`kt_lib.runs.grids` (the predefined grids)."""

from .runs.grid import Cell, aggregate, check_cells, run_grid, summarise
from .runs.grids import GRIDS, Grid, build_grid, list_grids, simakt_similarity

__all__ = [
    "GRIDS",
    "Cell",
    "Grid",
    "aggregate",
    "build_grid",
    "check_cells",
    "list_grids",
    "run_grid",
    "simakt_similarity",
    "summarise",
]
