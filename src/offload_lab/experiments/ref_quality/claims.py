"""Claims of experiment ``ref_quality``: one per derived figure (see :mod:`offload_lab.experiments.published.refclaims`)."""

from __future__ import annotations

from offload_lab.experiments.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_quality"

_D = "{:+.3f}"
SPECS = tuple(
    spec for b in ("gsm8k", "ifeval", "humaneval") for spec in (
        (f"{b}_candidates", fmt_int, "counts", f"{b}: counts consistent with the published figures"),
        (f"{b}_n", fmt_int, "items", f"{b}: items"),
        (f"{b}_b", fmt_int, "items", f"{b}: items only the API got right"),
        (f"{b}_c", fmt_int, "items", f"{b}: items only the local stack got right"),
        (f"{b}_delta", _D, "difference", f"{b}: difference, local minus API"),
        (f"{b}_boot_low", _D, "difference", f"{b}: paired bootstrap interval, low end"),
        (f"{b}_boot_high", _D, "difference", f"{b}: paired bootstrap interval, high end"),
        (f"{b}_newcombe_low", _D, "difference", f"{b}: Newcombe interval, low end"),
        (f"{b}_newcombe_high", _D, "difference", f"{b}: Newcombe interval, high end"),
        (f"{b}_mcnemar_p", "{:.2f}", "p", f"{b}: exact McNemar p"),
        (f"{b}_flip", fmt_pct(1), "fraction", f"{b}: items whose outcome changed"),
        (f"{b}_flip_wilson_high", fmt_pct(1), "fraction", f"{b}: flip fraction's Wilson interval, high end"),
    ))
declare_derived(SECTION, EXP, SPECS, compares={"ifeval_flip": "quality_flip_ifeval",
                                               "humaneval_flip": "quality_flip_humaneval"},
                beside=[f"{b}_{k}" for b in ("ifeval", "humaneval") for k in ("delta", "boot_low", "boot_high")])
