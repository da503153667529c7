"""The paper through real Quarto and through the pandoc + Typst build, compared (issue 30).

Each committed campaign's paper is rendered once per path in a private copy of the paper's sources (Quarto writes
_manuscript/, .quarto/ and paper/_generated/ where it renders): the embedded campaign, the one paper.qmd names, by a
plain `quarto render` from a checkout with nothing prepared (its hooks prepare and audit), as a user runs it; the
reference campaign by `paper build` with Quarto on PATH; both by `paper build` without it. The results are compared
as a reader meets them: the same claims.json; every claim printed with the same text; the same figures (the same
image bytes, numbered alike, with the same data and notebook links under them); the same cross-references and
headings; links to data files and notebooks that resolve from where the page lies; an audit that passed on both;
page counts within PAGE_TOLERANCE. Skipped, saying why, where Quarto is not installed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pypdf import PdfReader

from offload_lab.paper import build as paper
from offload_lab.paper.qmd import numbers_in
from offload_lab.paper.supplement import SUPPLEMENT_DIR
from paper_fixtures import REPO_ROOT, copy_paper_sources
from quarto_env import NO_QUARTO, quarto

# Quarto's Typst template and the pandoc build's differ in title block, spacing and where floats land. Measured for
# issue 30: embedded 23 and 23 pages, later 14 (Quarto) and 13 (pandoc + Typst); hence two pages either way.
PAGE_TOLERANCE = 2
CAMPAIGNS = ("embedded", "reference")

pytestmark = pytest.mark.skipif(quarto() is None, reason=NO_QUARTO)


@dataclass
class Rendered:
    renderer: str
    html: Path
    pdf: Path
    claims_json: Path
    pages: int
    shown_claims: list[str]
    plain: bool = False  # a plain `quarto render`, not `paper build`


def _from_build(res: paper.BuildResult) -> Rendered:
    return Rendered(res.renderer, res.html, res.pdf, res.claims_json, res.pages or 0, res.shown_claims)


def _quarto_render(repo: Path) -> Rendered:
    """`quarto render` as a user runs it: from the project root, nothing prepared, none of our variables set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_LAB_", "QUARTO_"))}
    env["PATH"] = f"{Path(quarto()).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["quarto", "render"], cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "audit passed" in done.stdout + done.stderr  # the post-render hook
    html, pdf = repo / "_manuscript" / "paper" / "index.html", repo / "_manuscript" / "paper" / "paper.pdf"
    claims = repo / "paper" / paper.GENERATED / "claims.json"
    return Rendered("quarto", html, pdf, claims, len(PdfReader(str(pdf)).pages), [], plain=True)


@pytest.fixture(scope="module", params=CAMPAIGNS)
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    campaign = request.param
    root = tmp_path_factory.mktemp(f"two-renderers-{campaign}")
    repo = copy_paper_sources(root / "repo")
    # The hooks Quarto runs call paper/offload-lab, which looks for the checkout's lab environment beside paper/;
    # the campaign's data beside them (a copy: a link would resolve outside the repository and make every path
    # absolute), so that the paths and links the pages make are those of a checkout.
    (repo / ".venvs").symlink_to(REPO_ROOT / ".venvs", target_is_directory=True)
    shutil.copytree(REPO_ROOT / "data" / campaign, repo / "data" / campaign)
    out: dict[str, Rendered] = {}
    if campaign == paper.default_campaign(repo):
        out["quarto"] = _quarto_render(repo)
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PATH", f"{Path(quarto()).parent}{os.pathsep}{os.environ['PATH']}")
            out["quarto"] = _from_build(paper.build_paper(campaign, repo / "data", root / "quarto", repo,
                                                          use_quarto=True))
    out["fallback"] = _from_build(paper.build_paper(campaign, repo / "data", root / "fallback", repo,
                                                    use_quarto=False))
    return out


class _Page(HTMLParser):
    """What a reader meets in one HTML paper: claims, images, captions, cross-references, headings, links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.claims: dict[str, list[str]] = defaultdict(list)
        self.images: list[str] = []
        self.captions: list[str] = []
        self.xrefs: list[tuple[str, str]] = []
        self.headings: list[str] = []
        self.local_links: set[str] = set()
        self.provenance: list[list[str]] = []
        self._open: list[tuple[str, str, list[str]]] = []  # (tag, kind, text collected)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        href = a.get("href", "")
        if tag == "a" and href and not href.startswith(("#", "http:", "https:", "data:", "mailto:")):
            self.local_links.add(urllib.parse.unquote(href))
        if tag == "img" and a.get("src", "").startswith("data:"):
            self.images.append(hashlib.sha256(_data_bytes(a["src"])).hexdigest())
        if "figure-provenance" in classes:
            self.provenance.append([])
        elif tag == "a" and self.provenance and self._within("provenance"):
            self.provenance[-1].append(href)
        kind = None
        if "data-claim" in a and tag in ("a", "span") and "claim-nb" not in classes:
            kind = "claim:" + a["data-claim"]
        elif tag == "a" and re.match(r"#(sec|fig|tbl)-", href) and "nav-link" not in classes \
                and not a.get("id", "").startswith("toc-"):
            kind = "xref:" + href
        elif "crossref-absent" in classes:
            kind = "xref:absent"
        elif tag in ("figcaption", "caption"):  # Quarto captions a table float with figcaption, pandoc with caption
            kind = "caption"
        elif tag in ("h2", "h3") and a.get("id") != "toc-title":
            kind = "heading"
        elif "figure-provenance" in classes:
            kind = "provenance"
        self._open.append((tag, kind or "", []))

    def _within(self, kind: str) -> bool:
        return any(k == kind for _, k, _ in self._open)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            t, kind, text = self._open.pop()
            words = re.sub(r"\s+", " ", "".join(text).replace("\xa0", " ")).strip()
            if kind.startswith("claim:"):
                self.claims[kind[6:]].append(words)
            elif kind.startswith("xref:"):
                self.xrefs.append((kind[5:], words))
            elif kind == "caption":
                self.captions.append(" ".join(words.split()[:2]))  # "Figure 3", "Table 2"
            elif kind == "heading":
                self.headings.append(words)
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, _, text in self._open:
            text.append(data)


def _data_bytes(uri: str) -> bytes:
    head, _, body = uri.partition(",")
    return base64.b64decode(body) if head.endswith(";base64") else urllib.parse.unquote(body).encode()


def _targets(result: Rendered, links: list[list[str]]) -> list[list[str]]:
    return [[os.path.normpath(result.html.parent / h) for h in hrefs] for hrefs in links]


def _page(result: Rendered) -> _Page:
    p = _Page()
    p.feed(result.html.read_text(encoding="utf-8"))
    return p


def _printed(page: _Page, claims: dict) -> dict[str, object]:
    """Per claim, what it printed: its texts, or for a table claim the numbers of its cells (Quarto links each
    number of a cell, the pandoc build the whole cell)."""
    return {name: tuple(n for t in texts for n in numbers_in(t)) if claims[name].get("kind") == "table" else texts
            for name, texts in page.claims.items()}


def test_both_paths_write_the_same_claims_json(both: dict[str, Rendered]) -> None:
    q, f = (json.loads(both[k].claims_json.read_text()) for k in ("quarto", "fallback"))
    assert q == f
    assert both["quarto"].renderer == "quarto" and both["fallback"].renderer == "pandoc+typst"


def test_every_claim_prints_the_same_text(both: dict[str, Rendered]) -> None:
    claims = json.loads(both["fallback"].claims_json.read_text())["claims"]
    q, f = (_printed(_page(both[k]), claims) for k in ("quarto", "fallback"))
    assert q.keys() == f.keys()
    assert {k: (q[k], f[k]) for k in q if q[k] != f[k]} == {}
    assert set(f) == set(both["fallback"].shown_claims)


def test_the_same_figures_numbered_alike_with_the_same_sources(both: dict[str, Rendered]) -> None:
    q, f = _page(both["quarto"]), _page(both["fallback"])
    figures = [c for c in f.captions if c.startswith("Figure")]
    assert figures and [c for c in q.captions if c.startswith("Figure")] == figures
    assert [c for c in q.captions if c.startswith("Table")] == [c for c in f.captions if c.startswith("Table")]
    # Quarto inlines a few images of its own (icons): the figures are those both pages hold.
    assert set(f.images) <= set(q.images) and len(set(f.images)) >= len(figures)
    # The same files: each page links them relative to where it lies (a plain render's page is _manuscript/paper/).
    assert _targets(both["quarto"], q.provenance) == _targets(both["fallback"], f.provenance)
    assert len(q.provenance) == len(figures)


def test_the_same_cross_references_and_headings(both: dict[str, Rendered]) -> None:
    q, f = _page(both["quarto"]), _page(both["fallback"])
    assert q.xrefs == f.xrefs
    assert q.headings[: len(f.headings)] == f.headings or q.headings == f.headings


def test_links_to_data_files_and_notebooks_resolve_from_the_page(both: dict[str, Rendered]) -> None:
    for result in both.values():
        page = _page(result)
        assert page.local_links, f"{result.renderer}: no link to a data file"
        # The supplement is rendered by `paper build` beside the paper (paper.supplement), not by a plain
        # `quarto render`, whose project renders the article alone: its links are left to that build.
        links = {h for h in page.local_links if not (result.plain and h.startswith(SUPPLEMENT_DIR + "/"))}
        missing = sorted(h for h in links if not (result.html.parent / h).exists())
        assert missing == [], f"{result.renderer}: {len(missing)} links lead nowhere, e.g. {missing[:3]}"


def test_page_counts_are_close(both: dict[str, Rendered]) -> None:
    q, f = both["quarto"].pages, both["fallback"].pages
    assert q and f and abs(q - f) <= PAGE_TOLERANCE, f"quarto {q} pages, pandoc + Typst {f}"
