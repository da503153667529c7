"""Claims of the ``ref_*`` experiments, declared from tables: one line per derived figure, not one function each.

:func:`declare_derived` declares, for each derived figure of an experiment, ``<experiment>.<key>`` (the value this
project computes), and where the figure recomputes a published one also ``<experiment>.<key>.published`` and
``<experiment>.<key>.difference``; figures with a range get ``.low`` and ``.high``. :data:`CITES` records which
claims print which published figure, for the closing table of every published figure.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from offload_lab.paper.claims import ClaimDef, Sources, claim
from offload_lab.paper import formats
from offload_lab.paper.formats import fmt_int, fmt_list_words, table_value

# published figure key → the claims that print it (filled in as the claim modules are imported)
CITES: dict[str, list[str]] = {}

Formatter = str | Callable[[Any], str]


# Signs are set in one place: paper.formats.fmt_signed (+0.3, −1.2, and unsigned where a figure rounds to zero).
fmt_signed = formats.fmt_signed


def fmt_published(v: Any) -> str:
    """A published value as the closing table prints it: numbers with separators, lists in words."""
    if v is None:
        return "not published"
    if isinstance(v, list):
        return fmt_list_words(fmt_published(x) for x in v)
    if isinstance(v, bool) or isinstance(v, str):
        return str(v)
    if float(v).is_integer():
        return fmt_int(v)
    return f"{float(v):,}"


def derived_row(src: Sources, key: str) -> dict[str, Any]:
    for f in src.json("derived.json")["figures"]:
        if f["key"] == key:
            return f
    raise ValueError(f"derived.json has no derived figure {key!r}")


def _field(key: str, name: str) -> Callable[[Sources], Any]:
    def f(src: Sources) -> Any:
        v = derived_row(src, key)[name]
        if v is None:
            raise ValueError(f"derived figure {key} has no {name}")
        return v
    return f


def declare_derived(registry: dict[str, ClaimDef], experiment: str,
                    specs: Iterable[tuple[str, Formatter, str, str]], compares: dict[str, str] | None = None,
                    ranged: Iterable[str] = (), beside: Iterable[str] = ()) -> None:
    """Declare ``<experiment>.<key>`` for each (key, format, unit, description); ``compares`` maps a key to the
    published figure it recomputes and ``beside`` names keys set beside a published table cell (both add
    ``.published`` and ``.difference``); ``ranged`` keys add ``.low``/``.high``."""
    compares, ranged, beside = compares or {}, set(ranged), set(beside)
    for key, fmt, unit, what in specs:
        name = f"{experiment}.{key}"
        claim(name, experiment=experiment, files=["derived.json"], fmt=fmt, unit=unit, registry=registry,
              description=what)(_field(key, "value"))
        if key in compares:
            CITES.setdefault(compares[key], []).append(name)
        if key in compares or key in beside:
            claim(f"{name}.published", experiment=experiment, files=["derived.json"], fmt="{}", unit=unit,
                  registry=registry, description=f"As published: {what[0].lower()}{what[1:]}")(
                lambda src, _k=key, _f=fmt: _published_shown(_f, derived_row(src, _k)))
            claim(f"{name}.difference", experiment=experiment, files=["derived.json"], fmt=fmt_signed(fmt),
                  unit=unit, registry=registry, description=f"Recomputed less published: {what[0].lower()}{what[1:]}")(
                _field(key, "difference"))
        if key in ranged:
            for end in ("low", "high"):
                claim(f"{name}.{end}", experiment=experiment, files=["derived.json"], fmt=fmt, unit=unit,
                      registry=registry, description=f"{what} ({end} end of its range)")(_field(key, end))
    side = {k: (fmt, unit, what) for k, fmt, unit, what in specs if k in compares or k in beside}
    if side:
        claim(f"{experiment}.comparison", experiment=experiment, files=["derived.json"], kind="table",
              registry=registry, description="Published and recomputed side by side, with the difference")(
            lambda src: _comparison(src, side))


def _show(fmt: Formatter, v: Any) -> str:
    return fmt(v) if callable(fmt) else fmt.format(v)


def _comparison(src: Sources, side: dict[str, tuple[Formatter, str, str]]) -> dict[str, Any]:
    rows = []
    for key, (fmt, unit, what) in side.items():
        r = derived_row(src, key)
        if r["published"] is None:
            continue
        diff = "—" if r["difference"] is None else fmt_signed(fmt)(r["difference"])
        rows.append([what, _published_shown(fmt, r), _show(fmt, r["value"]), diff, unit])
    return table_value(["Figure", "Published", "Recomputed", "Difference", "Unit"], rows, "lrrrl")


def _published_shown(fmt: Formatter, r: dict[str, Any]) -> str:
    """A published value as the source printed it, with its qualifier ("about 183"); a table cell set beside a
    derived figure, which has no printed form of its own, in the figure's format."""
    if r.get("compares") is None:
        return _show(fmt, r["published"])
    shown = formats.fmt_as_printed(r["published"], r.get("published_printed"))
    return formats.fmt_approx("{}", r.get("published_qualifier"))(shown)


def published_value(src: Sources, key: str) -> Any:
    for f in src.json("figures.json"):
        if f["key"] == key:
            return f["value"]
    raise ValueError(f"figures.json has no published figure {key!r}")


def declare_published(registry: dict[str, ClaimDef], specs: Iterable[tuple[str, Formatter]],
                      experiment: str = "published") -> None:
    """``pub.<key>``: a published figure printed as it is, for each (key, format)."""
    for key, fmt in specs:
        name = f"pub.{key}"
        CITES.setdefault(key, []).append(name)
        claim(name, experiment=experiment, files=["figures.json"], fmt=fmt, unit="", registry=registry,
              description=f"Published figure {key}, as transcribed")(lambda src, _k=key: published_value(src, _k))
