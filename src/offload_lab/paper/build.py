"""The paper's build: claims and figures from data, then PDF and HTML, then an audit of what was rendered.

``paper/paper.qmd`` is a Quarto manuscript (``_quarto.yml`` at the repository root). Two paths render it:

* **Quarto**, when ``quarto`` is on PATH: ``quarto render`` runs :func:`prepare` as its pre-render hook
  (``offload-lab paper prepare``) and :func:`audit` as its post-render hook (``offload-lab paper audit``); the
  ``_extensions/claim`` extension supplies the ``claim`` shortcode and the ``sections`` and ``figures`` filters.
* **pandoc + Typst** from PyPI otherwise (machines without Quarto): the same qmd, the same
  ``sections.lua`` filter, claims substituted here, figure cross-references numbered here, then pandoc → Typst →
  PDF with the ``typst`` package and pandoc → one self-contained HTML file.

What the qmd may use, so that both paths agree: YAML front matter, headings, paragraphs, lists, pipe tables, figures
``![caption](_generated/figures/NAME.svg){#fig-x}``, table divs ``::: {#tbl-x}`` (a table claim, then its caption),
cross-references ``@fig-x`` and ``@tbl-x``, citations ``[@key]``, fenced divs ``.requires`` / ``.choose`` /
``.only-campaign`` / ``.when`` (also a ``.when`` span) / ``.callout-warning`` / ``.callout-note``, and the shortcodes
``claim``, ``include`` and ``pagebreak``, and the ``.generated`` div for files prepare writes (an include of those
fails under Quarto, which expands includes before its pre-render hook runs). Anything else is refused by the
fallback rather than rendered differently; what Quarto's own parser refuses, ``lint.quarto_findings`` refuses first.
docs/paper.md describes the sources, the claims, the blocks, the provenance and the audit.

The modules: ``source`` (read and expand the qmd), ``lint`` (numbers typed into it), ``pandoc_ast`` (the AST, its
checks, cross-references), ``render`` (pandoc + Typst), ``quarto`` (``quarto render``: outputs under
``_manuscript/paper/``, its hooks), ``provenance`` (the appendix), ``lock`` (the data lock, ``--frozen``), ``bundle``
(``--bundle``) and ``audit`` (the rendered PDF and HTML). What the Quarto path relies on and what could not be checked
without Quarto: docs/paper.md, "quarto render".
"""


from __future__ import annotations

import fcntl
import functools
import inspect
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import ClaimError, InputError
from offload_lab.paper.audit import PLACES, AuditReport, audit
from offload_lab.paper.bundle import make_bundle
from offload_lab.paper.claims import ClaimSet, default_data_root, resolve_claims
from offload_lab.paper.figures import FigureRecord, draw_figures
from offload_lab.paper.lint import check_quarto_rules, check_source, lint_source
from offload_lab.paper.lock import LOCK, check_frozen, locked_files, locked_runs, run_changes, write_lock
from offload_lab.paper.pandoc_ast import (
    RenderError,
    check_ast,
    check_figures,
    claims_in,
    figure_images,
    markdown_to_ast,
    paper_places,
)
from offload_lab.paper import sections
from offload_lab.paper import discovery
from offload_lab.paper.provenance import provenance_markdown
from offload_lab.paper.setup import check_setups
from offload_lab.paper.quarto import article as quarto_article
from offload_lab.paper.quarto import render_quarto
from offload_lab.paper.render import FIGURE_LINKS, figure_links, render_fallback
from offload_lab.paper.supplement import build_supplement, bundle_supplement
from offload_lab.paper.xref import Label, check_references, defined_labels, numbered_sections
from offload_lab.paper.qmd import (
    GENERATED,
    QMD,
    _front_matter,
    default_campaign,
    default_out_dir,
    default_repo_root,
    expand,
    paper_sources,
    quarto_config,
    read_qmd,
)

XREF = "xref.json"  # under _generated/: section titles and numbering, for the Quarto extension's sections.lua

# What the CLI and the tests reach through this module.
__all__ = ["check_quarto_sources", "check_sources", "hook_skipped", "AuditReport", "BuildResult", "GENERATED",
           "Prepared", "RenderError", "audit", "build_paper", "lint_source", "paper_sources", "prepare"]


@dataclass
class Prepared:
    claims: ClaimSet
    figures: dict[str, FigureRecord | None]
    generated_dir: Path
    claims_json: Path
    ast: dict[str, Any]  # the qmd as a pandoc AST, claims in, campaign filter applied, checked
    qmd: Path
    labels: dict[str, Label] = field(default_factory=dict)  # every label the paper's sources define
    numbered: bool = False  # number-sections: @sec-x prints "Section N", else the section's title

    def __str__(self) -> str:
        return str(self.generated_dir)



@dataclass
class BuildResult:
    pdf: Path | None
    html: Path | None
    claims_json: Path
    figures: dict[str, FigureRecord | None]
    renderer: str  # "quarto" or "pandoc+typst"
    seconds: float
    audit: AuditReport
    typ: Path | None = None
    shown_figures: list[str] = field(default_factory=list)  # figures the paper shows, in order
    shown_claims: list[str] = field(default_factory=list)  # claims the paper prints (each once)
    pages: int | None = None
    lock: Path | None = None  # paper.lock.json: the sha256 of every file the paper read
    bundle: Path | None = None  # the folder holding the HTML and every file it links to
    fallbacks: list[str] = field(default_factory=list)  # cited runs gone or replaced since the lock (lock.run_changes)
    supplement: "BuildResult | None" = None  # the paper's evidence, a second document (paper.supplement)

    def summary(self) -> str:
        """One line: pages, figures and claims of this build."""
        d = json.loads(self.claims_json.read_text(encoding="utf-8"))
        ok = sum(1 for c in d["claims"].values() if c["status"] == "ok")
        pages = f"{self.pages} pages, " if self.pages is not None else ""
        return (f"{pages}{len(self.shown_figures)} figures, {len(self.shown_claims)} claims printed "
                f"({ok} resolved, {len(d['claims']) - ok} absent), rendered by {self.renderer}")

    def outputs(self) -> dict[str, Path]:
        """What a person opens, by label (for the CLI to print)."""
        files = {"pdf": self.pdf, "html": self.html, "claims": self.claims_json, "typst source": self.typ,
                 "data lock": self.lock, "bundle": self.bundle,
                 "supplement pdf": self.supplement.pdf if self.supplement else None,
                 "supplement html": self.supplement.html if self.supplement else None}
        return {k: v for k, v in files.items() if v is not None}



# --------------------------------------------------------------------------------------------------------------------
# Prepare: everything up to rendering (Quarto's pre-render hook)
# --------------------------------------------------------------------------------------------------------------------


def prepare(
    campaign: str | None = None,
    data_root: Path | str | None = None,
    repo_root: Path | str | None = None,
    out_dir: Path | str | None = None,
    qmd: Path | str | None = None,
) -> Prepared:
    """Resolve claims, draw figures, write the provenance table, and check the qmd against them.

    Writes ``claims.json``, ``figures/*.{svg,png,json}`` and ``provenance.md`` into ``out_dir`` (default
    ``paper/_generated``, where the qmd and the Quarto extension look for them). ``None`` elsewhere means:
    campaign from OFFLOAD_LAB_CAMPAIGN or the qmd's ``offload-lab: campaign:``; data from OFFLOAD_LAB_DATA_ROOT or
    ``<repo>/data``; repo from QUARTO_PROJECT_DIR or the nearest ``_quarto.yml`` up from the working directory.
    Raises AuditError for numerals typed into the qmd, ClaimError for an unknown claim (with file:line), a claim used
    where its experiment is absent, or a missing or changed data file.
    """
    generated_dir = out_dir
    repo = Path(repo_root) if repo_root is not None else default_repo_root()
    qmd_path = Path(qmd) if qmd is not None else repo / QMD
    if not qmd_path.is_file():
        raise InputError(f"{qmd_path}: no paper source")
    campaign = campaign or default_campaign(repo, qmd_path)
    data = Path(data_root) if data_root is not None else default_data_root(repo)
    gen = Path(generated_dir) if generated_dir is not None else qmd_path.parent / GENERATED
    # The sources first: a broken one is wrong whatever the data.
    labels = check_sources(repo, qmd_path if qmd is not None else None)
    if not (data / campaign).is_dir():
        raise InputError(f"no data for campaign {campaign!r}: {data / campaign} does not exist (see --data-dir)")
    if next(runs.iter_runs(data, campaign), None) is None:
        # A paper of zero claims says nothing and looks like one that does.
        raise InputError(f"campaign {campaign!r}: {data / campaign} holds no run (no {runs.MANIFEST} in any "
                         "<experiment>/<run>/); run the campaign first, or name another with --campaign")

    from offload_lab.paper.discovery import figure_registry

    claims = resolve_claims(campaign, data, repo, extra_experiments=[d.experiment for d in figure_registry().values()])
    gen.mkdir(parents=True, exist_ok=True)
    claims_json = claims.write(gen / "claims.json")
    write_sections(repo, gen, claims)
    figures = draw_figures(campaign, data, gen / "figures", repo)
    runs.atomic_write_text(gen / "provenance.md", provenance_markdown(claims, figures))
    runs.atomic_write_json(gen / FIGURE_LINKS, figure_links(figures, repo))

    front = _front_matter(read_qmd(qmd_path), claims_json, repo)
    ast = markdown_to_ast(front + expand(qmd_path, claims, gen), repo)
    check_ast(ast, claims)
    check_setups(ast, claims, repo)
    check_figures(ast, gen, repo)
    # The appendix lists what the paper shows, which the expanded paper tells: a second pass with that list.
    shown = provenance_markdown(claims, figures, claims_in(ast), [Path(s).stem for s in figure_images(ast)])
    runs.atomic_write_text(gen / "provenance.md", shown)
    ast = markdown_to_ast(front + expand(qmd_path, claims, gen), repo)
    runs.atomic_write_json(gen / PLACES, paper_places(ast))
    for p in [claims_json, gen / "provenance.md", gen / PLACES, gen / FIGURE_LINKS,
              *(gen / "figures").glob("*.json")]:
        p.chmod(0o644)  # atomic writes create 0600 files; these are published next to the paper
    numbered = numbered_sections(read_qmd(qmd_path).meta, quarto_config(repo))
    # For the Quarto path's sections.lua, which prints @sec-x as the pandoc build does (render.py resolve_crossrefs).
    runs.atomic_write_json(gen / XREF, {"numbered": numbered, "sections": {
        k: v.title or k for k, v in labels.items() if k.startswith("sec-")}})
    (gen / XREF).chmod(0o644)
    return Prepared(claims, figures, gen, claims_json, ast, qmd_path, labels, numbered)


def write_sections(repo_root: Path, gen: Path, claims: ClaimSet) -> Path:
    """``_generated/sections.qmd``: the experiment folders' prose assembled by topic. Each fragment is expanded on
    its own first, so that an unknown claim is reported at the fragment's own file and line."""
    found = sections.fragments(repo_root)
    for f in found:
        expand(f.path, claims, gen)
    out = gen / sections.SECTIONS_FILE
    runs.atomic_write_text(out, sections.assemble(found))
    out.chmod(0o644)
    return out


def check_quarto_sources(repo_root: Path | str) -> None:
    """Only the lines of the paper's sources that Quarto would refuse or misread (InputError, file:line): cheap and
    independent of any data, for ``campaign check``."""
    repo = Path(repo_root)
    check_quarto_rules(sorted({repo / QMD, *paper_sources(repo)}), repo / quarto_article(repo))


def check_sources(repo_root: Path | str, qmd: Path | str | None = None) -> dict[str, Label]:
    """The source lint, before any claim is computed or notebook run: lines Quarto would refuse or misread
    (InputError, file:line; lint.quarto_findings), cross-references to a label no source defines (InputError,
    file:line), numbers typed into the prose (AuditError). Returns the labels the sources define. ``qmd``: a paper
    other than ``paper/paper.qmd``, whose labels are read from the qmd files beside it."""
    repo = Path(repo_root)
    if qmd is None:
        sources = sorted({repo / QMD, *paper_sources(repo)})
        check_quarto_rules(sources, repo / quarto_article(repo))
        check_references(sources)
        check_source(sources)
        return defined_labels(sources)
    qmd_path = Path(qmd)
    beside = sorted({qmd_path, *qmd_path.parent.rglob("*.qmd"), *(p for _, p in discovery.section_files())}
                    - set(qmd_path.parent.rglob(f"{GENERATED}/**/*.qmd")))
    check_quarto_rules(beside, qmd_path)
    check_references(beside)
    check_source([qmd_path])
    return defined_labels(beside)




def _build_paper(
    campaign: str,
    data_root: Path | str,
    out_dir: Path | str | None = None,
    repo_root: Path | str | None = None,
    formats: tuple[str, ...] = ("pdf", "html"),
    use_quarto: bool | None = None,
    qmd: Path | str | None = None,
    frozen: bool = False,
    bundle: Path | str | None = None,
) -> BuildResult:
    """Resolve claims → ``claims.json``, draw figures, render PDF and HTML into ``out_dir``, audit them.

    ``use_quarto=None`` uses ``quarto render`` when ``quarto`` is on PATH (then the generated files go to
    ``paper/_generated``, where Quarto's run of the qmd finds them), else pandoc + Typst (generated files go to
    ``out_dir/_generated``). Every file the paper read is hashed into ``paper.lock.json``; ``frozen`` first checks
    each against its committed version in git. ``bundle`` writes the HTML with every file it links to into one
    folder. Raises ClaimError, AuditError, InputError or RenderError.
    """
    t0 = time.monotonic()
    runs.check_name("campaign", campaign)  # it names folders (data/<campaign>, _output/<campaign>): ../x, 300 characters
    repo = (Path(repo_root) if repo_root is not None else default_repo_root()).resolve()
    out = (Path(out_dir) if out_dir is not None else default_out_dir(repo, campaign)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    quarto = shutil.which("quarto") is not None if use_quarto is None else use_quarto
    qmd_path = Path(qmd) if qmd is not None else repo / QMD
    gen = qmd_path.parent / GENERATED if quarto else out / GENERATED
    if bundle is not None and "html" not in formats:
        raise InputError("--bundle holds the HTML paper: build it with the html format")
    prep = prepare(campaign, data_root, repo, gen, qmd)
    locked = locked_files(prep.claims, prep.figures, repo)
    # A cited run deleted or replaced: the paper would fall back to another run with the same parameters and say
    # nothing. A frozen build fails; a plain one lists each fallback.
    fallbacks = run_changes(out / LOCK, prep.claims, Path(data_root), repo)
    if frozen and fallbacks:
        raise ClaimError("--frozen: the paper would read other runs than the ones locked or committed:\n  "
                         + "\n  ".join(fallbacks) + "\nRestore the runs, or build without --frozen and review "
                         "the claims that changed.")
    if frozen:
        check_frozen(locked)
    if quarto:
        files = render_quarto(repo, out, campaign, Path(data_root), tuple(formats))
        if gen != out / GENERATED:
            shutil.copytree(gen, out / GENERATED, dirs_exist_ok=True)
        renderer = "quarto"
    else:
        files = render_fallback(prep, out, repo, tuple(formats))
        renderer = "pandoc+typst"
    for name in ("claims.json", PLACES):
        shutil.copy2(out / GENERATED / name, out / name)
    report = audit(out / "claims.json", pdf=files.get("pdf"), html=files.get("html"), repo_root=repo, lint=False)
    write_lock(out / LOCK, campaign, locked, locked_runs(prep.claims))
    # The listings behind the paper, rendered beside it (the paper's own build only: qmd None); it reports its own
    # time, the paper's is the paper's alone.
    seconds = time.monotonic() - t0

    supplement = build_supplement(prep.generated_dir, campaign, data_root, out, repo, tuple(formats),
                                  build_paper=build_paper) if qmd is None else None
    bundled = None
    if bundle is not None:
        extra = [p for p in (files.get("pdf"), out / "claims.json", out / LOCK) if p is not None]
        bundled = make_bundle(files["html"], Path(bundle), extra).parent
        bundle_supplement(supplement, Path(bundle))
    pages = None
    if files.get("pdf"):
        from pypdf import PdfReader

        pages = len(PdfReader(str(files["pdf"])).pages)
    return BuildResult(
        pdf=files.get("pdf"),
        html=files.get("html"),
        claims_json=out / "claims.json",
        figures=prep.figures,
        renderer=renderer,
        seconds=seconds,
        audit=report,
        typ=files.get("typ"),
        shown_figures=[Path(src).stem for src in figure_images(prep.ast)],
        shown_claims=claims_in(prep.ast),
        pages=pages,
        lock=out / LOCK,
        bundle=bundled,
        fallbacks=fallbacks,
        supplement=supplement,
    )


RENDER_LOCK = ".render.lock"  # in paper/_generated: Quarto builds of one checkout take turns on it


@functools.wraps(_build_paper)
def build_paper(*args: Any, **kwargs: Any) -> BuildResult:
    bound = inspect.signature(_build_paper).bind(*args, **kwargs)
    use_quarto, repo_root = bound.arguments.get("use_quarto"), bound.arguments.get("repo_root")
    if not (shutil.which("quarto") is not None if use_quarto is None else use_quarto):
        return _build_paper(*args, **kwargs)
    # Quarto renders inside the checkout (paper/_generated, .quarto/, its output dir): two builds of one checkout at
    # once (two shells, parallel tests) would overwrite each other's files, so they take turns.
    repo = (Path(repo_root) if repo_root is not None else default_repo_root()).resolve()
    lock_dir = repo / QMD.parent / GENERATED
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / RENDER_LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return _build_paper(*args, **kwargs)



def hook_skipped(hook: str, out_dir: Path | str | None = None, repo_root: Path | str | None = None) -> str | None:
    """For the CLI's ``paper prepare`` / ``paper audit`` run as Quarto's hooks inside ``paper build``: why there is
    nothing to do (the build prepared this very claims.json and audits the outputs itself), or None."""
    from offload_lab.paper import quarto

    if hook != "prepare":
        return quarto.hook_skipped(hook)
    repo = Path(repo_root) if repo_root is not None else default_repo_root()
    gen = Path(out_dir) if out_dir is not None else repo / QMD.parent / GENERATED
    return quarto.hook_skipped("prepare", gen / "claims.json")
