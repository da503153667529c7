"""The provenance appendix: runs read, every file read with its sha256, every claim and figure with its file."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.paper.claims import ClaimSet, ResolvedClaim
from offload_lab.paper.figures import FigureRecord
from offload_lab.paper.formats import plural


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def content_widths(header: list[str], rows: list[list[str]], cap: int = 64, floor: int = 6) -> list[int]:
    """Each column's dashes from the length of its cells (the 90th percentile, so that one long sentence does not
    widen a column of short values; bounded): pandoc takes a wide pipe table's relative column widths from them."""
    widths = []
    for i, h in enumerate(header):
        lengths = sorted(len(r[i]) for r in rows) or [0]
        widths.append(min(cap, max(floor, len(h), lengths[int(0.9 * (len(lengths) - 1))])))
    return widths


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    widths = content_widths(header, rows)
    sep = "|" + "|".join((":" if a == "l" else "") + "-" * w + (":" if a == "r" else "") for w, a in zip(widths, align))
    lines = ["| " + " | ".join(header) + " |", sep + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


_RUN_ID_RE = re.compile(r"/(\d{8}T\d{6}Z-[0-9a-f]+)/")


def _short_file(path: str, claims: ClaimSet) -> str:
    """``experiment/file`` for the run the paper reads of an experiment, ``experiment/run/file`` for any other."""
    for info in claims.runs.values():
        prefix = info.path.rstrip("/") + "/"
        if path.startswith(prefix):
            return f"{info.experiment}/{path[len(prefix):]}"
    m = _RUN_ID_RE.search(path)
    if m:
        head = path[: m.start()]
        return f"{Path(head).name}/{m.group(1)}/{path[m.end():]}"
    return Path(path).name


def _printed(c: ResolvedClaim) -> str:
    if c.kind == "table":
        rows = len((c.value or {}).get("rows") or [])
        return f"table of {plural(rows, 'row')}"
    return c.text or ""  # whole: its column wraps; a cut text ("held the bar of 40…") reads as another claim


def _data_files(f: list[Any]) -> list[Any]:
    return [x for x in f if Path(x.path).name != runs.MANIFEST] or list(f)


def provenance_markdown(claims: ClaimSet, figures: dict[str, FigureRecord | None],
                        shown_claims: Iterable[str] | None = None, shown_figures: Iterable[str] | None = None) -> str:
    """The appendix: runs read, every file read with its full sha256, then every claim and figure with its file.

    With ``shown_claims`` / ``shown_figures`` (what the rendered paper prints and shows) only those are listed;
    ``claims.json`` keeps every claim.
    """
    if shown_claims is not None:
        keep = set(shown_claims)
        claims = dataclasses.replace(claims, claims={k: c for k, c in claims.claims.items()
                                                     if k in keep or c.status != "ok"})
    if shown_figures is not None:
        figures = {k: v for k, v in figures.items() if k in set(shown_figures)}
    run_rows = [
        [f"`{info.experiment}`", f"`{info.run_id}`", f"`{info.notebook}`" if info.notebook else "campaign runner"]
        for _, info in sorted(claims.runs.items())
    ]
    files: dict[str, str] = {}
    for c in claims.ok():
        for f in c.files:
            files[_short_file(f.path, claims)] = f.sha256
    for r in figures.values():
        for f in r.files if r is not None else []:
            files[_short_file(f.path, claims)] = f.sha256
    file_rows = [[f"`{k}`", f"`{v}`"] for k, v in sorted(files.items())]
    claim_rows = []
    absent: dict[str, int] = {}
    for name, c in sorted(claims.claims.items()):
        if c.status != "ok":
            absent[c.experiment] = absent.get(c.experiment, 0) + 1
            continue
        data = _data_files(c.files)
        source = _short_file(data[0].path, claims)
        if c.runs > 1:
            source = f"{Path(source).parts[0]}/…/{Path(source).name} ({c.runs} runs)"
        elif len(data) > 1:
            source += f" +{len(data) - 1}"
        claim_rows.append([f"`{name}`", _md_cell(_printed(c)), c.unit, f"`{source}`", f"`{data[0].sha256[:12]}`"])
    fig_rows = []
    for name, r in sorted(figures.items()):
        if r is None:
            continue
        data = _data_files(r.files)
        fig_rows.append([f"`{name}`", ", ".join(f"`{_short_file(f.path, claims)}`" for f in data),
                         f"`{data[0].sha256[:12]}`"])
    parts = [
        # From here to the end (the appendix is last), a table may run over pages: in the text a table stays whole.
        "```{=typst}\n#show figure.where(kind: table): set block(breakable: true)\n```\n",
        "**Runs read.** The notebook each run was executed from; the executed copy, with its outputs, is the run "
        "directory's `notebook.ipynb`.\n",
        _table(["Experiment", "Run", "Notebook"], run_rows, "lll"),
        "**Files read**, with their sha256 (each equal to the one in its run's manifest when the paper was built).\n",
        _table(["File", "sha256"], file_rows, "ll"),
        "**Claims**, each with the file it was computed from (the first, when it read several) and the start of "
        "that file's sha256.\n",
        _table(["Claim", "Printed", "Unit", "Source", "sha256"], claim_rows, "lllll"),
    ]
    if fig_rows:
        parts += ["**Figures.**\n", _table(["Figure", "Source", "sha256"], fig_rows, "lll")]
    if absent:
        listed = ", ".join(f"`{e}`" for e in sorted(absent))
        # Before the claims table, not after the last table: alone at the end it filled a last page by itself.
        parts.insert(5, f"Claims of experiments this campaign has no finished run of ({listed}) are absent: "
                     "`claims.json` lists them with the reason, and the paper prints none of them.\n")
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|$@])", r"\\\1", text)

