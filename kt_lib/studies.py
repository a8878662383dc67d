"""`python -m kt_lib.studies list|status|run|render`: the studies of record (see
`kt_lib.runs.studies`)."""

from .runs.studies import STUDIES, Part, Study, get, main, render, run, status

__all__ = ["STUDIES", "Part", "Study", "get", "main", "render", "run", "status"]

if __name__ == "__main__":
    main()
