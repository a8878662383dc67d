"""An executed notebook, read and rewritten for the report: HTML export, title, the summary and
source it shows, its warnings as one list of notes, paths relative to the workbook."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

from ..fileio import atomic_write_text
from ..provenance import ROOT

# wide tables scroll inside their cell instead of running off the page
WIDE_TABLES = ".jp-RenderedHTMLCommon table{display:block;overflow-x:auto;max-width:100%}"


def kernel_manager():
    """A kernel manager over IPC: ipykernel warns on every TCP start that its traffic is not
    encrypted (ten lines for ten notebooks); a local run has no need of TCP."""
    from jupyter_client.manager import AsyncKernelManager

    if os.name == "nt":  # no IPC sockets on Windows
        return AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            super().__init__(**kwargs)

    return IPCKernelManager


def to_html(executed: Path, target: Path) -> None:
    """Render an executed notebook to HTML, hiding cells tagged remove_input / remove_cell."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from traitlets.config import Config

    c = Config()
    c.TagRemovePreprocessor.remove_input_tags = {
        "remove_input",
        "parameters",
        "injected-parameters",
    }
    c.TagRemovePreprocessor.remove_cell_tags = {"remove_cell"}
    c.TagRemovePreprocessor.enabled = True
    exporter = HTMLExporter(config=c)
    exporter.register_preprocessor(TagRemovePreprocessor(config=c), enabled=True)
    body, _ = exporter.from_notebook_node(nbformat.read(str(executed), as_version=4))
    body = body.replace("</head>", f"<style>{WIDE_TABLES}</style></head>", 1)
    atomic_write_text(target, body)


def title_of(path: Path) -> str:
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    return line.lstrip("# ").strip()
    return path.stem


SUMMARY_TAG = "summary"
# "path:line: CategoryWarning: message" (Python's warning format; the next, indented line quotes
# the source line)
WARNING_LINE = re.compile(r"^(?P<path>\S[^:]*):(?P<line>\d+): (?P<cat>\w*Warning): (?P<msg>.*)$")


def _where(path: str) -> str:
    """A warning's file without this machine's folders: workbook-relative, or from the package
    folder on (site-packages/...)."""
    path = path.replace(str(ROOT) + os.sep, "")
    marker = "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else path


def collect_notes(executed: Path) -> list[str]:
    """Move the warnings printed to stderr by an executed notebook's cells into one "Notes" list
    at its end (no red boxes, no machine paths); other stderr text stays where it was. Returns
    the notes (each once, in order)."""
    path = Path(executed)
    nb = json.loads(path.read_text(encoding="utf-8"))
    notes: dict[str, None] = {}
    for cell in nb.get("cells", []):
        kept_outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream" or output.get("name") != "stderr":
                kept_outputs.append(output)
                continue
            text = output.get("text", "")
            kept, quoting = [], False
            for line in ("".join(text) if isinstance(text, list) else text).splitlines(True):
                m = WARNING_LINE.match(line.rstrip("\n"))
                if m:
                    notes[f"{m['cat']}: {m['msg']} ({_where(m['path'])}:{m['line']})"] = None
                    quoting = True
                elif quoting and line.startswith((" ", "\t")):
                    continue  # the quoted source line of the warning above
                else:
                    quoting = False
                    kept.append(line)
            if "".join(kept).strip():
                kept_outputs.append({**output, "text": kept})
        if "outputs" in cell:
            cell["outputs"] = kept_outputs
    if notes:
        lines = ["### Notes", "", "Warnings raised while this notebook ran:", ""]
        lines += [f"- {html.escape(note, quote=False)}" for note in notes]
        cell = {"cell_type": "markdown", "metadata": {}, "source": "\n".join(lines)}
        if nb.get("nbformat_minor", 0) >= 5:  # cells carry ids from nbformat 4.5 on
            cell["id"] = "kt-notes"
        nb["cells"].append(cell)
    atomic_write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return list(notes)


def read_source(executed: Path) -> str:
    """The source line a notebook displayed with `viz.show_source` ("" if none)."""
    try:
        nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            text = output.get("metadata", {}).get("kt_source")
            if text:
                return str(text)
    return ""


def default_source(params: dict) -> str:
    """A notebook that states no source trained on its data_dir, or on the simulator."""
    return f"this run: {params.get('data_dir') or 'the simulator'}"


def relative_paths(notebook: Path, output_path: Path | None = None) -> None:
    """Papermill records the absolute input/output paths of the machine that ran a notebook, and
    warnings print the absolute path of the file that raised them; committed notebooks carry
    both relative to the workbook instead. `output_path`: where the notebook will live (it ran
    into a temporary file beside it)."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    meta = nb.get("metadata", {}).get("papermill", {})
    if output_path is not None and "output_path" in meta:
        meta["output_path"] = str(Path(output_path).resolve())
    for key in ("input_path", "output_path"):
        if meta.get(key) and Path(meta[key]).is_absolute():
            try:
                meta[key] = str(Path(meta[key]).resolve().relative_to(ROOT))
            except ValueError:
                meta[key] = Path(meta[key]).name
    prefix = str(ROOT) + os.sep
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            if "text" in output:
                text = output["text"]
                lines = text if isinstance(text, list) else [text]
                output["text"] = [line.replace(prefix, "") for line in lines]
    atomic_write_text(notebook, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def markdown_html(text: str) -> str:
    """Markdown (tables included) as HTML, with mistune, the renderer nbconvert itself uses."""
    import mistune

    return mistune.html(text)


def read_summary(executed: Path) -> str:
    """HTML of the outputs of the cells tagged `summary` in an executed notebook ("" if none).

    Rich outputs (a DataFrame's HTML) are used as is, Markdown is rendered, plain text goes in
    <pre>, figures are left to the notebook's own page; a notebook that cannot be read gives ""
    (the index must render whatever happened).
    """
    try:
        nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    parts = []
    for cell in nb.get("cells", []):
        if SUMMARY_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/html" in data:
                parts.append("".join(data["text/html"]))
            elif "text/markdown" in data:  # IPython's Markdown(...): its text/plain is a repr
                parts.append(markdown_html("".join(data["text/markdown"])))
            elif "image/png" in data:  # figures stay in the notebook's page (text is "<Figure>")
                continue
            elif "text/plain" in data:
                parts.append(f"<pre>{html.escape(''.join(data['text/plain']))}</pre>")
            elif output.get("output_type") == "stream" and output.get("name") == "stdout":
                parts.append(f"<pre>{html.escape(''.join(output.get('text', '')))}</pre>")
    return "\n".join(parts)
