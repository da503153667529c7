"""The paper's supplement: its evidence, apart from its argument.

The paper reads as a measurement paper; the listings that back it (every published figure as transcribed, with who
published it and this project's recomputation; every run read, every file with its sha256, every claim) go to a second
document, ``paper/supplement.qmd``, rendered beside the paper as ``supplement/supplement.pdf`` and
``supplement/supplement.html`` (and into the HTML bundle), and linked from the paper. It is built from the same
campaign through the same checks (claims, audit) with pandoc and Typst, whichever renderer the paper used; its
provenance listing is the paper's own (the claims and figures the paper prints), copied from the paper's build.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from offload_lab.paper.qmd import GENERATED

SUPPLEMENT_QMD = Path("paper") / "supplement.qmd"
SUPPLEMENT_DIR = "supplement"  # under the paper's output directory
NAME = "supplement"  # supplement.pdf, supplement.html
PAPER_PROVENANCE = "provenance-paper.md"  # the paper's provenance listing, which the supplement includes


def supplement_source(repo_root: Path) -> Path | None:
    p = Path(repo_root) / SUPPLEMENT_QMD
    return p if p.is_file() else None


def build_supplement(paper_generated: Path, campaign: str, data_root: Path | str, out_dir: Path, repo_root: Path,
                     formats: tuple[str, ...] = ("pdf", "html"), *, build_paper: Callable[..., Any]) -> Any:
    """Render ``paper/supplement.qmd`` into ``out_dir/supplement/`` (its BuildResult), or None when there is none.
    ``paper_generated`` is the paper's own generated folder, whose provenance listing the supplement prints;
    ``build_paper`` is the paper's own build, handed in by it (the same build for a second document, and this module
    stays below the build rather than in a loop with it)."""

    qmd = supplement_source(repo_root)
    if qmd is None:
        return None
    sub = Path(out_dir) / SUPPLEMENT_DIR
    gen = sub / GENERATED
    gen.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(paper_generated) / "provenance.md", gen / PAPER_PROVENANCE)
    result = build_paper(campaign, data_root, sub, repo_root, formats, use_quarto=False, qmd=qmd)
    for attr, suffix in (("pdf", ".pdf"), ("html", ".html")):
        built = getattr(result, attr)
        if built is not None:
            renamed = built.with_name(NAME + suffix)
            built.replace(renamed)
            setattr(result, attr, renamed)
    return result


def bundle_supplement(supplement: Any, bundle_dir: Path) -> Path | None:
    """Put the supplement into the paper's bundle where the paper's link to it lands (``files/supplement/``, as
    :mod:`offload_lab.paper.bundle` places a linked file outside a run), with every file it links to, its links
    rewritten to point inside the bundle: the same treatment as the paper's own page."""
    from offload_lab.paper.bundle import _bundle_path, make_bundle

    if supplement is None or supplement.html is None:
        return None
    where = Path(bundle_dir) / _bundle_path(Path(supplement.html).resolve()).parent
    scratch = Path(bundle_dir) / ".supplement-bundle"
    if scratch.exists():
        shutil.rmtree(scratch)
    extra = [p for p in (supplement.pdf,) if p is not None]
    page = make_bundle(supplement.html, scratch, extra)
    where.mkdir(parents=True, exist_ok=True)
    for item in scratch.iterdir():
        target = where / (f"{NAME}.html" if item == page else item.name)
        if target.is_dir():
            shutil.rmtree(target)
        shutil.move(str(item), str(target))
    shutil.rmtree(scratch)
    return where / f"{NAME}.html"
