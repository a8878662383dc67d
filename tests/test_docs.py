"""The README and docs/ cannot rot: every results block is the rendering of its results file, every
shell command names a make target, module or script that exists and flags it accepts, and the
README's Python example runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from cli_helpers import run_many

from kt_lib.runs import studies
from kt_lib.runs.study_render import render_summary

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXT = {p.relative_to(ROOT).as_posix(): p.read_text() for p in PAGES}

# a python command: module or script, then its arguments up to the end of the (joined) line
PY_CMD = re.compile(r"(?:\.venv/bin/)?python3? (-m [\w.]+|benchmarks/\w+\.py)([^;&|#\n]*)")
# the `kt` command: `kt SUB args`, checked as `python -m kt_lib.cli SUB args`
KT_CMD = re.compile(r"(?:^|(?<=[\s/(]))kt ([a-z]+)([^;&|#\n]*)")
MAKE_CMD = re.compile(r"^\s*make ([\w-]+)", re.M)


def bash_blocks(text: str) -> list[str]:
    """Fenced bash blocks, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [re.sub(r"\\\n\s*", " ", b) for b in blocks]


def commands() -> list[tuple[str, str, str]]:
    """(page, target, argument string) of every python command in a bash block or code span."""
    found = []
    for page, text in TEXT.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]
        for block in bash_blocks(text) + spans:
            for target, args in PY_CMD.findall(block):
                found.append((page, target, args))
            for sub, args in KT_CMD.findall(block):
                found.append((page, f"-m kt_lib.cli {sub}", args))
    return found


_HELP: dict[str, str] = {}


def fetch_help(keys: set[tuple[str, ...]]) -> None:
    """Fill `_HELP` with the --help text of each (target, *sub) not yet in it, all in one
    interpreter (tests/cli_helpers.py)."""
    todo = sorted(k for k in keys if " ".join(k) not in _HELP)
    if not todo:
        return
    results = run_many([[*k[0].split(), *k[1:], "--help"] for k in todo])
    for key, (code, text, err) in zip(todo, results, strict=True):
        key = " ".join(key)
        _HELP[key] = f"FAILED: `python {key} --help`: {err.strip()[-300:]}" if code else text


def help_text(target: str, sub: tuple[str, ...] = ()) -> str:
    fetch_help({(target, *sub)})
    return _HELP[" ".join([target, *sub])]


def subcommands(target: str, words: list[str]) -> tuple[str, ...]:
    """The leading words that the command's help lists as subcommands ({a,b,...})."""
    choices = set()
    for group in re.findall(r"\{([\w,-]+)\}", help_text(target)):
        choices |= set(group.split(","))
    return tuple(w for w in words[:1] if w in choices)


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_every_results_block_is_the_rendering_of_its_file(name):
    """Each study's block between its markers, wherever it appears, is exactly
    `kt study render NAME`."""
    rendered = studies.render(studies.get(name))
    pattern = rf"<!-- study:{name} -->\n(.*?)<!-- /study:{name} -->"
    blocks = [(page, b) for page, text in TEXT.items() for b in re.findall(pattern, text, re.S)]
    assert blocks, f"no page has a <!-- study:{name} --> block"
    for page, block in blocks:
        assert block == rendered, (
            f"{page}: the block of {name!r} differs from its results file: run "
            f"`kt study render {name} --write`"
        )


@pytest.mark.parametrize("name", sorted(studies.STUDIES))
def test_every_summary_block_is_the_short_rendering_of_its_file(name):
    """A study's short table (`<!-- study:NAME:summary -->`, e.g. the README's leaderboard), where
    a page has one, is exactly `kt study render NAME --summary`."""
    pattern = rf"<!-- study:{name}:summary -->\n(.*?)<!-- /study:{name}:summary -->"
    blocks = [(page, b) for page, text in TEXT.items() for b in re.findall(pattern, text, re.S)]
    if not blocks:
        pytest.skip(f"no page has a short table of {name}")
    rendered = render_summary(studies.get(name))
    for page, block in blocks:
        assert block == rendered, (
            f"{page}: the short table of {name!r} differs from its results file: run "
            f"`kt study render {name} --summary --write`"
        )


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    used = {t for text in TEXT.values() for b in bash_blocks(text) for t in MAKE_CMD.findall(b)}
    assert used and used <= targets, used - targets


def test_commands_name_modules_and_flags_that_exist():
    """Each `python -m MODULE [SUB] --flag ...` and `python benchmarks/X.py --flag ...` in the
    pages: the module or script answers --help, and every flag used is in that help."""
    cmds = commands()
    assert len(cmds) >= 10, cmds
    fetch_help({(target,) for _, target, _ in cmds})  # two interpreters in all, not one a command
    fetch_help({(t, *subcommands(t, args.split())) for _, t, args in cmds})
    bad = []
    for page, target, args in cmds:
        words = args.split()
        sub = subcommands(target, words)
        helptext = help_text(target, sub)
        if helptext.startswith("FAILED"):
            bad.append(f"{page}: {helptext}")
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
            if flag not in helptext:
                bad.append(f"{page}: `python {target} {' '.join(sub)}` has no {flag}")
    assert not bad, "\n".join(bad)


def _class_log(folder: Path, students: int = 50) -> Path:
    """A class of `students` as an interaction log with the usual column names."""
    import numpy as np

    from kt_lib.data import simulate

    sim = simulate(num_students=students, seq_len=20, num_c=5, seed=0).data
    lines = ["student,question,skill,correct,timestamp"]
    for s in sim.students:
        for t, (q, r) in enumerate(zip(s.q, s.r, strict=True)):
            lines.append(f"s{s.uid},p{(q * 7 + t) % 11},k{q},{r},{t}")
    folder.mkdir()
    (folder / "class.csv").write_text("\n".join(lines) + "\n")
    assert len(np.unique([line.split(",")[0] for line in lines[1:]])) == students
    return folder


def test_readme_examples_run_on_a_class_of_50(tmp_path, monkeypatch):
    """The README's "your own data" examples as written (paper preset; one epoch instead of 30)
    on a 50-student log: the Python one, and the shell one (SimAKT beside DTransformer) through
    the same entry point. SimAKT's banks shrink to the class, with a notice."""
    folder = _class_log(tmp_path / "my_folder")
    code = re.search(r"```python\n(.*?)```", TEXT["README.md"], re.S).group(1)
    code = code.replace("path/to/my_folder", str(folder)).replace("epochs=30", "epochs=1")
    printed: list = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.extend(a))
    with pytest.warns(UserWarning, match="bank sizes shrink to fit"):
        exec(compile(code, "README.md", "exec"), {})
    assert printed and 0.0 <= printed[0]["auc"] <= 1.0
    monkeypatch.undo()
    shell = next(b for b in bash_blocks(TEXT["README.md"]) if "kt run" in b)
    argv = shell.split("kt run", 1)[1].split("\n")[0].split()
    argv = [str(folder) if a == "path/to/my_folder" else a for a in argv]
    argv = [str(tmp_path / "mine.json") if a == "runs/mine.json" else a for a in argv]
    argv[argv.index("--epochs") + 1] = "1"
    from kt_lib.runs import experiment

    experiment.main(argv)
    rows = __import__("json").loads((tmp_path / "mine.json").read_text())["results"]
    assert [r["model"] for r in rows] == ["dtransformer", "simakt"]


def test_extending_model_example_is_a_whole_model_that_passes_the_audits():
    """docs/extending.md's model file: executed as a module, registered, audited for causality
    and q_t alignment, trained one step; then unregistered."""
    import types

    import torch

    from kt_lib.audit import audit_alignment, audit_causality, random_batch
    from kt_lib.models import MODELS, build_model

    page = TEXT["docs/extending.md"]
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    module = types.ModuleType("biaskt_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    try:
        exec(compile(code, "docs/extending.md", "exec"), module.__dict__)
        model = build_model("biaskt", preset="paper", num_c=7)
        batch = random_batch(7, B=3, L=15, seed=4)
        assert audit_causality(model, batch, steps=list(range(15)))
        assert audit_alignment(model, batch, steps=list(range(15)))
        terms = model.loss(model(batch), batch)
        terms["total"].backward()
        assert model.w.grad is not None and torch.isfinite(model.w.grad).all()
        with pytest.raises(ValueError, match="decay must be in"):
            build_model("biaskt", num_c=7, decay=1.5)
    finally:
        MODELS.pop("biaskt", None)
        sys.modules.pop(module.__name__, None)
