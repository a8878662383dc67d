"""Simulator speed: 5000 students x 200 steps, median of 3 runs, printed as JSON."""

import json
import statistics
import time

from kt_lib.data.synthetic import simulate


def main(students: int = 5000, steps: int = 200, repeats: int = 3) -> None:
    """Time `simulate` at the default emission and print the median."""
    times = []
    for seed in range(repeats):
        start = time.perf_counter()
        simulate(num_students=students, seq_len=steps, seed=seed)
        times.append(time.perf_counter() - start)
    print(
        json.dumps(
            {"students": students, "steps": steps, "seconds": round(statistics.median(times), 4)}
        )
    )


if __name__ == "__main__":
    main()
