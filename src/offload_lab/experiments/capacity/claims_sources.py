"""Claims that say where the seat and cost section's inputs came from, and the published figures printed beside the
measured ones (``source: measured``; see :mod:`offload_lab.published.measured_inputs`).

Read from the ``capacity`` and ``cost`` runs' ``inputs.json`` and ``profile.json``: run ids, files and stack files as
recorded there, and the published figures as the run copied them, with their provenance, from the reference
campaign's published run or the transcription. A run made before measured inputs existed says nothing of its source:
it was published.
"""

from __future__ import annotations

from typing import Any, Callable

from offload_lab.paper.claims import ClaimDef, NotApplicable, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_pct

CAP = "capacity"
COST = "cost"
SECTION: dict[str, ClaimDef] = {}
def claim(name: str, **kw: Any) -> Callable[[Callable[[Sources], Any]], Any]:
    """A claim of this section; one whose function raises :class:`NotApplicable` resolves to :data:`NA` (the
    paper engine's rule)."""
    return _claim(name, registry=SECTION, **kw)


def _inputs(src: Sources) -> dict[str, Any]:
    return src.json("inputs.json")


def _prov(src: Sources, key: str) -> dict[str, Any]:
    p = _inputs(src).get("provenance") or {}
    if key not in p:
        raise NotApplicable(f"inputs.json records no provenance for {key}")
    return p[key]


def _measured(src: Sources) -> dict[str, Any]:
    if _inputs(src)["values"].get("source", "published") != "measured":
        raise NotApplicable("the inputs are published figures, not this campaign's runs")
    return _inputs(src)["provenance"]


@claim("capacity.source", experiment=CAP, files=["inputs.json"], fmt="{}", unit="")
def _source(src: Sources) -> str:
    """Where the section's inputs come from: 'published' (a published run) or 'measured' (this campaign's runs)."""
    return str(_inputs(src)["values"].get("source", "published"))


for _name, _role, _what in (("capacity.streams_experiment", "streams", "experiment"),
                            ("capacity.streams_run", "streams", "run_id"),
                            ("capacity.prefill_experiment", "prefill", "experiment"),
                            ("capacity.prefill_run", "prefill", "run_id")):
    claim(_name, experiment=CAP, files=["inputs.json"], fmt="{}", unit="",
          description=f"The {_what.replace('_', ' ')} of the measured run the {_role} input comes from")(
        lambda src, _r=_role, _w=_what: str(_measured(src)["runs"][_r][_w]))


@claim("capacity.margin", experiment=CAP, files=["inputs.json"], fmt=fmt_pct(0), unit="fraction")
def _margin(src: Sources) -> float:
    """The provisioning margin over the bar the streams run was read with (its own parameter)."""
    return float(_measured(src)["streams_per_pod"]["margin"])


@claim("capacity.pod_output_level", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="streams")
def _output_level(src: Sources) -> int:
    """The stream count at which the pod's total output was measured (the streams kept at the bar)."""
    return int(_measured(src)["pod_output_tok_s"]["level"])


@claim("capacity.split_prefill_tok_s", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="tokens/s")
def _split_rate(src: Sources) -> float:
    """The prefill rate the profile's split was inferred at: the study's longest fresh prompt over its TTFT."""
    v = _inputs(src).get("timing", {}).get("split_prefill_tok_s")
    if v is None:
        raise NotApplicable("the profile's split was given, not inferred")
    return float(v)


def _profile_words(src: Sources) -> str:
    p = _measured(src)["profile"]
    prov = p.get("provenance") or {}
    kinds = {"profile-yaml": "the usage profile", "ccusage-daily": "a ccusage daily export",
             "ccusage-session": "a ccusage session export"}
    return f"{kinds.get(p['format'], p['format'])} {p['file']} ({prov.get('kind', '?')}: {prov.get('source', '?')})"


claim("capacity.profile_source", experiment=CAP, files=["inputs.json"], fmt="{}", unit="",
      description="The usage profile's file, format and provenance")(_profile_words)


def _price_words(src: Sources) -> str:
    p = _prov(src, "pod_price_per_hour")
    if "price" not in p:
        raise NotApplicable(f"no pod price: {p.get('missing')}")
    borrowed = " (borrowed: this campaign's stack has no price of its own)" if "no price of its own" in p.get(
        "why", "") else ""
    return f"the stack file {p['stack_file']}{borrowed}, which cites {p['price']['source']}"


claim("capacity.price_from", experiment=CAP, files=["inputs.json"], fmt="{}", unit="",
      description="Where the pod price comes from (a stack file's price block)")(_price_words)
claim("cost.price_from", experiment=COST, files=["inputs.json"], fmt="{}", unit="",
      description="Where the pod price comes from (a stack file's price block)")(_price_words)


@claim("capacity.seat_price_source", experiment=CAP, files=["inputs.json"], fmt="{}", unit="")
def _seat_source(src: Sources) -> str:
    """Where the campaign file says the subscription price comes from."""
    return str(_measured(src)["seat_price_per_month"]["source"])


# -- the published figures beside the measured ones ------------------------------------------------------------------

def _beside(src: Sources) -> dict[str, Any]:
    b = _inputs(src).get("published_beside")
    if not b:
        raise NotApplicable("the run copied no published figures to set beside its measured ones")
    return b


def _fig(key: str) -> Callable[[Sources], float]:
    def f(src: Sources) -> float:
        figs = _beside(src)["figures"]
        if key not in figs:
            raise NotApplicable(f"the published figures hold no {key}")
        return float(figs[key]["value"])

    return f


@claim("capacity.published_from", experiment=CAP, files=["inputs.json"], fmt="{}", unit="")
def _beside_from(src: Sources) -> str:
    """Where the published figures set beside the measured ones were read."""
    b = _beside(src)
    return str(b["from"]) + (f" (run {b['run_id']})" if b.get("run_id") else "")


claim("capacity.published_streams_per_pod", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="streams",
      description="Streams per pod at the bar, as published")(_fig("streams_per_pod"))
claim("capacity.published_pod_output_tok_s", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="tokens/s",
      description="Total output of four agents at once, as published")(_fig("agents_4_total_tok_s"))
claim("capacity.published_output_streams", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="streams",
      description="The agents at once of the published total output")(_fig("agents_4_streams"))
claim("capacity.published_pod_eur_per_hour", experiment=CAP, files=["inputs.json"], fmt="{:.2f}",
      unit="EUR/hour", description="The pod price, as published")(_fig("pod_eur_per_hour"))


@claim("capacity.published_prefill_tok_s", experiment=CAP, files=["inputs.json"], fmt=fmt_int, unit="tokens/s")
def _published_prefill(src: Sources) -> float:
    """The study's longest fresh prompt over its TTFT, from the published figures."""
    return _fig("prefill_prompt_tokens")(src) / _fig("prefill_ttft_s")(src)


# -- the profile, whatever its source --------------------------------------------------------------------------------

def _profile(src: Sources) -> dict[str, Any]:
    p = src.json("profile.json").get("profile")
    if p is None:
        raise NotApplicable("profile.json holds no copy of the profile (a run older than measured inputs)")
    return p


@claim("profile.total_tokens_m", experiment=CAP, files=["profile.json"], fmt=lambda v: f"{float(v) / 1e6:,.1f}",
       unit="million tokens")
def _total(src: Sources) -> float:
    """All tokens of the profile's period: the stated total, or output, new input and cached reads together."""
    t = _profile(src)["tokens"]
    if t.get("total") is not None:
        return float(t["total"])
    return float(t["output"]) + float(t["new_input"]) + float(t["cached_read"])


@claim("profile.reread_ratio", experiment=CAP, files=["profile.json"], fmt=fmt_int, unit="tokens per output token")
def _reread(src: Sources) -> float:
    """Context tokens re-read for every output token: stated, or cached reads over output."""
    t = _profile(src)["tokens"]
    if t.get("cached_reads_per_output_token") is not None:
        return float(t["cached_reads_per_output_token"])
    return float(t["cached_read"]) / float(t["output"])


for _key, _what in (("period_days", "Days in the profile's period"), ("active_days", "Active days in that period"),
                    ("sessions", "Agent sessions in that period")):
    claim(f"profile.{_key}", experiment=CAP, files=["profile.json"], fmt="{:g}", unit="days"
          if _key != "sessions" else "sessions", description=_what)(lambda src, _k=_key: float(_profile(src)[_k]))
