"""Prose that states how an experiment was set up, checked against the run the paper cites.

A paragraph that describes what was compared, or how, for one campaign (the embedded quality comparison is bfloat16
against float32, a pod's is the local stack against the vendor's API) declares that setup::

    ::: {.setup experiment="quality" compare_runs.reference="quality_float32" compare_runs.local="quality_bfloat16"}
    Here the reference side is the tiny model served in float32 ...
    :::

(``[words]{.setup ...}`` inline does the same). Each key other than ``experiment`` is a path into the parameters of
the run the paper reads for that experiment (its manifest, dots between levels); the value is compared as text. When
a printed block's setup differs from the run's, or the campaign has no run of that experiment, the build fails naming
the paragraph, the key, both values and the run. A block the campaign's data leave out (``.when``, ``.requires``,
``.only-campaign``) is not checked: the rule is on what is printed. Prose that can be chosen by the data should be
(``.when claim=...``); ``.setup`` is for prose that cannot, so that it cannot contradict the runs it describes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.paper.claims import ClaimSet
from offload_lab.paper.pandoc_ast import _attr_of, _stringify, _visit

SETUP_CLASS = "setup"
EXPERIMENT_KEY = "experiment"
_MISSING = object()


def _lookup(params: Any, dotted: str) -> Any:
    node = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def declared_setups(ast: dict[str, Any]) -> list[tuple[dict[str, str], str]]:
    """(attributes, the block's first words) of every ``.setup`` block or span the AST still holds."""
    found: list[tuple[dict[str, str], str]] = []

    def fn(el: dict[str, Any]) -> None:
        attr = _attr_of(el) if el.get("t") in ("Div", "Span") else None
        if attr and SETUP_CLASS in attr[1]:
            words = " ".join(_stringify(el["c"][1]).split())
            found.append((attr[2], words[:80] + ("…" if len(words) > 80 else "")))

    _visit(ast.get("blocks", []), fn)
    return found


def mismatches(ast: dict[str, Any], claims: ClaimSet, repo_root: Path) -> list[str]:
    """Every printed setup that the cited run contradicts, in words."""
    out = []
    for attrs, words in declared_setups(ast):
        attrs = dict(attrs)
        experiment = attrs.pop(EXPERIMENT_KEY, None)
        if not experiment:
            out.append(f"“{words}”: a .setup block names no experiment (experiment=\"NAME\")")
            continue
        info = claims.runs.get(experiment)
        if info is None:
            out.append(f"“{words}”: describes a run of {experiment}, and this campaign has none; put it inside "
                       f'::: {{.requires experiments="{experiment}"}} or remove it')
            continue
        path = Path(info.path) if Path(info.path).is_absolute() else Path(repo_root) / info.path
        params = runs.load_manifest(path).get("parameters") or {}
        for key, want in sorted(attrs.items()):
            got = _lookup(params, key)
            if got is _MISSING or _as_text(got) != want:
                shown = "nothing" if got is _MISSING else repr(_as_text(got))
                out.append(f"“{words}”: says {experiment} ran with {key}={want!r}; the run it cites "
                           f"({info.path}) has {shown}")
    return out


def check_setups(ast: dict[str, Any], claims: ClaimSet, repo_root: Path) -> None:
    """InputError when a printed paragraph's declared setup is not that of the runs it cites."""
    bad = mismatches(ast, claims, repo_root)
    if bad:
        raise InputError(f"{len(bad)} paragraph(s) describe a setup the campaign's runs did not have:\n  "
                         + "\n  ".join(bad)
                         + "\nChoose the prose by the data (::: {.when claim=...}) or fix the .setup attributes.")
