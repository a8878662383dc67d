"""`python -m kt_lib.experiment`: train registered models and write a results file (see
`kt_lib.runs.experiment`). `run_experiment` here keeps the keyword signature of notebooks; the
typed entry is `kt_lib.runs.run_experiment(spec, bundle)`."""

from .runs.experiment import ExperimentResult, main
from .runs.experiment import run_model as run_experiment

__all__ = ["ExperimentResult", "main", "run_experiment"]

if __name__ == "__main__":
    main()
