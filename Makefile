# kt-workbook: `make reports` and `make test` create the environment on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= quick
NOTEBOOKS ?=
GPU ?=
STAMP := $(VENV)/.installed$(if $(GPU),-gpu)
# GPU=1: the pinned torch from the standard index (PyPI's Linux wheels are CUDA builds), then the
# same extras; run `make gpu-check` first there.
TORCH_INDEX := $(if $(GPU),--index-url https://pypi.org/simple,)

.PHONY: env reports test test-fast lint lab benchmarks gpu-check notebooks clean

env: $(STAMP)

# torch first and alone: `pip install torch==2.13.0` takes the local CPU wheel here (no CUDA
# packages); elsewhere set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
# The installs go through uv where it can be had (one small pinned wheel from the registry):
# on this project's 2-core machines it installs and byte-compiles the same pinned versions in
# about 90 s where pip took 193 s. uv reads no pip configuration: PIP_FIND_LINKS and
# PIP_EXTRA_INDEX_URL (space-separated lists) are handed on, every index is searched as pip does
# (unsafe-best-match: uv's own default takes a package from the first index holding it), and
# anything else (pip.conf's indexes, an offline machine) is covered by pip: if uv cannot be had
# or any uv step fails, pip installs the whole environment. Both compile every module's
# bytecode at install: keep that (with PYTHONDONTWRITEBYTECODE=1, as on these machines, skipping
# it saved 65 s of install and cost 5 minutes of tests, every process compiling from source).
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode --index-strategy unsafe-best-match
PIP := $(BIN)/pip install --quiet
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	if $(PIP) uv==0.13.9 2>/dev/null && export UV_FIND_LINKS="$$(echo $$PIP_FIND_LINKS | tr ' ' ',')" \
	    UV_EXTRA_INDEX_URL="$$PIP_EXTRA_INDEX_URL" && \
	    $(UV) $(TORCH_INDEX) torch==2.13.0 && $(UV) -c constraints.txt -e ".[dev,ray]"; then :; \
	else echo "uv unavailable or failed: installing with pip"; \
	    $(PIP) $(TORCH_INDEX) torch==2.13.0 && $(PIP) -c constraints.txt -e ".[dev,ray]"; fi
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (kt-workbook)" > /dev/null
	touch $(STAMP)

reports: env
	$(BIN)/kt report run --profile $(PROFILE) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS))

# Re-execute the committed notebooks in place with their defaults (refreshes stored outputs).
notebooks: env
	$(BIN)/kt report run --inplace $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS))

# pytest (TEST_WORKERS xdist workers, a test file each at a time) and nbval side by side, one
# thread each: on two cores pytest's workers take the second core back once the notebooks end
# (pytest in one process left it idle for most of the run). nbval's report is printed after
# pytest's, and the target fails if either fails.
TEST_WORKERS ?= 2
NBVAL := --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider notebooks/
test: env
	@log=$$(mktemp); export OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}; \
	$(BIN)/python -m pytest -q $(NBVAL) > $$log 2>&1 & nb=$$!; \
	trap 'kill $$nb 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests; t=$$?; \
	wait $$nb; n=$$?; echo "== notebooks (nbval, run beside pytest)"; cat $$log; rm -f $$log; \
	test $$t -eq 0 -a $$n -eq 0

test-fast: env
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

lint: env
	$(BIN)/ruff check kt_lib tests benchmarks
	$(BIN)/ruff format --check kt_lib tests benchmarks

# Jupyter flags through ARGS, e.g. make lab ARGS="--allow-root --no-browser --port 8899"
ARGS ?=
lab: env
	$(BIN)/jupyter lab notebooks/ $(ARGS)

benchmarks: env
	$(BIN)/python benchmarks/bench_models.py

# Every GPU figure in one process (benchmarks/gpu_check.py): cuda tests, bench_models (tf32, bf16),
# bench_peers, a short ASSIST2009 run. GPU_CHECK_ARGS="--device cpu --quick --out /tmp/c" on CPU.
GPU_CHECK_ARGS ?=
gpu-check: env
	$(BIN)/python benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) reports/*.html reports/*.ipynb reports/index.html .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
