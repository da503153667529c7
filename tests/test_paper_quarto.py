"""The Quarto path short of the Quarto binary: outputs found where a manuscript writes them, the hooks, the links.

The stand-in directories are laid out as quarto-cli lays out a manuscript whose article is ``paper/paper.qmd``
(``_manuscript/paper/index.html`` and ``_manuscript/paper/paper.pdf``; sources in docs/paper.md, "quarto render").
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from offload_lab.core.errors import AuditError
from offload_lab.paper import build as paper
from offload_lab.paper import quarto
from paper_fixtures import REPO_ROOT, copy_paper_sources, make_campaign


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_campaign(tmp_path_factory.mktemp("quarto-data"), experiments=("boots", "context"))


@pytest.fixture(scope="module")
def built(data: Path, tmp_path_factory: pytest.TempPathFactory) -> paper.BuildResult:
    return paper.build_paper("embedded-fixture", data, tmp_path_factory.mktemp("quarto-out"), REPO_ROOT, use_quarto=False)


def _stand_in(repo: Path, built: paper.BuildResult, html: bool = True, pdf: bool = True) -> Path:
    """What `quarto render` leaves behind: prepare's files in paper/_generated, the article under _manuscript/paper."""
    gen = repo / "paper" / paper.GENERATED
    gen.mkdir(parents=True, exist_ok=True)
    for name in ("claims.json", paper.PLACES):
        shutil.copy2(built.claims_json.parent / name, gen / name)
    out = repo / "_manuscript" / "paper"
    out.mkdir(parents=True, exist_ok=True)
    if html:
        shutil.copy2(built.html, out / "index.html")
    if pdf:
        shutil.copy2(built.pdf, out / "paper.pdf")
    return out


def _clear_quarto_env(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    for var in ("QUARTO_PROJECT_OUTPUT_FILES", "QUARTO_PROJECT_OUTPUT_DIR", quarto.PREPARED_ENV, quarto.AUDITED_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("QUARTO_PROJECT_DIR", str(repo))


def test_the_manuscript_layout_is_found_and_audited(built: paper.BuildResult, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    out = _stand_in(repo, built)
    _clear_quarto_env(monkeypatch, repo)
    found = quarto.manuscript_outputs(repo)
    assert found.html == (out / "index.html").resolve() and found.pdf == (out / "paper.pdf").resolve()
    report = paper.audit()  # the post-render hook
    assert str(found.html) in report.checked and str(found.pdf) in report.checked


def test_the_post_render_file_list_is_used(built: paper.BuildResult, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    _stand_in(repo, built, pdf=False)
    _clear_quarto_env(monkeypatch, repo)
    # Newline-separated, relative to the project directory (quarto-cli src/command/render/project.ts).
    monkeypatch.setenv("QUARTO_PROJECT_OUTPUT_FILES", "_manuscript/paper/index.html\n_manuscript/paper/paper.pdf\n")
    report = paper.audit()
    assert [Path(c).name for c in report.checked if not c.endswith(".qmd")] == ["index.html"]


@pytest.mark.parametrize("layout", ["empty", "old guess", "listed but absent"])
def test_an_audit_that_finds_nothing_to_check_fails(built: paper.BuildResult, tmp_path: Path, layout: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    _stand_in(repo, built, html=False, pdf=False)
    _clear_quarto_env(monkeypatch, repo)
    if layout == "old guess":  # where the build used to look: Quarto never writes these for paper/paper.qmd
        shutil.copy2(built.html, repo / "_manuscript" / "index.html")
        shutil.copy2(built.pdf, repo / "_manuscript" / "paper.pdf")
    if layout == "listed but absent":
        monkeypatch.setenv("QUARTO_PROJECT_OUTPUT_FILES", "_manuscript/paper/index.html")
    with pytest.raises(AuditError, match=r"no rendered paper to audit: expected .*_manuscript/paper/index\.html"):
        paper.audit()


def test_an_output_dir_set_in_the_project_moves_the_outputs(tmp_path: Path) -> None:
    (tmp_path / "_quarto.yml").write_text(yaml.safe_dump(
        {"project": {"type": "manuscript", "output-dir": "built"}, "manuscript": {"article": "paper/paper.qmd"}}))
    (tmp_path / "built" / "paper").mkdir(parents=True)
    (tmp_path / "built" / "paper" / "index.html").write_text("<html></html>")
    found = quarto.manuscript_outputs(tmp_path, env={})
    assert found.html == (tmp_path / "built" / "paper" / "index.html").resolve() and found.pdf is None


def test_the_quarto_config_makes_one_html_file_and_pandocs_citations() -> None:
    cfg = yaml.safe_load((REPO_ROOT / "_quarto.yml").read_text())
    assert cfg["format"]["html"]["embed-resources"] is True and cfg["format"]["html"]["toc"] is True
    assert cfg["format"]["typst"]["citeproc"] is True
    assert cfg["project"]["render"] == ["paper/paper.qmd"] and cfg["manuscript"]["article"] == "paper/paper.qmd"


_FAKE_QUARTO = """#!/bin/sh
# A stand-in for `quarto render`: it records the environment its hooks would see, then writes the manuscript layout.
env | grep '^OFFLOAD_LAB_' > "$PWD/quarto-env.txt"
mkdir -p _manuscript/paper
cp "{html}" _manuscript/paper/index.html
cp "{pdf}" _manuscript/paper/paper.pdf
"""


def test_paper_build_with_quarto_prepares_once_and_copies_the_outputs(
    built: paper.BuildResult, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "quarto"
    fake.write_text(_FAKE_QUARTO.format(html=built.html, pdf=built.pdf))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    res = paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=True)
    assert res.renderer == "quarto" and res.pdf.read_bytes() == built.pdf.read_bytes()
    assert res.html.read_bytes() == built.html.read_bytes()
    env = dict(line.split("=", 1) for line in (repo / "quarto-env.txt").read_text().splitlines())
    claims = repo / "paper" / paper.GENERATED / "claims.json"
    # The hooks Quarto runs inside that render see the markers and do nothing: prepare and audit run once, here.
    assert quarto.hook_skipped("prepare", claims, env) and quarto.hook_skipped("audit", None, env)
    assert quarto.hook_skipped("prepare", tmp_path / "other" / "claims.json", env) is None
    assert quarto.hook_skipped("prepare", claims, {}) is None and quarto.hook_skipped("audit", None, {}) is None


def test_quarto_that_writes_no_pdf_fails_the_build(built: paper.BuildResult, data: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_paper_sources(tmp_path / "repo")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "quarto").write_text("#!/bin/sh\nmkdir -p _manuscript\n")
    (bindir / "quarto").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(paper.RenderError, match=r"quarto render wrote no pdf or html: expected .*paper/paper\.pdf"):
        paper.build_paper("embedded-fixture", data, tmp_path / "out", repo, use_quarto=True)


_LINK_HARNESS = r"""
local ext, claims = arg[1], arg[2]
quarto = {
  utils = { resolve_path = function(p) return ext .. "/" .. p end },
  -- As Quarto 1.7 has them for a manuscript: pandoc writes beside the source, the project moves the page.
  doc = { is_format = function(f) return f == "html" end, input_file = "/r/paper/paper.qmd",
          output_file = "/r/paper/index.html" },
  project = { directory = "/r", output_directory = "/r/_manuscript" },
  log = { warning = function(m) end },
}
local sc = dofile(ext .. "/claim.lua")
local meta = { ["offload-lab"] = { claims = pandoc.MetaString(claims) } }
io.write(pandoc.write(pandoc.Pandoc({ pandoc.Plain(sc.claim({ "a.b" }, {}, meta)) }), "html"))
"""


def test_the_shortcode_links_data_from_where_quarto_writes_the_page(tmp_path: Path) -> None:
    import pypandoc

    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"claims": {"a.b": {
        "status": "ok", "kind": "inline", "text": "42", "notebook": "data/c/e/r1/notebook.ipynb",
        "files": [{"path": "data/c/e/r1/summary.csv", "sha256": "ab" * 32}]}}}))
    harness = tmp_path / "h.lua"
    harness.write_text(_LINK_HARNESS)
    out = subprocess.run([pypandoc.get_pandoc_path(), "lua", str(harness), str(REPO_ROOT / "_extensions" / "claim"),
                          str(claims)], capture_output=True, text=True, check=True).stdout
    # From _manuscript/paper/index.html the repository root is two levels up.
    assert 'href="../../data/c/e/r1/summary.csv"' in out and 'data-claim="a.b"' in out
    assert 'href="../../data/c/e/r1/notebook.ipynb" class="claim-nb"' in out and ">nb<" not in out
