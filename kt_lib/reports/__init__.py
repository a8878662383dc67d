"""Run the notebooks headlessly with Papermill and publish them as HTML with an index page.

    kt report run [--profile quick|full] [--notebooks 01 03] [--out reports]
    kt report run --inplace [--notebooks 01 03]  # refresh the committed notebooks' outputs

Profiles live in notebooks/params/<profile>.yaml: a `common` mapping applied to every notebook and
one mapping per notebook stem; a notebook only receives the parameters its `parameters` cell
declares. `--inplace` runs the committed notebooks with their own defaults (plus `--set`) and
writes them back under notebooks/: it takes no `--profile` and no `--out`. Each run records the
git commit, parameters and package versions in reports/index.html.

A notebook may show its key results in cells tagged `summary` (e.g. a small DataFrame); the index
copies those outputs into a summary section, so a reader browses every headline table on one page.
A notebook that fails still gets its row (and whatever summary it produced before failing).
The index names each notebook's source: what it displayed with `viz.show_source` (notebook 10:
the committed store, with its runs' commits, devices and dates), else this run on its data_dir or
the simulator. Warnings a notebook printed are gathered into one "Notes" list at the end of its
page, without this machine's paths (`executed.collect_notes`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import html
import json
import os
import re
import time
from pathlib import Path

from ..config import read_mapping
from ..fileio import atomic_write_text
from ..provenance import ROOT, git_commit, versions
from ..runs.leaderboard import check_plan
from ..runs.plan import PROFILE_DEFAULTS, profile_plan
from ..runs.tables import to_markdown
from .executed import (
    collect_notes,
    default_source,
    kernel_manager,
    read_source,
    read_summary,
    relative_paths,
    title_of,
    to_html,
)

__all__ = [
    "collect_notes",
    "default_source",
    "read_source",
    "read_summary",
    "relative_paths",
    "title_of",
    "to_html",
]

NOTEBOOKS = ROOT / "notebooks"
COMPARE = NOTEBOOKS / "10_compare_models.ipynb"  # the leaderboard notebook (`check`)


def load_profile(name: str) -> dict:
    """Read notebooks/params/<name>.yaml (clear error listing the available profiles), checked
    by `check_profile`."""
    path = NOTEBOOKS / "params" / f"{name}.yaml"
    if not path.exists():
        have = sorted(p.stem for p in (NOTEBOOKS / "params").glob("*.yaml"))
        raise FileNotFoundError(f"no profile {name!r} ({path}); available: {have}")
    profile = with_data_root(read_mapping(path))
    check_profile(profile, path)
    return profile


def data_root() -> str:
    """Where the public datasets are: $KT_DATA, else ../shared/data beside the checkout (as a
    path relative to the repository root, where the notebooks run)."""
    return os.environ.get("KT_DATA") or "../shared/data"


def with_data_root(value):
    """A profile with `${KT_DATA}` in its strings replaced by `data_root()`."""
    if isinstance(value, str):
        return value.replace("${KT_DATA}", data_root())
    if isinstance(value, list):
        return [with_data_root(v) for v in value]
    if isinstance(value, dict):
        return {k: with_data_root(v) for k, v in value.items()}
    return value


def declared_params(path: Path) -> set[str]:
    """The names a notebook's `parameters` cell declares."""
    import nbformat
    import papermill as pm

    # papermill's inspector skips annotations it cannot parse (e.g. `str | None`): also read the
    # names assigned in the parameters cell
    declared = {p["name"] for p in pm.inspect_notebook(str(path)).values()}
    for cell in nbformat.read(str(path), as_version=4).cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            declared |= set(re.findall(r"^([A-Za-z_]\w*)\s*[:=]", cell.source, re.M))
    return declared


def _nearest(name: str, valid: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(valid), n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {sorted(valid)}"


def check_profile(profile: dict, source: Path | str = "profile") -> None:
    """Refuse a profile naming a notebook that does not exist, or a parameter the notebook (or,
    under `common`, every notebook) does not declare: a typo would run "with defaults"."""
    notebooks = {p.stem: p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    declared = {stem: declared_params(path) for stem, path in notebooks.items()}
    for key, params in profile.items():
        if key == "common":
            valid = set().union(*declared.values())
        elif key not in notebooks:
            raise ValueError(f"{source}: no notebook {key!r}{_nearest(key, set(notebooks))}")
        else:
            valid = declared[key]
        if not isinstance(params, dict):
            raise ValueError(f"{source}: {key!r} must map parameters to values, got {params!r}")
        for name in params:
            if name not in valid:
                where = "any notebook" if key == "common" else key
                raise ValueError(
                    f"{source}: {key}.{name}: {where} declares no parameter {name!r}"
                    f"{_nearest(name, valid)}"
                )


def notebook_params(profile: dict, path: Path) -> dict:
    """Parameters for one notebook: common + per-notebook, filtered to what it declares."""
    declared = declared_params(path)
    merged = {**(profile.get("common") or {}), **(profile.get(path.stem) or {})}
    return {k: v for k, v in merged.items() if k in declared}


def write_index(out: Path, runs: list[dict], profile: str) -> None:
    """reports/index.html: one row per notebook with status, time, parameters and summary link,
    then each notebook's summary tables."""
    rows, summaries = [], []
    for r in runs:
        link = (
            f'<a href="{r["stem"]}.html">{html.escape(r["title"])}</a>'
            if r["ok"]
            else html.escape(r["title"])
        )
        status = "ok" if r["ok"] else f'<span class="err">failed: {html.escape(r["error"])}</span>'
        params = html.escape(json.dumps(r["params"])) if r["params"] else "defaults"
        summary = r.get("summary", "")
        source = html.escape(r.get("source") or default_source(r["params"]))
        jump = f'<a href="#summary-{r["stem"]}">summary</a>' if summary else "-"
        rows.append(
            f"<tr><td>{r['stem']}</td><td>{link}</td><td>{status}</td>"
            f"<td>{r['seconds']:.0f} s</td><td>{source}</td><td>{jump}</td>"
            f"<td><code>{params}</code></td></tr>"
        )
        if summary:
            summaries.append(
                f'<h3 id="summary-{r["stem"]}">{r["stem"]} &middot; {link}</h3>\n'
                f'<p class="source">Source: {source}</p>\n<div class="summary">{summary}</div>'
            )
    vers = ", ".join(f"{k} {v}" for k, v in versions().items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kt-workbook reports</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:4px 8px;
vertical-align:top}}code{{font-size:85%}}.err{{color:#b00}}
.summary table{{width:auto;font-size:85%}}.summary{{overflow-x:auto}}
.source{{color:#555;font-size:90%}}</style></head><body>
<h1>kt-workbook reports</h1>
<p>Profile <b>{html.escape(profile)}</b> &middot; run at commit
<code>{html.escape(git_commit())}</code> (a committed store's runs name their own commits)
&middot; generated {dt.datetime.now().isoformat(timespec="seconds")}</p>
<p>Versions: {html.escape(vers)}</p>
<table><tr><th>#</th><th>notebook</th><th>status</th><th>time</th><th>source</th>
<th>summary</th><th>parameters</th></tr>
{chr(10).join(rows)}
</table>
<h2>Summaries</h2>
{chr(10).join(summaries) or "<p>No notebook tagged a summary cell.</p>"}
</body></html>
"""
    atomic_write_text(out / "index.html", page)
    plain = [{k: v for k, v in r.items() if k != "summary"} for r in runs]
    atomic_write_text(
        out / "runs.json",
        json.dumps(
            {"profile": profile, "commit": git_commit(), "versions": versions(), "runs": plain},
            indent=2,
        ),
    )


def check_run_options(profile: str | None, only: list[str] | None, out, inplace: bool) -> None:
    """Refuse options `run` would ignore: `--profile` or `--out` with `--inplace`, an empty
    `--notebooks` (or an empty name, which matches every notebook)."""
    if inplace and profile is not None:
        raise SystemExit(
            f"--profile {profile} has no effect with --inplace: the committed notebooks run with "
            "their own defaults (use --set to change a parameter); leave out --profile, or drop "
            "--inplace to render a report"
        )
    if inplace and out is not None:
        raise SystemExit(
            f"--out {out} has no effect with --inplace: the notebooks are rewritten where they "
            "are, under notebooks/; leave out --out, or drop --inplace to render HTML into it"
        )
    if only is not None and (not only or not all(o.strip() for o in only)):
        raise SystemExit(
            f"--notebooks {only}: give notebook stems or number prefixes (e.g. 01 03), or leave "
            "out --notebooks to run every notebook"
        )


def select_notebooks(only: list[str] | None) -> list[Path]:
    """The notebooks whose stems start with one of `only` (all when None); a name matching no
    notebook is refused, not dropped."""
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if only is None:
        return paths
    unmatched = [o for o in only if not any(p.stem.startswith(o) for p in paths)]
    if unmatched:
        raise SystemExit(
            f"--notebooks {unmatched}: no notebook matches; available: {[p.stem for p in paths]}"
        )
    return [p for p in paths if any(p.stem.startswith(o) for o in only)]


def run(
    profile: str | None = None,
    only: list[str] | None = None,
    out: Path | None = None,
    inplace: bool = False,
    overrides: dict | None = None,
) -> list[dict]:
    """Execute the selected notebooks (all by default) and render the report into `out`
    (reports/) with `profile` ("quick" by default); `overrides` (parameter -> value) go over the
    profile in every selected notebook that declares them. `inplace` rewrites the committed
    notebooks instead, with their defaults and `overrides`: it takes no `profile` and no `out`."""
    import papermill as pm

    check_run_options(profile, only, out, inplace)
    profile = "quick" if profile is None else profile
    out = out or ROOT / "reports"
    if not inplace:
        out.mkdir(parents=True, exist_ok=True)
    prof = {} if inplace else load_profile(profile)
    if overrides:
        prof = {**prof, "common": {**(prof.get("common") or {}), **overrides}}
        prof = {
            k: v if k == "common" or not isinstance(v, dict) else {**v, **overrides}
            for k, v in prof.items()
        }
    paths = select_notebooks(only)
    if overrides:  # a misspelt parameter must not be dropped silently
        declared = set().union(*(notebook_params(prof, path) for path in paths))
        unknown = sorted(set(overrides) - declared)
        if unknown:
            raise SystemExit(f"--set {unknown}: no selected notebook declares these parameters")
    runs = []
    for path in paths:
        params = notebook_params(prof, path)
        # in place: papermill writes as it runs, so it writes beside the notebook (a dot-file no
        # notebook glob matches) and the notebook is replaced only once its run has succeeded
        target = path.with_name(f".{path.stem}.running.ipynb") if inplace else out / path.name
        print(f"[{path.stem}] running with {params or 'defaults'}", flush=True)
        t0 = time.perf_counter()
        record = {
            "stem": path.stem,
            "title": title_of(path),
            "params": params,
            "ok": True,
            "error": "",
        }
        try:
            pm.execute_notebook(
                str(path),
                str(target),
                parameters=params,
                cwd=str(ROOT),
                kernel_name="python3",
                progress_bar=False,
                kernel_manager_class=kernel_manager(),
            )
            if inplace:
                relative_paths(target, output_path=path)
                os.replace(target, path)
            else:
                record["notes"] = collect_notes(target)
                to_html(target, out / f"{path.stem}.html")
        except Exception as exc:  # a failed notebook is reported, the others still run
            lines = str(exc).splitlines() or [""]
            record.update(ok=False, error=f"{type(exc).__name__}: {lines[0]}")
            if inplace and target.exists():  # the committed notebook stays as it was
                shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
                record["error"] += f" (the notebook is unchanged; the failed run is in {shown})"
        record["seconds"] = time.perf_counter() - t0
        if not inplace:
            record["summary"] = read_summary(target)
            record["source"] = read_source(target)
        print(
            f"[{path.stem}] {'ok' if record['ok'] else record['error']} "
            f"({record['seconds']:.0f} s)",
            flush=True,
        )
        runs.append(record)
    if not inplace:
        write_index(out, runs, profile)
    if not all(r["ok"] for r in runs):
        raise SystemExit(f"{sum(not r['ok'] for r in runs)} notebook(s) failed")
    return runs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute notebooks and render reports")
    r.add_argument("--profile", default=None, help="notebooks/params/<profile>.yaml (quick)")
    r.add_argument("--notebooks", nargs="+", default=None, help="stems or number prefixes")
    r.add_argument("--out", type=Path, default=None, help="report folder (reports/)")
    r.add_argument(
        "--inplace",
        action="store_true",
        help="refresh the committed notebooks in place (no --profile, no --out)",
    )
    r.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="parameter overrides (YAML values), e.g. --set threads=1 'models=[dkt, sakt]'",
    )
    c = sub.add_parser(
        "check",
        help="dry-run the leaderboard plan of a profile (runs.plan.profile_plan, the plan "
        "notebook 10 trains): every (dataset, model) cell builds, prepares and takes one "
        "training step (runs.leaderboard.check_plan)",
    )
    c.add_argument("--profile", default="quick")
    c.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    if a.cmd == "check":
        board = check(a.profile, parse_overrides(a.set))
        if not board["ok"].all():
            raise SystemExit(f"{int((~board['ok']).sum())} cell(s) of the plan fail")
        return
    run(a.profile, a.notebooks, a.out, a.inplace, parse_overrides(a.set))


def check(profile: str = "quick", overrides: dict | None = None):
    """`runs.leaderboard.check_plan` over the leaderboard plan of `profile` (its `common` and
    10_compare_models parameters, then `overrides`, over `runs.plan.PROFILE_DEFAULTS`: the one
    plan notebook 10 trains, built by `runs.plan.profile_plan`); prints the table and returns
    it."""
    prof = load_profile(profile)
    unknown = sorted(set(overrides or {}) - set(PROFILE_DEFAULTS))
    if unknown:  # a misspelt name, or a setting of the training the dry run does not do
        raise SystemExit(
            f"--set {unknown}: not a parameter of the plan that `check` builds; its "
            f"parameters are {sorted(PROFILE_DEFAULTS)}"
        )
    params = {**(prof.get("common") or {}), **(prof.get(COMPARE.stem) or {}), **(overrides or {})}
    plan = profile_plan(params)
    max_len = params.get("max_len", PROFILE_DEFAULTS["max_len"])
    board = check_plan(plan, max_len=max_len)
    print(to_markdown(board.drop(columns=["warnings"]), index=False))
    return board


def parse_overrides(items: list[str]) -> dict:
    """`KEY=VALUE` strings to a dict, values read as YAML (`3`, `null`, `[dkt, sakt]`)."""
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"--set expects KEY=VALUE with a parameter name, got {item!r}")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise SystemExit(f"--set {key}: {value!r} is not a YAML value ({exc})") from exc
    return out
