"""`kt`: the workbook's one command, the top layer (nothing in kt_lib imports it).

    kt prepare NAME RAW_PATH OUT_DIR [...]   raw downloads -> pykt / 3-, 4-line folds (kt_lib.data)
    kt run --models M ... [--data-dir D]     one experiment: train, test once, one row per model
    kt study list|status|run|render NAME     the studies of record (results/<name>.json)
    kt leaderboard FILE... [--pairs A:B]     results files as one table, paired tests
    kt budget search|best [...]              seed 000's equal tuning budget (Optuna)
    kt memory build ...                      SimAKT's memory banks, once per dataset
    kt report run|check|index ...            notebooks -> HTML reports
    kt bench NAME [...]                      a checkout's benchmarks/bench_NAME.py (models, peers)

Each subcommand takes `--help`. Input errors (a bad value, a missing folder, an unknown name)
print one `error: ...` line and exit 2; `kt --debug ...` shows the traceback instead. The
`python -m kt_lib.<module>` forms run the same code without this layer: there an input error
shows its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import runpy
import sys
from collections.abc import Callable
from importlib import metadata

import yaml

from ..provenance import ROOT

# subcommand -> (module with `main(argv)`, argv prefix, one-line help)
COMMANDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "prepare": ("kt_lib.data.__main__", ("prepare",), "raw downloads -> the workbook's layouts"),
    "run": ("kt_lib.runs.experiment", (), "one experiment: train registered models, test once"),
    "study": ("kt_lib.runs.studies", (), "the studies of record: list, status, run, park, render"),
    "leaderboard": ("kt_lib.runs.leaderboard", (), "results files as one table, paired tests"),
    "budget": ("kt_lib.runs.budget", (), "seed 000's equal tuning budget: search, best"),
    "memory": ("kt_lib.cli.memory", (), "build SimAKT's memory banks once per dataset"),
    "report": ("kt_lib.reports", (), "run notebooks with Papermill, render HTML reports"),
    "bench": ("", (), "run benchmarks/bench_NAME.py of this checkout"),
}
# OSError: a missing, unreadable or unwritable path (FileNotFoundError, IsADirectoryError, ...);
# yaml.YAMLError: a malformed --set value or config file
INPUT_ERRORS = (ValueError, KeyError, OSError, TypeError, yaml.YAMLError)


def version() -> str:
    try:
        return metadata.version("kt-workbook")
    except metadata.PackageNotFoundError:
        return "unknown"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items()]
    return "usage: kt [--version] [--debug] COMMAND [ARGS ...]\n\ncommands:\n" + "\n".join(lines)


def _bench(argv: list[str]) -> int:
    scripts = sorted(
        p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py")
    )
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: kt bench NAME [ARGS ...]\n\nbenchmarks: {', '.join(scripts) or 'none'}")
        return 0
    if argv[0] not in scripts:
        raise ValueError(f"no benchmark {argv[0]!r}; the benchmarks are {', '.join(scripts)}")
    path = ROOT / "benchmarks" / f"bench_{argv[0]}.py"
    sys.argv = [f"kt bench {argv[0]}", *argv[1:]]
    sys.path.insert(0, str(path.parent))  # the scripts import their siblings
    runpy.run_path(str(path), run_name="__main__")
    return 0


@contextlib.contextmanager
def one_line_usage_errors(name: str):
    """While a command runs, argparse reports a bad flag in one line naming the flag and
    `--help` (instead of the whole usage block before it), exit status 2 as always."""

    def error(parser: argparse.ArgumentParser, message: str):
        parser.exit(2, f"error: {message} (kt {name} --help lists the options)\n")

    saved = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = error
    try:
        yield
    finally:
        argparse.ArgumentParser.error = saved


def _entry(name: str) -> Callable[[list[str]], object]:
    module, prefix, _ = COMMANDS[name]
    if not module:
        return _bench
    main = importlib.import_module(module).main
    return lambda argv: main([*prefix, *argv])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv[:1]
    if debug:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        print(f"kt {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n{usage()}", file=sys.stderr)
        return 2
    program, sys.argv[0] = sys.argv[0], f"kt {name}"  # argparse's usage says `kt run`
    try:
        with one_line_usage_errors(name):
            code = _entry(name)(rest)
    except SystemExit as exc:  # argparse's own exit (--help, a bad flag), or a message
        if exc.code is None or isinstance(exc.code, int):
            return 0 if exc.code is None else exc.code
        print(f"error: {exc.code}", file=sys.stderr)  # SystemExit("...") exits 1 in python -m
        return 2
    except INPUT_ERRORS as exc:
        if debug:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {message} (kt --debug {name} ... shows the traceback)", file=sys.stderr)
        return 2
    finally:  # called in-process (tests, notebooks): leave the caller's program name as it was
        sys.argv[0] = program
    return code if isinstance(code, int) else 0
