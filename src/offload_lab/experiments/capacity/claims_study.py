"""Claims that set the study's derived seat and cost figures beside this project's recomputation, and the week's
split and prefill rate inferred from every published figure at once (reference campaign; ``source: published``).

The comparisons come from :mod:`offload_lab.published.comparisons`; the joint inference from the capacity run's
``inputs.json`` (``joint``: :mod:`offload_lab.seats.joint`, recorded by the run). A campaign without a published run
(the embedded one) has none of these claims: its section prints them only where ``capacity.source`` is published.
"""

from __future__ import annotations

from typing import Any, Callable

from offload_lab.paper.claims import ClaimDef, NotApplicable, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_list_words, fmt_signed, table_value
from offload_lab.published.comparisons import COLUMNS, Comparison, cost_comparisons, seat_comparisons
from offload_lab.published.refclaims import CITES

CAP = "capacity"
SECTION: dict[str, ClaimDef] = {}
FIGS = "published:figures.json"
SEAT_FILES = ["volume.csv", "seats.csv", FIGS]
COST_FILES = ["cost:cost.json", "cost:costed_teams.csv", FIGS]


def claim(name: str, **kw: Any) -> Callable[[Callable[[Sources], Any]], Any]:
    return _claim(name, registry=SECTION, experiment=CAP, **kw)


def _figures(src: Sources) -> dict[str, dict[str, Any]]:
    return {f["key"]: f for f in src.json(FIGS)}


def _seats(src: Sources) -> list[Comparison]:
    return seat_comparisons(_figures(src), src.csv("volume.csv"), src.csv("seats.csv"))


def _cost(src: Sources) -> list[Comparison]:
    return cost_comparisons(_figures(src), src.json("cost:cost.json"), src.csv("cost:costed_teams.csv"))


def _one(rows: list[Comparison], key: str) -> Comparison:
    for c in rows:
        if c.key == key:
            return c
    raise NotApplicable(f"the published run holds no {key} to set beside its recomputation")


@claim("study.seats.table", files=SEAT_FILES, kind="table")
def _seats_table(src: Sources) -> dict[str, Any]:
    """The study's seats by volume and by concurrency beside this project's recomputation."""
    return table_value(COLUMNS, [c.row() for c in _seats(src)], "lrrrrl")


@claim("study.cost.table", files=COST_FILES, kind="table")
def _cost_table(src: Sources) -> dict[str, Any]:
    """The study's pod month, subscriptions, pods and savings beside this project's recomputation."""
    return table_value(COLUMNS, [c.row() for c in _cost(src)], "lrrrrl")


# The published figures each table prints beside its recomputation (for the closing table of every figure).
for _key in ("volume_devs_full", "volume_devs_half", "seats_alpha_1pct", "seats_alpha_5pct"):
    CITES.setdefault(_key, []).append("study.seats.table")
for _key in ("pod_eur_per_month", "subscriptions_per_pod", "subscriptions_per_pod_blog", "team_20_pods",
             "team_20_extra_eur", "team_100_pods", "team_100_saving", "team_250_pods", "team_250_saving"):
    CITES.setdefault(_key, []).append("study.cost.table")


CITES.setdefault("week_split_rate", []).append("joint.prefill_tok_s")  # not published: inferred here


# One claim per side of each comparison the prose names: study.<key>.published / .recomputed / .difference, and
# .low / .high where the recomputation carries a range.
for _key, _rows, _files in (("volume_devs_full", _seats, SEAT_FILES), ("volume_devs_half", _seats, SEAT_FILES),
                            ("seats_alpha_1pct", _seats, SEAT_FILES), ("seats_alpha_5pct", _seats, SEAT_FILES),
                            ("pod_eur_per_month", _cost, COST_FILES), ("team_20_extra_eur", _cost, COST_FILES),
                            ("subscriptions_per_pod", _cost, COST_FILES)):
    CITES.setdefault(_key, []).append(f"study.{_key}.recomputed")
    for _side in ("published", "recomputed", "difference", "low", "high"):
        def _f(src: Sources, _k: str = _key, _r: Any = _rows, _s: str = _side) -> str:
            c = _one(_r(src), _k)
            if _s == "published":
                return c.printed or c.fmt(c.published)
            if _s == "difference":
                if c.by_construction:
                    raise NotApplicable(f"{_k} fixed the inferred week: the two agree by construction")
                return fmt_signed(c.fmt)(c.difference)
            v = getattr(c, _s)
            if v is None:
                raise NotApplicable(f"{_k}: the recomputation carries no range")
            return c.fmt(v)
        claim(f"study.{_key}.{_side}", files=_files, fmt="{}", unit="",
              description=f"The study's {_key.replace('_', ' ')}: {_side}")(_f)


# -- the week's split and the prefill rate, inferred from every published figure at once ---------------------------

def _joint(src: Sources) -> dict[str, Any]:
    j = src.json("inputs.json").get("joint")
    if not j:
        raise NotApplicable("the split was not inferred jointly (no published volumes, or a profile with its split)")
    return j


_THOUSAND = lambda v: f"{float(v) / 1e3:,.0f}"  # noqa: E731
_MILLION = lambda v: f"{float(v) / 1e6:,.1f}"  # noqa: E731
for _name, _field, _end, _fmt in (("joint.prefill_tok_s", "prefill_tok_s", None, fmt_int),
                                  ("joint.prefill_tok_s_low", "prefill_tok_s_range", 0, fmt_int),
                                  ("joint.prefill_tok_s_high", "prefill_tok_s_range", 1, fmt_int),
                                  ("joint.output_k", "output", None, _THOUSAND),
                                  ("joint.output_k_low", "output_range", 0, _THOUSAND),
                                  ("joint.output_k_high", "output_range", 1, _THOUSAND),
                                  ("joint.new_input_m", "new_input", None, _MILLION),
                                  ("joint.new_input_m_low", "new_input_range", 0, _MILLION),
                                  ("joint.new_input_m_high", "new_input_range", 1, _MILLION),
                                  ("joint.hours_low", "hours_range", 0, lambda v: f"{float(v):.2f}"),
                                  ("joint.hours_high", "hours_range", 1, lambda v: f"{float(v):.2f}")):
    claim(_name, files=["inputs.json"], fmt=_fmt, unit="",
          description=f"Inferred jointly from every published figure: {_field.replace('_', ' ')}"
                      + ("" if _end is None else (" (low end)" if _end == 0 else " (high end)")))(
        lambda src, _f=_field, _e=_end: float(_joint(src)[_f] if _e is None else _joint(src)[_f][_e]))


@claim("joint.binding", files=["inputs.json"], fmt="{}", unit="")
def _binding(src: Sources) -> str:
    """The published figures that bind the inferred prefill rate (dropping one widens its range), in words."""
    return fmt_list_words(_joint(src)["binding"])


def _check(src: Sources, i: int) -> dict[str, Any]:
    checks = _joint(src)["rate_checks"]
    if i >= len(checks):
        raise NotApplicable("no such measured rate")
    return checks[i]


def _full(check: dict[str, Any]) -> dict[str, Any]:
    return next(iter(check["volumes"].values()))  # the first volume: full utilization


for _i, _label in ((0, "short"), (1, "long")):
    claim(f"joint.rate_{_label}.name", files=["inputs.json"], fmt="{}", unit="",
          description=f"The {_label}er fresh prompt whose prefill rate is checked")(
        lambda src, _i=_i: str(_check(src, _i)["name"]))
    claim(f"joint.rate_{_label}.tok_s", files=["inputs.json"], fmt=fmt_int, unit="tokens/s",
          description="Its prefill rate, tokens over time to first token")(
        lambda src, _i=_i: float(_check(src, _i)["prefill_tok_s"]))
    claim(f"joint.rate_{_label}.inside", files=["inputs.json"], fmt="{}", unit="",
          description="Whether that rate lies in the range every published figure allows")(
        lambda src, _i=_i: "inside" if _check(src, _i)["in_joint_range"] else "outside")
    for _side in ("recomputed", "low", "high"):
        claim(f"joint.rate_{_label}.volume_{_side}", files=["inputs.json"], fmt=fmt_int, unit="developers",
              description=f"Developers by volume at full utilization with the split inferred at that rate alone "
                          f"({_side})")(lambda src, _i=_i, _s=_side: float(_full(_check(src, _i))[_s]))
    claim(f"joint.rate_{_label}.volume_difference", files=["inputs.json"], fmt="{}", unit="developers",
          description="That volume less the published one")(
        lambda src, _i=_i: fmt_signed(fmt_int)(float(_full(_check(src, _i))["difference"])))


@claim("joint.disagreements", files=["inputs.json"], fmt="{}", unit="")
def _disagreements(src: Sources) -> str:
    """The published figures a measured prefill rate, taken alone, fails to reproduce within every rounding."""
    found = [f"{c['name']}: {d}" for c in _joint(src)["rate_checks"] for d in c["disagrees"]]
    return "; ".join(found) if found else "none"
