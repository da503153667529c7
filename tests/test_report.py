"""`offload-lab report CAMPAIGN`: one self-contained HTML file whose every chart shows its values on hover, with total
throughput and per-stream tok/s against streams, from runs the embedded vLLM server measured."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pytest

from offload_lab.cli.main import main
from offload_lab.core import stats
from offload_lab.paper import explore, report
from paper_fixtures import REPO_ROOT, make_campaign

MEASURED = REPO_ROOT / "data" / "embedded"


def _latest(experiment: str) -> Path | None:
    """The manifest of the newest run of ``experiment`` in the repository's embedded campaign."""
    return next(iter(sorted((MEASURED / experiment).glob("*/manifest.json"), reverse=True)), None)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture campaign, plus the newest measured concurrency and context runs of the repository's embedded
    campaign (real vLLM event logs) where the checkout has them."""
    root = make_campaign(tmp_path_factory.mktemp("report"), experiments=("boots", "context", "quality"))
    for experiment in ("concurrency", "context"):
        manifest = _latest(experiment)
        if manifest is not None:
            shutil.copytree(manifest.parent, root / "embedded-fixture" / experiment / manifest.parent.name)
    return root


def _marks(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every single view of a spec (layers unpacked)."""
    if "layer" in spec:
        for layer in spec["layer"]:
            yield from _marks(layer)
    else:
        yield spec


def _fields(spec: dict[str, Any]) -> set[str]:
    return {enc.get("field") for view in _marks(spec) for enc in (view.get("encoding") or {}).values()
            if isinstance(enc, dict)}


def test_report_is_one_offline_file_with_hover_on_every_chart(data: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--campaign", "embedded-fixture", "--data-dir", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "charts" in printed and out.resolve().as_uri() in printed
    text = out.read_text(encoding="utf-8")
    # Self-contained: the Vega libraries inline, nothing fetched.
    assert "window.vegaEmbed=" in text
    assert "src=\"http" not in text and "href=\"http" not in text and "cdn.jsdelivr" not in text
    specs = report.chart_specs(text)
    assert len(specs) >= 3
    for spec in specs:
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
        for view in _marks(spec):
            assert "tooltip" in view["encoding"], (spec.get("title"), view.get("mark"))
    # Every chart has alt text beside it.
    assert text.count('role="img" aria-label="') == len(specs)


@pytest.mark.skipif(_latest("concurrency") is None, reason="the checkout has no measured concurrency run")
def test_total_throughput_and_per_stream_rate_against_streams_on_one_page(data: Path) -> None:
    r = report.build("embedded-fixture", data)
    fields = [_fields(s) for s in report.chart_specs(r.html)]
    total = [f for f in fields if "output_tok_s_total" in f]
    rate = [f for f in fields if "requests_per_s" in f]
    per_stream = [f for f in fields if "tok_s_median" in f]
    assert total and rate and per_stream and all("streams" in f for f in total + rate + per_stream)
    # The bar is drawn beside the per-stream rate.
    assert any("bar" in f for f in fields)
    # Total output tok/s as vllm bench serve counts it, over the steady-state window: more streams, more in all.
    from offload_lab.paper.explore_sweep import levels

    run = sorted((data / "embedded-fixture" / "concurrency").iterdir())[-1]
    table = levels(run)
    short = table[table["regime"] == table["regime"].iloc[0]].sort_values("streams")
    assert short["output_tok_s_total"].is_monotonic_increasing
    # At one stream the total is at most the one stream's rate (the gaps between its requests count in the window).
    one = short.iloc[0]
    assert one["output_tok_s_total"] <= one["tok_s_mean"] * 1.05


def test_latency_table_shows_no_percentile_beyond_its_samples(data: Path) -> None:
    html = report.build("embedded-fixture", data, experiments=["context"]).html
    lat = next(t for t in _tables(html) if {"metric", "n", "mean", "p50", "p95", "p99"} <= set(t.columns))
    n = pd.to_numeric(lat["n"].str.replace(",", ""))
    assert len(lat) and (lat.loc[n < stats.P95_MIN_SAMPLES, "p95"] == "").all()
    assert (lat.loc[n < stats.P99_MIN_SAMPLES, "p99"] == "").all()
    assert (lat.loc[n >= stats.P99_MIN_SAMPLES, "p99"] != "").all()


def _tables(text: str) -> list[pd.DataFrame]:
    """The page's tables as text cells (the standard library's parser: no lxml needed)."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: list[list[list[str]]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.tables[-1].append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag in ("td", "th") and self.cell is not None:
                self.tables[-1][-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parser = Tables()
    parser.feed(text)
    return [pd.DataFrame(rows[1:], columns=rows[0]) for rows in parser.tables if rows]


def test_runs_are_named_by_what_differs() -> None:
    runs = pd.DataFrame({
        "run_id": ["20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb", "20260103T000000Z-cccccc"],
        "parameters": [json.dumps({"streams": [1, 2], "bar_tok_s": 40}), json.dumps({"streams": [1, 2, 4],
                                                                                  "bar_tok_s": 40}),
                       json.dumps({"streams": [1, 2, 4], "bar_tok_s": 40})],
        "outcome": ["ok", "ok", "ok"],
        "started_at": pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-03"], utc=True),
    })
    labels = explore.run_labels(runs)
    assert labels["20260101T000000Z-aaaaaa"] == "streams=[1, 2]"
    # Alike in their parameters: told apart by when they started, never by run id.
    assert labels["20260102T000000Z-bbbbbb"] == "streams=[1, 2, 4], started 01-02 00:00"
    assert "bar_tok_s" not in " ".join(labels.values()) and "bbbbbb" not in " ".join(labels.values())


def test_bad_campaign_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--campaign", "nope", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
