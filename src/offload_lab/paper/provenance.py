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


# A printed value longer than this leaves the claims table for a block of its own under it: in a column it wrapped
# into a tall, hyphenated cell ("billion parame-ters").
LONG_PRINTED = 40
# A table of at most this many rows is kept on one page; a longer one runs over pages.
WHOLE_ROWS = 15
# A claim's unit as the appendix shows it beside its printed text: a fraction printed as a percentage is a percent.
_PERCENT_UNITS = ("fraction", "probability", "share")


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
    table = "\n".join(lines) + "\n"
    if len(rows) <= WHOLE_ROWS:
        return table
    # A long table may run over pages (in the text and for short ones a table stays whole: typst-header.typ); the
    # show rule holds inside this scope only, so a short table after it is not split over two pages either.
    return (f"```{{=typst}}\n#[\n#show figure.where(kind: table): set block(breakable: true)\n```\n\n{table}\n"
            "```{=typst}\n]\n```\n")


def _intro(text: str) -> str:
    """The sentence that opens a table, kept on the page of the table's first rows (it was left alone at a page's
    foot)."""
    return f"```{{=typst}}\n#block(sticky: true)[\n```\n\n{text}\n\n```{{=typst}}\n]\n```\n"


def _grouped_table(header: list[str], groups: list[tuple[str, list[list[str]]]], align: str) -> str:
    """One table whose rows come in groups, each under a row naming what they share (a file and its sha256, a run):
    said once per group instead of in two more columns on every row, which left the values a sixth of the page."""
    rows: list[list[str]] = []
    for label, members in groups:
        rows.append([f"**{label}**"] + [""] * (len(header) - 1))
        rows += members
    return _table(header, rows, align)


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


def _unit(c: ResolvedClaim) -> str:
    """The unit of the printed text: "30%" of a fraction is a percent (the Unit column said "fraction" over it)."""
    return "percent" if c.unit in _PERCENT_UNITS and (c.text or "").endswith("%") else c.unit


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
    file_groups: dict[str, list[list[str]]] = {}
    for k, v in sorted(files.items()):
        folder, _, name = k.rpartition("/")
        file_groups.setdefault(folder, []).append([f"`{name}`", f"`{v}`"])
    by_source: dict[str, list[list[str]]] = {}
    long_values: list[str] = []
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
        label = f"`{source}` `{data[0].sha256[:12]}`"
        printed = _printed(c)
        if len(printed) > LONG_PRINTED:
            # Key, then value: a sentence reads whole under its name rather than down a narrow column.
            long_values.append(f"`{name}` ({label})\n:   {_md_cell(printed)}\n")
        else:
            by_source.setdefault(label, []).append([f"`{name}`", _md_cell(printed), _unit(c)])
    fig_rows = []
    for name, r in sorted(figures.items()):
        if r is None:
            continue
        data = _data_files(r.files)
        fig_rows.append([f"`{name}`", ", ".join(f"`{_short_file(f.path, claims)}`" for f in data),
                         f"`{data[0].sha256[:12]}`"])
    parts = [
        _intro("**Runs read.** The notebook each run was executed from; the executed copy, with its outputs, is the "
               "run directory's `notebook.ipynb`."),
        _table(["Experiment", "Run", "Notebook"], run_rows, "lll"),
        _intro("**Files read**, by run directory, with their sha256 (each equal to the one in its run's manifest when "
               "the paper was built)."),
        _grouped_table(["File", "sha256"], sorted(file_groups.items()), "ll"),
    ]
    if fig_rows:
        # Before the claims: a short table last was left to fill the last page with a few rows.
        parts += [_intro("**Figures**, each with the files it was drawn from and the start of the first one's sha256."),
                  _table(["Figure", "Source", "sha256"], fig_rows, "lll")]
    parts += [
        _intro("**Claims**, under the file each was computed from (the first, when it read several) and the start of "
               "that file's sha256."),
        _grouped_table(["Claim", "Printed", "Unit"], sorted(by_source.items()), "lll"),
    ]
    if long_values:
        # At the tables' size: reference matter, not reading text (at body size it ran to a page of its own).
        parts += [_intro("**Claims printed as words**, each with its file and the start of that file's sha256."),
                  "```{=typst}\n#[\n#set text(size: 8.5pt)\n```\n", "\n".join(long_values), "```{=typst}\n]\n```\n"]
    if absent:
        listed = ", ".join(f"`{e}`" for e in sorted(absent))
        # Before the claims table, not after the last table: alone at the end it filled a last page by itself.
        parts.insert(len(parts) - (6 if long_values else 2),
                     f"Claims of experiments this campaign has no finished run of ({listed}) are absent: "
                     "`claims.json` lists them with the reason, and the paper prints none of them.\n")
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    """Printed text as literal markdown; a table cell's ``|`` is escaped by :func:`_table`, once."""
    return re.sub(r"([\\`*_\[\]<>$@])", r"\\\1", text)

