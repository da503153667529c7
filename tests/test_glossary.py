"""The glossary (docs/glossary.md): every term a link points to has its heading, and the README and docs link the
words a newcomer meets undefined."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub (and Quarto's gfm) writes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_glossary_link_has_its_heading() -> None:
    anchors = {slug(m) for m in re.findall(r"^#{2,3} (.+)$", GLOSSARY.read_text(), flags=re.M)}
    links = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        links += [(path.name, a) for a in re.findall(r"glossary\.md#([\w-]+)", path.read_text())]
    assert links
    assert [(f, a) for f, a in links if a not in anchors] == []


def test_the_words_newcomers_meet_are_defined_and_linked() -> None:
    text = GLOSSARY.read_text()
    for term in ("The bar", "E1 ... E9", "gen30", "Engram", "Seats", "Regimes", "TTFT, TPOT, ITL", "Plan file",
                 "Root too"):
        assert f"### {term}\n" in text, term
    readme = (ROOT / "README.md").read_text()
    assert "docs/glossary.md" in readme and "glossary.md#the-bar" in readme
