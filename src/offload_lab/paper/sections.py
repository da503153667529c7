"""The paper's sections, assembled from prose fragments that the experiment folders hold.

An experiment folder holds its prose beside its claims: ``section.qmd`` (or several, ``section-<topic>.qmd``), each
opening with front matter that says where it goes::

    ---
    section:
      topic: context                                           # the part of the paper it belongs to
      heading: "Reading and writing long contexts {#sec-context}"  # the topic's heading (level two), optional
      order: 30                                                # where the topic stands among the others
      rank: 1                                                  # among the topic's alternatives: the first whose
                                                               # experiments all ran is printed (default 1)
      requires: context                                        # the experiments it needs (default: its folder)
      note: none                                               # left out silently when they did not run
      part: choice                                             # choice (default), lead or tail
    ---

Fragments of one topic are alternatives (``part: choice``): a measured variant, the reference campaign's, the
published figures'. :func:`assemble` writes each topic as its heading, its ``lead`` parts, one ``.choose`` block
holding each alternative as a ``.requires`` block, then its ``tail`` parts: the blocks ``sections.lua`` reads, so
Quarto and the pandoc build pick the same variant. ``paper prepare`` writes the result to
``paper/_generated/sections.qmd``, which ``paper.qmd`` reads in place of a ``.generated`` div. Prose of the whole
paper, owned by no experiment, lives in ``paper/sections/`` with the same front matter (its ``requires`` defaults to
none)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from offload_lab.core import inputs
from offload_lab.core.errors import InputError
from offload_lab.paper import discovery

SECTIONS_FILE = "sections.qmd"  # under paper/_generated/, read by paper.qmd (its .generated div)
META_KEY = "section"
HEADING_LEVEL = "##"
PAPER_SECTIONS = Path("paper") / "sections"  # prose of the whole paper, owned by no experiment
_INCLUDE = re.compile(r"\{\{<\s*include\s")


class Placement(BaseModel):
    """Where a fragment goes: the front matter's ``section:`` mapping."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_-]*$")
    order: int
    heading: str | None = None
    rank: int = 1
    requires: str | None = None  # None: the experiment folder it lies in
    note: Literal["none"] | None = None
    part: Literal["choice", "lead", "tail"] = "choice"


@dataclass(frozen=True)
class Fragment:
    path: Path
    place: Placement
    experiments: tuple[str, ...]  # what it requires
    body: str  # the prose, front matter removed


@dataclass(frozen=True)
class Topic:
    name: str
    order: int
    heading: str | None
    lead: tuple[Fragment, ...]
    choices: tuple[Fragment, ...]
    tail: tuple[Fragment, ...]


def _split(text: str, path: Path) -> tuple[dict, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise InputError(f"{path}: a section fragment opens with front matter (---, section: topic, order, ---)")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            meta = inputs.parse_yaml("\n".join(lines[1:i]), path, "the front matter of") or {}
            return (meta if isinstance(meta, dict) else {}), "\n".join(lines[i + 1 :]).strip("\n")
    raise InputError(f"{path}: the front matter is not closed with ---")


def read_fragment(path: Path, folder: str | None) -> Fragment:
    """One fragment; ``folder`` is the experiment whose folder holds it (None for the paper's own prose)."""
    meta, body = _split(Path(path).read_text(encoding="utf-8"), Path(path))
    if META_KEY not in meta:
        raise InputError(f"{path}: no `{META_KEY}:` in its front matter; say where it goes (topic, order)")
    try:
        place = Placement.model_validate(meta[META_KEY])
    except ValidationError as e:
        first = e.errors()[0]
        raise InputError(f"{path}: {META_KEY}.{'.'.join(str(x) for x in first['loc'])}: {first['msg']}") from e
    if _INCLUDE.search(body):
        # Its body is copied into paper/_generated/sections.qmd, where a relative include would point elsewhere.
        raise InputError(f"{path}: a section fragment cannot include a file; write the prose into the fragment")
    requires = place.requires if place.requires is not None else (folder or "")
    return Fragment(Path(path), place, tuple(requires.split()), body)


def fragments(repo_root: Path | None = None) -> list[Fragment]:
    """Every fragment: each experiment folder's ``section*.qmd``, then ``paper/sections/*.qmd`` of the repository."""
    found = [read_fragment(p, folder) for folder, p in discovery.section_files()]
    if repo_root is not None:
        found += [read_fragment(p, None) for p in sorted((Path(repo_root) / PAPER_SECTIONS).glob("*.qmd"))]
    return found


def topics(found: list[Fragment]) -> list[Topic]:
    """The fragments grouped by topic, in order; two alternatives of one rank, or two headings, are refused."""
    by_topic: dict[str, list[Fragment]] = defaultdict(list)
    for f in found:
        by_topic[f.place.topic].append(f)
    out = []
    for name, frs in by_topic.items():
        headings = {f.place.heading for f in frs if f.place.heading}
        if len(headings) > 1:
            where = ", ".join(str(f.path) for f in frs if f.place.heading)
            raise InputError(f"topic {name!r} has {len(headings)} headings ({where}): give them one, or none")
        by_part: dict[str, list[Fragment]] = defaultdict(list)
        for f in sorted(frs, key=lambda f: (f.place.rank, str(f.path))):
            by_part[f.place.part].append(f)
        ranks = [f.place.rank for f in by_part["choice"]]
        if len(ranks) != len(set(ranks)):
            where = ", ".join(f"{f.path} (rank {f.place.rank})" for f in by_part["choice"])
            raise InputError(f"topic {name!r}: two alternatives share a rank ({where}); give each its own rank")
        out.append(Topic(name, min(f.place.order for f in frs), headings.pop() if headings else None,
                         tuple(by_part["lead"]), tuple(by_part["choice"]), tuple(by_part["tail"])))
    return sorted(out, key=lambda t: (t.order, t.name))


def _requires(f: Fragment) -> str:
    note = f' note="{f.place.note}"' if f.place.note else ""
    return f'::: {{.requires experiments="{" ".join(f.experiments)}"{note}}}\n{f.body}\n:::'


def _block(f: Fragment) -> str:
    """A lead or tail part: as written, or inside its .requires block when it needs experiments."""
    return _requires(f) if f.experiments else f.body


def assemble(found: list[Fragment]) -> str:
    """The paper's sections as one qmd body: per topic its heading, lead parts, one .choose, tail parts."""
    parts = ["<!-- Written by `offload-lab paper prepare` from the section fragments of the experiment folders and "
             "paper/sections/ (offload_lab.paper.sections); edit those, not this file. -->"]
    for t in topics(found):
        every = (*t.lead, *t.choices, *t.tail)
        parts.append(f"<!-- topic {t.name}: {', '.join(f'{f.path.parent.name}/{f.path.name}' for f in every)} -->")
        # A topic that is only remarks (every part left out silently when its experiments did not run) carries its
        # heading inside each of them: left out, it leaves no empty section behind.
        silent = t.heading and not t.lead and not t.tail and all(f.place.note == "none" for f in t.choices)
        if t.heading and not silent:
            parts.append(f"{HEADING_LEVEL} {t.heading}")
        parts += [_block(f) for f in t.lead]
        if t.choices:
            inner = "\n".join(_requires(f) if not silent else
                               _requires(Fragment(f.path, f.place, f.experiments,
                                                  f"{HEADING_LEVEL} {t.heading}\n\n{f.body}"))
                               for f in t.choices)
            parts.append("::: {.choose}\n" + inner + "\n:::")
        parts += [_block(f) for f in t.tail]
    return "\n\n".join(parts) + "\n"


def heading_line(path: Path) -> tuple[int, str] | None:
    """(line number, ``## heading``) of a fragment's declared topic heading, for the source lint and the labels."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        meta, _ = _split(text, Path(path))
    except InputError:
        return None
    heading = (meta.get(META_KEY) or {}).get("heading") if isinstance(meta.get(META_KEY), dict) else None
    if not heading:
        return None
    lineno = next((i + 1 for i, line in enumerate(text.splitlines()) if line.strip().startswith("heading:")), 1)
    return lineno, f"{HEADING_LEVEL} {heading}"
