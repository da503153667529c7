"""`paper build --bundle DIR`: one folder with the HTML and every file it links to; its links work once moved."""

from __future__ import annotations

import html as html_lib
import re
import shutil
import urllib.parse
from pathlib import Path

import pytest

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.paper import build as paper
from paper_fixtures import REPO_ROOT, make_campaign


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    data = make_campaign(tmp_path_factory.mktemp("bundle-data"), experiments=("boots", "context", "concurrency"))
    out = tmp_path_factory.mktemp("bundle-out")
    return paper.build_paper("embedded-fixture", data, out / "paper", REPO_ROOT, use_quarto=False, bundle=out / "bundle")


def _links(page: Path) -> list[str]:
    hrefs = re.findall(r'<a\b[^>]*?\bhref="([^"]+)"', page.read_text())
    return [html_lib.unescape(h) for h in hrefs if not h.startswith(("#", "http://", "https://"))]


def test_every_link_resolves_inside_the_bundle_after_moving_it(bundled: paper.BuildResult, tmp_path: Path) -> None:
    assert bundled.bundle is not None and {"paper.html", "paper.pdf", "claims.json", "paper.lock.json"} <= {
        p.name for p in bundled.bundle.iterdir()}
    moved = Path(shutil.move(str(bundled.bundle), str(tmp_path / "elsewhere" / "paper-bundle")))
    page = (moved / "paper.html").read_text()
    links = _links(moved / "paper.html")
    assert len(links) > 20 and any(h.endswith("summary.csv") for h in links)
    for href in links:
        assert not href.startswith(("/", "file:", "..")), href
        target = (moved / urllib.parse.unquote(href)).resolve()
        assert target.is_file() and moved.resolve() in target.parents, href
    # The copies are the files the paper cites: a claim's link title gives its sha256.
    m = re.search(r'<a href="([^"]+summary\.csv)" class="claim"[^>]*title="[^"]* sha256 ([0-9a-f]{64})', page)
    assert m and runs.sha256_file(moved / urllib.parse.unquote(m.group(1))) == m.group(2)
    assert m.group(1).startswith("data/context/")


def test_a_bundle_is_not_written_over_an_unrelated_folder(tmp_path: Path) -> None:
    data = make_campaign(tmp_path / "data", experiments=("boots",))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", REPO_ROOT, use_quarto=False, formats=("html",),
                          bundle=tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"
