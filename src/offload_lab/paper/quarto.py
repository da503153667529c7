"""The Quarto path: where a manuscript's outputs land, ``quarto render`` itself, and the hooks it runs.

Sources (quarto-dev/quarto-cli @5d1da592, read for issue 13; docs/paper.md cites them in full):
``src/project/types/manuscript/manuscript.ts`` (output dir ``_manuscript``; the article's HTML is ``index.html``),
``src/command/render/render.ts`` ``projectOutputPath`` and ``project.ts`` (an output keeps the source's directory
below the output dir, so ``paper/paper.qmd`` renders to ``_manuscript/paper/index.html`` and ``paper/paper.pdf``),
``project.ts`` ``runScripts`` (``QUARTO_PROJECT_OUTPUT_FILES`` for the post-render hook: newline-separated, relative
to the project directory; ``QUARTO_PROJECT_OUTPUT_DIR``, absolute in the source, relative in the docs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offload_lab.paper.pandoc_ast import RenderError
from offload_lab.paper.qmd import GENERATED, QMD, quarto_config

MANUSCRIPT_DIR = "_manuscript"  # manuscript.ts kOutputDir, when project.output-dir is unset
# Set by `paper build` for the `quarto render` it starts: its hooks then skip what the build does itself.
PREPARED_ENV = "OFFLOAD_LAB_PREPARED"  # the claims.json the build's own prepare() wrote
AUDITED_ENV = "OFFLOAD_LAB_AUDITED_BY_BUILD"
HTML_DIR_ENV = "OFFLOAD_LAB_HTML_DIR"  # where `paper build` puts the HTML Quarto writes


@dataclass(frozen=True)
class ManuscriptOutputs:
    output_dir: Path
    html: Path | None  # the article's index.html, None when Quarto wrote none
    pdf: Path | None  # the article's <stem>.pdf
    source: str  # where the paths came from: "QUARTO_PROJECT_OUTPUT_FILES" or "layout"

    def expected(self, article: Path) -> str:
        base = self.output_dir / article.parent
        return f"{base / 'index.html'} and {base / (article.stem + '.pdf')}"


def article(repo_root: Path, cfg: Mapping[str, Any] | None = None) -> Path:
    """``manuscript.article`` (project-relative), else the paper's own qmd."""
    cfg = quarto_config(repo_root) if cfg is None else cfg
    art = (cfg.get("manuscript") or {}).get("article")
    return Path(str(art)) if art else QMD


def output_dir(repo_root: Path, cfg: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    repo = Path(repo_root)
    if env.get("QUARTO_PROJECT_OUTPUT_DIR"):
        return (repo / env["QUARTO_PROJECT_OUTPUT_DIR"]).resolve()  # an absolute value replaces repo
    cfg = quarto_config(repo) if cfg is None else cfg
    return (repo / ((cfg.get("project") or {}).get("output-dir") or MANUSCRIPT_DIR)).resolve()


def manuscript_outputs(repo_root: Path, env: Mapping[str, str] | None = None) -> ManuscriptOutputs:
    """The article's HTML and PDF as Quarto wrote them: from QUARTO_PROJECT_OUTPUT_FILES when the post-render hook
    has it, else from the layout (output dir / the article's directory / ``index.html`` and ``<stem>.pdf``)."""
    env = os.environ if env is None else env
    repo = Path(repo_root).resolve()
    cfg = quarto_config(repo)
    out, art = output_dir(repo, cfg, env), article(repo, cfg)
    listed = env.get("QUARTO_PROJECT_OUTPUT_FILES")
    if listed:
        files = [(repo / line.strip()).resolve() for line in listed.splitlines() if line.strip()]
        want = (out / art.parent).resolve()
        html = next((f for f in files if f.name == "index.html" and f.parent == want), None)
        pdf = next((f for f in files if f.suffix == ".pdf" and f.stem == art.stem), None)
        return ManuscriptOutputs(out, html if html and html.is_file() else None, pdf if pdf and pdf.is_file() else None,
                                 "QUARTO_PROJECT_OUTPUT_FILES")
    base = out / art.parent
    html, pdf = base / "index.html", base / f"{art.stem}.pdf"
    return ManuscriptOutputs(out, html if html.is_file() else None, pdf if pdf.is_file() else None, "layout")


def hook_skipped(hook: str, claims_json: Path | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """Why Quarto's ``hook`` ("prepare" or "audit") has nothing to do, or None: `paper build` ran prepare before
    starting Quarto (the marker names the claims.json this hook would write) and audits the outputs after it."""
    env = os.environ if env is None else env
    if hook == "prepare" and env.get(PREPARED_ENV):
        if claims_json is None or Path(env[PREPARED_ENV]).resolve() == Path(claims_json).resolve():
            return f"prepared by paper build ({env[PREPARED_ENV]})"
    if hook == "audit" and env.get(AUDITED_ENV) == "1":
        return "paper build audits the rendered files itself, once Quarto has written them"
    return None


def render_quarto(repo_root: Path, out_dir: Path, campaign: str, data_root: Path,
                  formats: tuple[str, ...] = ("pdf", "html")) -> dict[str, Path]:
    """``quarto render`` after the build's own prepare(); the article's outputs are copied to ``out_dir``."""
    claims = (Path(repo_root) / "paper" / GENERATED / "claims.json").resolve()
    env = {
        **os.environ,
        "OFFLOAD_LAB_CAMPAIGN": campaign,
        "OFFLOAD_LAB_DATA_ROOT": str(Path(data_root).resolve()),
        # The extension's Lua finds claims.json here first, wherever Quarto runs pandoc from.
        "OFFLOAD_LAB_CLAIMS": str(claims),
        PREPARED_ENV: str(claims),
        AUDITED_ENV: "1",
        # The extension links data files and notebooks from where this build copies the page (claims-file.lua href).
        HTML_DIR_ENV: str(Path(out_dir).resolve()),
    }
    env.pop("QUARTO_PROJECT_OUTPUT_FILES", None)
    proc = subprocess.run(["quarto", "render"], cwd=repo_root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(f"quarto render failed ({proc.returncode}):\n{proc.stderr.strip()[-4000:]}")
    built = manuscript_outputs(Path(repo_root), env={})
    found = {"pdf": built.pdf, "html": built.html}
    missing = [k for k in formats if found.get(k) is None]
    if missing:
        raise RenderError(f"quarto render wrote no {' or '.join(missing)}: expected "
                          f"{built.expected(article(Path(repo_root)))}")
    out: dict[str, Path] = {}
    if "pdf" in formats and built.pdf is not None:
        out["pdf"] = Path(shutil.copy2(built.pdf, out_dir / "paper.pdf"))
    if "html" in formats and built.html is not None:
        out["html"] = Path(shutil.copy2(built.html, out_dir / "paper.html"))
    return out
