"""The interactive charts of a campaign's report (:mod:`offload_lab.paper.report`) and of the explore notebook, as
Vega-Lite specifications made with Altair.

Vega-Lite rather than Plotly because a chart is then a small declarative JSON document with its data inside: the
report embeds each one as it is (a test reads them back and checks every chart has its hover tooltip), JupyterLab
draws the same document with its built-in Vega renderer, and ``vl-convert`` renders it to a PNG for a notebook
executed headless, and gives the one JavaScript bundle (Vega, Vega-Lite, vega-embed; about 0.9 MB) that the report
inlines so that it opens offline. Plotly's would be about 4.6 MB and its static images need a browser (kaleido).

Every chart here has a tooltip on every mark that shows values, draws from the tables
:func:`offload_lab.paper.explore.load_campaign` reads (the files the paper's claims cite), and names no experiment:
the caller says which table it draws. Runs are told apart by ``label``: the parameters in which they differ
(:func:`offload_lab.paper.report.run_labels`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

BAR_COLOR = "black"
WIDTH = "container"  # each chart fills its box; the page lays the boxes out (side by side, or one under another)
HEIGHT = 220


def _alt() -> Any:
    import altair as alt

    # Charts carry their data inline whatever its size: the report is one file, and a campaign's tables are small
    # (the largest, every token gap of a load run, is thinned to quantiles before it gets here).
    alt.data_transformers.disable_max_rows()
    return alt


def _clean(frame: pd.DataFrame) -> pd.DataFrame:
    """Plain values Vega-Lite reads: no lists, timestamps as text."""
    out = frame.copy()
    for c in out.columns:
        if out[c].map(lambda v: isinstance(v, (list, tuple, dict))).any():
            out = out.drop(columns=c)
        elif pd.api.types.is_datetime64_any_dtype(out[c]):
            out[c] = out[c].astype(str)
    return out.replace([float("inf"), float("-inf")], float("nan"))


def _data(frame: pd.DataFrame) -> Any:
    """A table as inline values, missing ones as null (JSON has no NaN; Altair's own conversion keeps NaN)."""
    import json

    return _alt().Data(values=json.loads(frame.to_json(orient="records", double_precision=10)))


def levels_charts(levels: pd.DataFrame, bars: list[float], title: str) -> list[tuple[str, dict[str, Any], str]]:
    """Three charts against streams, meant to sit on one row: total output tok/s, requests/s, and the output tok/s
    per stream (median, p5 to p95 band) against the bar. One colour per regime, one dash per run."""
    alt = _alt()
    data = _clean(levels)
    series = ["regime", "label"] if "regime" in data else ["label"]
    data["series"] = data[series].astype(str).agg(" · ".join, axis=1)
    x = alt.X("streams:Q", title="streams (concurrent requests)", scale=alt.Scale(type="log", base=2, nice=False),
              axis=alt.Axis(values=sorted(data["streams"].dropna().unique().tolist()), format="d"))
    color = alt.Color("regime:N" if "regime" in data else "label:N", title="regime" if "regime" in data else "run")
    dash = alt.StrokeDash("label:N", title="run", legend=alt.Legend(orient="bottom", columns=1, labelLimit=320,
                                                                    symbolType="stroke", symbolStrokeWidth=2,
                                                                    symbolStrokeColor="#333"))
    tip_common = [alt.Tooltip("label:N", title="run"), *([alt.Tooltip("regime:N")] if "regime" in data else []),
                  alt.Tooltip("streams:Q"), alt.Tooltip("ok_in_window:Q", title="good requests in window")]
    out = []
    for column, name, fmt in (("output_tok_s_total", "total output tokens/s", ".1f"),
                              ("requests_per_s", "requests/s", ".2f")):
        if column not in data or data[column].isna().all():
            continue
        base = alt.Chart(_data(data)).encode(x=x, y=alt.Y(f"{column}:Q", title=name), color=color, detail="series:N",
                                      tooltip=[*tip_common, alt.Tooltip(f"{column}:Q", title=name, format=fmt),
                                               alt.Tooltip("window_s:Q", title="window (s)", format=".2f")])
        chart = (base.mark_line(point=True).encode(strokeDash=dash)
                 .properties(width=WIDTH, height=HEIGHT, title=f"{title}: {name} against streams"))
        out.append((f"{name} against streams", chart.to_dict(), f"{title}: {name} (all streams together) against "
                    "the number of concurrent streams, one line per regime and run"))
    per = alt.Chart(_data(data)).encode(x=x, color=color, detail="series:N")
    tips = [*tip_common, alt.Tooltip("tok_s_median:Q", title="median tok/s per stream", format=".1f"),
            alt.Tooltip("tok_s_mean:Q", title="mean tok/s per stream", format=".1f"),
            alt.Tooltip("tok_s_p5:Q", title="p5 tok/s per stream", format=".1f"),
            alt.Tooltip("holds_bar:N", title="holds the bar")]
    tips = [t for t in tips if t.to_dict()["field"] in data.columns]
    layers = [per.mark_line(point=True).encode(y=alt.Y("tok_s_median:Q", title="output tokens/s per stream"),
                                               strokeDash=dash, tooltip=tips)]
    if {"tok_s_p5", "tok_s_p95"} <= set(data.columns):
        layers.insert(0, per.mark_area(opacity=0.15).encode(y=alt.Y("tok_s_p5:Q", title="output tokens/s per stream"),
                                                            y2="tok_s_p95:Q", tooltip=tips))
    for bar in sorted(set(bars)):
        rule = pd.DataFrame({"bar": [bar], "what": [f"the bar: {bar:g} tokens/s per stream"]})
        layers.append(alt.Chart(_data(rule)).mark_rule(color=BAR_COLOR, strokeDash=[4, 3])
                      .encode(y="bar:Q", tooltip=[alt.Tooltip("what:N", title="guide")]))
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT,
                                          title=f"{title}: output tokens/s per stream against streams")
    out.append(("tokens/s per stream against streams", chart.to_dict(),
                f"{title}: median output tokens per second of one stream (band p5 to p95) against the number of "
                "concurrent streams, with the bar as a dashed black line"))
    return out


def ecdf_points(values: pd.Series, points: int = 200) -> pd.DataFrame:
    """A sample's empirical distribution as at most ``points`` (value, share at or below) pairs: every value when
    there are few, else evenly spaced quantiles, so a long run's token gaps stay a small chart."""
    v = pd.to_numeric(values, errors="coerce").dropna().sort_values().reset_index(drop=True)
    n = len(v)
    if n == 0:
        return pd.DataFrame(columns=["value", "share", "n"])
    if n <= points:
        return pd.DataFrame({"value": v, "share": [(i + 1) / n for i in range(n)], "n": n})
    shares = [(i + 1) / points for i in range(points)]
    return pd.DataFrame({"value": [float(v.quantile(s)) for s in shares], "share": shares, "n": n})


def distribution_chart(points: pd.DataFrame, metric: str, unit: str, title: str) -> tuple[str, dict[str, Any], str]:
    """One latency's distribution: the share of requests (token gaps, for ITL) at or below each value, one line per
    group (``group``: regime and streams, or context)."""
    alt = _alt()
    data = _clean(points)
    chart = (alt.Chart(_data(data)).mark_line(interpolate="step-after", point=alt.OverlayMarkDef(size=12, opacity=0.4))
             .encode(x=alt.X("value:Q", title=f"{metric} ({unit})"),
                     y=alt.Y("share:Q", title="share at or below", scale=alt.Scale(domain=[0, 1])),
                     color=alt.Color("group:N", title="", legend=alt.Legend(orient="bottom", columns=2,
                                                                            labelLimit=300)),
                     tooltip=[alt.Tooltip("group:N"), alt.Tooltip("value:Q", title=f"{metric} ({unit})", format=".4g"),
                              alt.Tooltip("share:Q", title="share at or below", format=".0%"),
                              alt.Tooltip("n:Q", title="samples")])
             .properties(width=WIDTH, height=HEIGHT, title=f"{title}: {metric} distribution"))
    return (f"{metric} distribution", chart.to_dict(),
            f"{title}: cumulative distribution of {metric} in {unit}, one line per group")


def context_charts(context: pd.DataFrame, title: str) -> list[tuple[str, dict[str, Any], str]]:
    """TTFT and TPOT (median, p5 to p95) against the context length, one colour per run, filled points where the
    server reported cached prompt tokens."""
    alt = _alt()
    data = _clean(context)
    data["cache"] = (data["cached_tokens_max"].fillna(0) > 0).map({True: "cache hit", False: "no cache hit"}) \
        if "cached_tokens_max" in data else "not recorded"
    out = []
    for mid, lo, hi, name in (("ttft_median_s", "ttft_p5_s", "ttft_p95_s", "TTFT (s)"),
                              ("tpot_median_ms", "tpot_p5_ms", "tpot_p95_ms", "TPOT (ms)")):
        if mid not in data:
            continue
        base = alt.Chart(_data(data)).encode(
            x=alt.X("context_tokens:Q", title="context tokens", scale=alt.Scale(type="log", base=2)),
            color=alt.Color("label:N", title="run", legend=alt.Legend(orient="bottom", columns=1, labelLimit=320)))
        tips = [alt.Tooltip("label:N", title="run"), alt.Tooltip("context_tokens:Q", title="context tokens"),
                alt.Tooltip(f"{mid}:Q", title=f"{name}, median", format=".4g"), alt.Tooltip("cache:N")]
        tips += [alt.Tooltip(f"{c}:Q", format=".4g") for c in (lo, hi, "n", "cached_tokens_max") if c in data]
        layers = [base.mark_line().encode(y=alt.Y(f"{mid}:Q", title=f"{name}, median"), tooltip=tips),
                  base.mark_point(size=50, filled=True).encode(y=f"{mid}:Q", shape=alt.Shape("cache:N", title="cache"),
                                                               tooltip=tips)]
        if lo in data and hi in data:
            layers.insert(0, base.mark_errorbar().encode(y=alt.Y(f"{lo}:Q", title=f"{name}, median"), y2=f"{hi}:Q",
                                                         tooltip=tips))
        chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT, title=f"{title}: {name} against context")
        out.append((f"{name} against context", chart.to_dict(),
                    f"{title}: median {name} against context length, p5 to p95 as bars, one colour per run, point "
                    "shape for whether the prompt hit the cache"))
    return out


def boots_chart(boots: pd.DataFrame, title: str) -> tuple[str, dict[str, Any], str]:
    """Seconds from start to ready per boot, in order; a boot that never got ready named by its outcome."""
    alt = _alt()
    data = _clean(boots)
    data["startup_s"] = data["startup_s"].fillna(0)
    chart = (alt.Chart(_data(data)).mark_bar()
             .encode(x=alt.X("boot_number:O", title="boot (server start), in order"),
                     y=alt.Y("startup_s:Q", title="seconds to ready"),
                     color=alt.Color("boot_outcome:N", title="outcome"),
                     tooltip=[alt.Tooltip("boot_number:O", title="boot"), alt.Tooltip("boot_outcome:N", title="outcome"),
                              alt.Tooltip("startup_s:Q", title="seconds to ready", format=".1f"),
                              *[alt.Tooltip(f"{c}:N") for c in ("engine", "run_id") if c in data]])
             .properties(width=WIDTH, height=HEIGHT, title=f"{title}: seconds to ready per boot"))
    return ("boots", chart.to_dict(), f"{title}: seconds each server start took to be ready, in order, coloured by "
            "outcome")


def quality_chart(quality: pd.DataFrame, title: str) -> tuple[str, dict[str, Any], str] | None:
    """The accuracy difference (local minus reference) per benchmark with its confidence interval, one colour per
    run: the quality delta the paper reports."""
    alt = _alt()
    if "delta" not in quality or quality["delta"].isna().all():
        return None
    data = _clean(quality[quality["delta"].notna()])
    tips = [alt.Tooltip("label:N", title="run"), alt.Tooltip("benchmark:N"),
            alt.Tooltip("delta:Q", title="accuracy delta (local − reference)", format="+.3f")]
    tips += [alt.Tooltip(f"{c}:Q", format=".3f") for c in ("ci_low", "ci_high", "reference_accuracy",
                                                            "local_accuracy") if c in data]
    tips += [alt.Tooltip("n:Q", title="items")] if "n" in data else []
    base = alt.Chart(_data(data)).encode(y=alt.Y("benchmark:N", title=None), yOffset="label:N",
                                  color=alt.Color("label:N", title="run", legend=alt.Legend(orient="bottom", columns=1,
                                                                                            labelLimit=320)))
    layers = [base.mark_point(filled=True, size=60).encode(x=alt.X("delta:Q", title="accuracy delta "
                                                                   "(local − reference)"), tooltip=tips)]
    if {"ci_low", "ci_high"} <= set(data.columns):
        layers.insert(0, base.mark_rule().encode(x="ci_low:Q", x2="ci_high:Q", tooltip=tips))
    zero = alt.Chart(_data(pd.DataFrame({"x": [0.0], "what": ["no difference"]}))).mark_rule(color=BAR_COLOR).encode(
        x="x:Q", tooltip=[alt.Tooltip("what:N", title="guide")])
    chart = alt.layer(*layers, zero).properties(width=WIDTH, height=max(120, 40 * data["benchmark"].nunique()),
                                               title=f"{title}: accuracy delta per benchmark")
    return ("quality delta", chart.to_dict(), f"{title}: local minus reference accuracy per benchmark with its "
            "confidence interval, one colour per run; the black line is no difference")


NOTEBOOK_WIDTH = 520  # px: a notebook output has no container width to fill, and a PNG needs a number
VEGALITE_FOR_JUPYTERLAB = "5.21"  # JupyterLab 4 draws application/vnd.vegalite.v5+json with its own Vega-Lite 5


def _sized(spec: dict[str, Any], width: int) -> dict[str, Any]:
    out = dict(spec)
    if out.get("width") == WIDTH:
        out["width"] = width
    for key in ("layer",):
        if key in out:
            out[key] = [_sized(s, width) for s in out[key]]
    return out


def mimebundle(spec: dict[str, Any], alt_text: str, width: int = NOTEBOOK_WIDTH) -> tuple[dict[str, Any],
                                                                                           dict[str, Any]]:
    """A chart for a notebook (``display(data, metadata=..., raw=True)``): the Vega-Lite 5 document JupyterLab draws
    with hover; for a notebook executed headless and exported (nbconvert, which has no Vega renderer), the same chart
    as a PNG inside Markdown, ``![alt text](data:...)``, since nbconvert's HTML writes no ``alt`` from an output's
    metadata (JupyterLab ranks Vega above Markdown, so it still draws the interactive one); the PNG alone with its
    ``alt`` in the output metadata; and the alt text as plain text."""
    import base64

    import vl_convert

    v5 = {**_sized(spec, width), "$schema": f"https://vega.github.io/schema/vega-lite/v{VEGALITE_FOR_JUPYTERLAB[0]}.json"}
    png = vl_convert.vegalite_to_png(v5, vl_version=VEGALITE_FOR_JUPYTERLAB, scale=1.0)
    encoded = base64.b64encode(png).decode("ascii")
    words = alt_text.replace("[", "(").replace("]", ")")
    data = {"application/vnd.vegalite.v5+json": v5, "text/markdown": f"![{words}](data:image/png;base64,{encoded})",
            "image/png": encoded, "text/plain": alt_text}
    return data, {"image/png": {"alt": alt_text}}
