"""``offload-lab report CAMPAIGN``: one self-contained interactive HTML file of every run of a campaign.

Per experiment: its runs told apart by the parameters in which they differ (:func:`explore.run_labels`, never by run
id alone); for a load experiment the latency table per level (n, mean, median, p95, p99 of TTFT, TPOT, ITL and end to
end, each percentile only where its n supports it: :func:`offload_lab.core.stats.supports`), the latency
distributions, and total output tok/s, requests/s and tok/s per stream against the bar, all against the streams on
one row; TTFT and TPOT against context and cache; boots; quality deltas; every other table as it is. Tables filter as
you type and scroll inside their box; charts show their values on hover (:mod:`offload_lab.paper.report_charts`).

Every number comes from :func:`offload_lab.paper.explore.load_campaign`, which reads the files the paper's claims cite
(``regimes.csv``, ``summary.csv``, the event logs...) and checks each run against its manifest: what did not match is
listed under *problems* at the top rather than hidden. Nothing is downloaded: the Vega JavaScript is inlined (from
``vl-convert``), so the file opens offline. This module names no experiment: it draws the tables it finds.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.paper import explore, explore_plots, report_charts

REPORT_SUFFIX = "-report.html"  # the default file: <campaign>-report.html in the current folder
MAX_TABLE_ROWS = 5000  # a table's rows in the page (all of them below this; the filter searches what is there)
LABEL = "label"  # the column naming a run by what differs (explore.run_labels)
_BOOKKEEPING = ("experiment", "kind", "run_id", "outcome", "boot", "host", "path", "parameters", "git_commit",
                "git_dirty", "started_at", "ended_at", "notebook", "command", "run_id_in_file", "experiment_in_file")
# A load experiment's levels table, as shown: what the study reads first.
LEVEL_COLUMNS = ("regime", "streams", "ok_in_window", "errors", "achieved_concurrency", "output_tok_s_total",
                 "requests_per_s", "tok_s_median", "tok_s_mean", "tok_s_p5", "holds_bar", "ttft_median_s",
                 "ttft_mean_s", "tpot_median_ms", "tpot_mean_ms", "itl_median_ms", "client_health")


@dataclass
class Report:
    html: str
    charts: int
    tables: int
    experiments: list[str]
    seconds: float


# ---- HTML pieces --------------------------------------------------------------------------------------------------

def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


class _Page:
    """What a page shows, in order: HTML pieces and rows of charts. The report writes them as one file; the explore
    notebook displays each piece as it comes (:func:`experiment_items`)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []  # ("html", text) or ("charts", [(name, spec, alt text), ...])
        self.charts = 0
        self.tables = 0

    def add(self, text: str) -> None:
        self.items.append(("html", text))

    def chart_row(self, charts: list[tuple[str, dict[str, Any], str]]) -> None:
        """Charts side by side while the page is wide, one under another on a phone."""
        if charts:
            self.items.append(("charts", charts))
            self.charts += len(charts)

    def html(self) -> str:
        parts, n = [], 0
        for kind, value in self.items:
            if kind == "html":
                parts.append(value)
                continue
            parts.append('<div class="charts">')
            for name, spec, alt_text in value:
                n += 1
                cid = f"chart{n}"
                # The spec as JSON in the page ("</" escaped so no text in it can close the script element).
                payload = json.dumps(spec, allow_nan=False, default=str).replace("</", "<\\/")
                parts.append(f'<figure class="chart"><div id="{cid}" class="vega" role="img" '
                             f'aria-label="{_esc(alt_text)}"></div><figcaption>{_esc(alt_text)}</figcaption>'
                             f'<script type="application/json" data-chart="{cid}" data-name="{_esc(name)}">'
                             f'{payload}</script></figure>')
            parts.append("</div>")
        return "\n".join(parts)

    def table(self, frame: pd.DataFrame, caption: str, note: str = "") -> None:
        if frame.empty:
            return
        self.tables += 1
        shown = frame.head(MAX_TABLE_ROWS)
        more = f" (first {MAX_TABLE_ROWS:,} of {len(frame):,} rows)" if len(frame) > MAX_TABLE_ROWS else ""
        tid = f"table{self.tables}"
        head = "".join(f'<th title="{_esc(explore_plots.label_of(c))}">{_esc(c)}</th>' for c in shown.columns)
        body = "".join(
            "<tr>" + "".join(f'<td class="{"num" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""}">'
                             f"{_esc(explore._number(v))}</td>" for v in row) + "</tr>"
            for row in shown.itertuples(index=False, name=None))
        self.add(f'<div class="table"><div class="tablehead"><span class="caption">{_esc(caption)}{_esc(more)}</span>'
                 f'<input type="search" placeholder="filter rows" aria-label="filter the rows of {_esc(caption)}" '
                 f'data-filter="{tid}"></div>'
                 + (f'<p class="note">{_esc(note)}</p>' if note else "")
                 + f'<div class="scroll"><table id="{tid}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                 "</table></div></div>")


def _visible(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as the page shows it: the run's label first, bookkeeping and empty columns out."""
    out = frame.drop(columns=[c for c in _BOOKKEEPING if c in frame.columns])
    out = out.dropna(axis=1, how="all")
    if LABEL in out:
        out = out[[LABEL] + [c for c in out.columns if c != LABEL]]
    return out


# ---- per experiment ----------------------------------------------------------------------------------------------

def _labelled(frame: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    if frame.empty or "run_id" not in frame:
        return frame
    out = frame.copy()
    out[LABEL] = out["run_id"].map(labels).fillna(out["run_id"].map(explore.short_run))
    return out


def _bars(runs: pd.DataFrame) -> list[float]:
    from offload_lab.load.bar import bar_of

    bars = []
    for p in runs.get("parameters", pd.Series(dtype=str)):
        params = json.loads(p) if isinstance(p, str) else {}
        if "bar_tok_s" in params:
            bars.append(float(bar_of(params)))
    return bars


_UNIT_OF = {"level": "streams", "context_tokens": "context tokens", "prompt_tokens": "prompt tokens"}


def _distributions(requests: pd.DataFrame, title: str) -> list[tuple[str, dict[str, Any], str]]:
    """The latest run's latency distributions, one chart per latency, one line per regime and level."""
    ok = requests[requests["ok"].fillna(False).astype(bool)] if "ok" in requests else requests
    if ok.empty:
        return []
    latest = ok[ok["run_id"] == ok["run_id"].max()]
    keys = explore_plots.level_keys(latest)
    out = []
    for column, name, unit, factor in explore_plots.LATENCIES:
        if column not in latest or latest[column].isna().all():
            continue
        frames = []
        groups = latest.groupby(keys, dropna=False, sort=True) if keys else [((), latest)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            words = [f"{v:g} {_UNIT_OF.get(k, k)}" if k in _UNIT_OF else str(v) for k, v in zip(keys, key)
                     if pd.notna(v)]
            points = report_charts.ecdf_points(explore_plots._values(g, column, factor))
            points["group"] = " · ".join(words) or "every request"
            frames.append(points)
        data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if not data.empty:
            out.append(report_charts.distribution_chart(data, name, unit, f"{title}, latest run"))
    return out


def experiment_items(t: explore.CampaignTables, experiment: str) -> list[tuple[str, Any]]:
    """One experiment's part of the report, in order: ("html", text) and ("charts", [(name, spec, alt text)])."""
    page = _Page()
    _experiment(page, t, experiment)
    return page.items


def _experiment(page: _Page, t: explore.CampaignTables, experiment: str) -> None:
    tables = explore.experiment_tables(t, experiment)
    runs_of = t.runs[t.runs["experiment"] == experiment]
    labels = explore.run_labels(runs_of)
    outcomes = ", ".join(f"{n} {o}" for o, n in runs_of["outcome"].value_counts().items())
    page.add(f'<section id="{_esc(experiment)}"><h2>{_esc(experiment)}</h2>'
             f'<p>{len(runs_of)} run{"s" if len(runs_of) != 1 else ""}: {_esc(outcomes)}.</p>')
    diff = explore.differing(runs_of)
    runs_table = runs_of[[c for c in ("run_id", "outcome", "seconds", "gpus", "error") if c in runs_of]].copy()
    runs_table.insert(0, LABEL, runs_table["run_id"].map(labels))
    runs_table["run_id"] = runs_table["run_id"].map(explore.short_run)
    if not diff.empty:
        runs_table = runs_table.merge(diff.drop(columns=[c for c in ("outcome", "GPUs") if c in diff]),
                                      left_on=runs_of["run_id"].values, right_index=True, how="left")
        runs_table = runs_table.drop(columns=[c for c in runs_table.columns if c == "key_0"])
    page.table(runs_table.dropna(axis=1, how="all"), "runs, named by the parameters in which they differ",
               "" if not diff.empty or len(runs_of) < 2 else "these runs differ in no parameter")
    bars = _bars(runs_of)
    # Each table in the page's order: what the study reads first.
    levels = _labelled(tables.get("levels", pd.DataFrame()), labels)
    if not levels.empty:
        page.chart_row(report_charts.levels_charts(levels, bars, experiment))
        shown = levels[[LABEL] + [c for c in LEVEL_COLUMNS if c in levels]]
        page.table(_visible(shown), "per level: total output tok/s and requests/s beside tok/s per stream",
                   "total output tok/s: output tokens of good requests inside the steady-state window per second, all "
                   "streams together; tok/s per stream: one request's rate, the one the bar is about")
    context = _labelled(tables.get("context", pd.DataFrame()), labels)
    if not context.empty and "context_tokens" in context:
        page.chart_row(report_charts.context_charts(context, experiment))
        page.table(_visible(context), "per context length")
    requests = t.tables().get("requests", pd.DataFrame())
    requests = requests[requests["experiment"] == experiment] if "experiment" in requests else requests.iloc[0:0]
    if not requests.empty:
        lat = _labelled(explore_plots.latency_percentiles(requests), labels)
        page.table(_visible(lat), "latency per level: n, mean, median, p95, p99",
                   "p95 only from 20 samples and p99 only from 100 (below that a percentile is the largest value or "
                   "next to it); ITL pools every token gap of the level's requests, as vllm bench serve does")
        page.chart_row(_distributions(requests, experiment))
    boots = tables.get("boots", pd.DataFrame())
    if not boots.empty and "startup_s" in boots:
        page.chart_row([report_charts.boots_chart(boots, experiment)])
    quality = _labelled(tables.get("quality", pd.DataFrame()), labels)
    if not quality.empty:
        chart = report_charts.quality_chart(quality, experiment)
        page.chart_row([chart] if chart else [])
    shown = {"runs", "levels", "context", "requests (output tok/s per request)", explore.LATENCY_TABLE}
    for name, frame in tables.items():
        if name in shown or frame.empty:
            continue
        page.table(_visible(_labelled(frame, labels)), name)
    page.add("</section>")


# ---- the page ----------------------------------------------------------------------------------------------------

# The page's frame (the report only), then what tables and charts need (the report and the notebook: scoped to
# .olab, so that in JupyterLab it styles only these outputs).
_PAGE_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:0 16px;
color:#1d1d1d}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{font-size:1.25em;border-top:1px solid #ddd;padding-top:.8em;margin-top:1.6em}
nav a{margin-right:.8em;white-space:nowrap}.meta{color:#555;font-size:.9em}
@media (max-width:600px){body{padding:0 8px}.olab .charts{grid-template-columns:1fr}}
"""
TABLE_CSS = """
.olab .note,.olab figcaption{color:#555;font-size:.9em}
.olab .charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:12px;margin:.6em 0}
.olab .chart{margin:0;min-width:0}.olab .vega{width:100%;min-height:160px}
.olab .table{margin:.8em 0;max-width:100%}
.olab .tablehead{display:flex;flex-wrap:wrap;gap:.5em;align-items:center;justify-content:space-between}
.olab .caption{font-weight:600}.olab .scroll{overflow:auto;max-height:420px;max-width:100%;border:1px solid #ddd}
.olab table{border-collapse:collapse;font-size:12px;margin:0}
.olab th,.olab td{padding:2px 6px;white-space:nowrap;text-align:left}
.olab th{position:sticky;top:0;background:#f3f3f3}
.olab td.num{text-align:right;font-variant-numeric:tabular-nums}
.olab tr:nth-child(even) td{background:#fafafa}.olab input[type=search]{font:inherit;padding:2px 6px;max-width:100%}
"""

# One listener for every filter box, wherever and whenever its table appears (a notebook adds them one by one).
FILTER_JS = """
if (!window.offloadLabFilter) {
  window.offloadLabFilter = true;
  document.addEventListener('input', (event) => {
    const input = event.target;
    if (!input.dataset || !input.dataset.filter) return;
    const words = input.value.toLowerCase().split(/\\s+/).filter(Boolean);
    const table = input.closest('.table').querySelector('table');
    for (const row of table.tBodies[0].rows) {
      const text = row.textContent.toLowerCase();
      row.hidden = !words.every(w => text.includes(w));
    }
  });
}
"""

_EMBED_JS = """
for (const el of document.querySelectorAll('script[type="application/json"][data-chart]')) {
  const target = document.getElementById(el.dataset.chart);
  vegaEmbed(target, JSON.parse(el.textContent), {actions: false, renderer: 'svg'})
    .catch(e => { target.textContent = 'this chart could not be drawn: ' + e; });
}
"""


def javascript() -> str:
    """Vega, Vega-Lite and vega-embed as one script that sets ``window.vegaEmbed`` (vl-convert bundles them)."""
    import vl_convert

    return vl_convert.javascript_bundle()


def build(campaign: str, data_root: Path | str, experiments: list[str] | None = None) -> Report:
    """The report of ``campaign`` under ``data_root`` as one HTML text."""
    t0 = time.monotonic()
    t = explore.load_campaign(campaign, data_root, experiments=experiments)
    names = explore.experiments(t)
    page = _Page()
    page.table(t.summary(), "runs per experiment and outcome")
    problems = t.problems
    if not problems.empty:
        page.table(problems.assign(run_id=problems["run_id"].map(explore.short_run)),
                   "problems: files that do not match their run's manifest, or that a table could not read")
    for name in names:
        _experiment(page, t, name)
    head = [f"<h1>Campaign {_esc(campaign)}</h1>",
            f'<p class="meta">{len(t.runs)} run{"s" if len(t.runs) != 1 else ""} of {len(names)} experiment'
            f'{"s" if len(names) != 1 else ""} under {_esc(data_root)}; made {pd.Timestamp.now("UTC"):%Y-%m-%d %H:%M} UTC '
            "by offload-lab report. Hover a chart for its values; type in a table's box to filter its rows.</p>",
            "<nav>" + " ".join(f'<a href="#{_esc(n)}">{_esc(n)}</a>' for n in names) + "</nav>"]
    body = "\n".join(head) + "\n" + page.html()
    doc = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
           f"<title>{_esc(campaign)}: offload-lab report</title><style>{_PAGE_CSS}{TABLE_CSS}</style></head>"
           f"<body class=\"olab\">\n{body}\n<script>{FILTER_JS}</script>\n"
           f"<script type=\"module\">{javascript()}\n{_EMBED_JS}</script>\n</body></html>\n")
    return Report(html=doc, charts=page.charts, tables=page.tables, experiments=names,
                  seconds=time.monotonic() - t0)


def chart_specs(text: str) -> list[dict[str, Any]]:
    """The Vega-Lite specs a report embeds, read back from its HTML (what a test or a script checks)."""
    import re

    found = re.findall(r'<script type="application/json" data-chart="[^"]+" data-name="[^"]*">(.*?)</script>', text,
                       flags=re.S)
    return [json.loads(s.replace("<\\/", "</")) for s in found]


# --- the same pieces in a notebook (notebooks/explore.ipynb) ---------------------------------------------------

def table(frame: pd.DataFrame, caption: str, note: str = "") -> Any:
    """A table to look at in a notebook: every row, in a box that scrolls (it fits the page however wide the table)
    with a filter box above it; numbers to three significant digits. The explore notebook's tables."""
    from IPython.display import HTML

    page = _Page()
    page.table(explore.short_labels(frame), caption, note)
    text = "".join(v for _, v in page.items)
    return HTML(f"<style>{TABLE_CSS}</style><script>{FILTER_JS}</script><div class=\"olab\">{text}</div>")


def show(t: explore.CampaignTables, experiment: str) -> None:
    """Display one experiment in a notebook as the report shows it (:func:`experiment_items`):
    its runs named by what differs, tables that scroll inside their box and filter as you type, and its charts,
    drawn with hover by JupyterLab and as PNG images with alt text where the notebook runs headless. An experiment
    the report has no chart for gets its matplotlib figure (:func:`~offload_lab.paper.explore.figures`), with alt text too."""
    from IPython.display import HTML, Markdown, display

    runs_of = t.runs[t.runs["experiment"] == experiment]
    # The heading as Markdown, so that JupyterLab's table of contents lists the experiment.
    display(Markdown(f"## {experiment}\n{len(runs_of)} run{'s' if len(runs_of) != 1 else ''}: "
                     + ", ".join(f"{n} {o}" for o, n in runs_of["outcome"].value_counts().items())))
    display(HTML(f"<style>{TABLE_CSS}</style><script>{FILTER_JS}</script>"))
    items = experiment_items(t, experiment)[1:]  # the report's own heading is the one above
    for kind, value in items:
        if kind == "html":
            display(HTML(f'<div class="olab">{value}</div>'))
            continue
        for _, spec, alt_text in value:
            data, metadata = report_charts.mimebundle(spec, alt_text)
            display(data, metadata=metadata, raw=True)
    if any(kind == "charts" for kind, _ in items):
        return
    for fig in explore.figures(t, experiment):
        title = fig._suptitle.get_text() if fig._suptitle else next(
            (ax.get_title(loc="left") or ax.get_title() for ax in fig.axes), experiment)
        display(fig, metadata={"image/png": {"alt": f"{experiment}: {title or 'figure'}"}})
