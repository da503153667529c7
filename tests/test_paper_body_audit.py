"""A paper, not a listing (issue 33): the audit fails a section with nothing but its heading, a path of the build
machine or a run id in the body, and a percentile its samples do not support; a topic of remarks only leaves no
heading behind; and the page reads at 420 px (real Chromium, skipped where it is not installed)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from offload_lab.paper import audit_body, sections
from offload_lab.paper.claims import ClaimSet, ResolvedClaim
from paper_fixtures import REPO_ROOT


def _page(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "paper.html"
    p.write_text(f"<html><head><title>t</title></head><body>{body}</body></html>")
    return p


def test_a_section_with_nothing_but_its_heading_is_found(tmp_path: Path) -> None:
    page = _page(tmp_path, """
      <section class="level2"><h2>The question</h2><p>Why.</p></section>
      <section class="level2"><h2>Load generators compared</h2></section>
      <section class="level2"><h2>Limits</h2><section class="level3"><h3>More</h3><p>text</p></section></section>
      <section class="level2"><h2>Figures only</h2><figure><img src="x.svg"></figure></section>
      <section class="level2"><h2>References</h2><div id="refs"><p>Kwon 2023</p></div></section>
      <section id="sec-provenance" class="level2 appendix"><h2>Provenance</h2></section>""")
    found = audit_body.html_body_findings(page, {"refs", "sec-provenance"})
    assert [f.number for f in found] == ["Load generators compared"]
    assert "empty section" in found[0].context


def test_a_build_machines_path_or_a_run_id_in_the_body_is_found_and_the_appendix_may_list_runs(tmp_path) -> None:
    page = _page(tmp_path, """
      <section><h2>Context</h2><p>The runs 20261202T025945Z-f64a7b, from ../shared/reference/x.md.</p></section>
      <section id="sec-provenance"><h2>Provenance</h2><p>20261201T231328Z-5105df</p></section>""")
    found = audit_body.html_body_findings(page, {"sec-provenance"})
    assert sorted(f.number for f in found) == ["../shared", "20261202T025945Z-f64a7b"]
    lines = [("paper.pdf page 2", "the run 20261201T231500Z-709e39 and ../shared")]
    assert len(audit_body.pdf_body_findings(lines)) == 2


def _table_claim(name: str, columns: list[str], rows: list[list]) -> ResolvedClaim:
    return ResolvedClaim(name=name, status="ok", experiment="x", description="", unit="", kind="table",
                         value={"columns": columns, "rows": rows, "align": "l" * len(columns)}, text="")


def test_a_percentile_beside_too_few_samples_is_found() -> None:
    claims = ClaimSet(campaign="c", kind="embedded", data_root="d", runs={}, absent=[], claims={
        "a.table": _table_claim("a.table", ["Regime", "n", "p95 TTFT s", "p99 TTFT s"],
                                [["short", 3, "0.50", "—"], ["long", 20, "0.70", "—"], ["all", 120, "0.9", "1.2"]]),
        "b.table": _table_claim("b.table", ["Regime", "p95"], [["short", "0.5"]]),  # no count: nothing to check
    })
    found = audit_body.percentile_findings(claims)
    assert [(f.where, f.number) for f in found] == [("claim a.table", "0.50")]
    assert "p95 from 3 samples" in found[0].context


def test_a_topic_of_remarks_only_carries_its_heading_inside_each_remark(tmp_path: Path) -> None:
    frag = tmp_path / "section.qmd"
    frag.write_text('---\nsection:\n  topic: tools\n  heading: "Tools compared {#sec-tools}"\n  order: 900\n'
                    '  note: none\n---\n\nSome prose.\n')
    out = sections.assemble([sections.read_fragment(frag, "load_generator")])
    block = out[out.index("::: {.choose}"):]
    assert "## Tools compared" in block  # inside the .requires block: left out with it
    assert "## Tools compared" not in out[: out.index("::: {.choose}")]


# Readable at 420 px --------------------------------------------------------------------------------------------------

# Chromium will not open a window narrower than 500 px: the page goes into a 420 px frame (srcdoc, so that the
# outer page may read it), and the outer page writes what it measured where --dump-dom shows it.
_PROBE = """
<script>
function probe() {
  const f = document.getElementById('phone'), d = f.contentDocument, vw = f.contentWindow.innerWidth;
  const out = {vw: vw, captions: [], figures: []};
  for (const c of d.querySelectorAll('caption, figcaption')) {
    const r = c.getBoundingClientRect(); out.captions.push({right: r.right, left: r.left});
  }
  for (const img of d.querySelectorAll('figure img')) {
    out.figures.push({scale: img.getBoundingClientRect().width / img.naturalWidth});
  }
  document.body.setAttribute('data-probe', JSON.stringify(out));
}
</script>"""


def _figure_svg(path: Path) -> float:
    """A figure drawn as the paper draws them (offload_lab.paper.figures' style), with the smallest text the
    experiments use (7 pt); returns that size in CSS pixels at the SVG's own scale."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from offload_lab.paper.figures import _STYLE

    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(6, 2.7), layout="constrained")
        ax = fig.subplots()
        ax.plot([1, 2, 3], [3, 1, 2], label="a legend entry")
        ax.legend(fontsize=7)
        fig.savefig(path, format="svg")
    return 7 * 96 / 72


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
def test_at_420_px_captions_stay_on_the_screen_and_figure_text_is_at_least_10_px(tmp_path: Path) -> None:
    import base64

    smallest_px = _figure_svg(tmp_path / "f.svg")
    svg = base64.b64encode((tmp_path / "f.svg").read_bytes()).decode()
    wide = "".join(f"<th>Column heading {i}</th>" for i in range(14))
    cells = "".join(f"<td>{1000 + i}.5</td>" for i in range(14))
    css = (REPO_ROOT / "paper" / "paper.css").read_text()
    inner = f"""<!doctype html><html><head><meta name="viewport" content="width=device-width">
      <style>{css}</style></head><body>
      <p>A paragraph of the paper.</p>
      <table><caption>Table 1: A caption long enough to need more than one line on a phone, which must wrap inside
      the screen rather than run off its edge with the columns of the table.</caption>
      <thead><tr>{wide}</tr></thead><tbody><tr>{cells}</tr></tbody></table>
      <figure><img src="data:image/svg+xml;base64,{svg}" style="width:80%">
      <figcaption>Figure 1: A figure caption that is also long enough to wrap on a narrow screen.</figcaption></figure>
      </body></html>"""
    page = tmp_path / "p.html"
    page.write_text(f"""<!doctype html><html><head>{_PROBE}</head><body style="margin:0">
      <iframe id="phone" width="420" height="1600" style="border:0" onload="probe()"
        srcdoc="{html.escape(inner, quote=True)}"></iframe></body></html>""")
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--window-size=420,2000", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    m = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert m, done.stderr[-2000:]
    probe = json.loads(m.group(1).replace("&quot;", '"'))
    assert probe["vw"] == 420 and len(probe["captions"]) == 2 and probe["figures"]
    for c in probe["captions"]:
        assert c["left"] >= 0 and c["right"] <= probe["vw"] + 1, c
    for f in probe["figures"]:
        assert smallest_px * f["scale"] >= 10, f
