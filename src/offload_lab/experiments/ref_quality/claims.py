"""Claims of experiment ``ref_quality``: one per derived figure (see :mod:`offload_lab.published.refclaims`)."""

from __future__ import annotations

from offload_lab.published.refclaims import declare_derived
from offload_lab.paper.claims import ClaimDef
from offload_lab.paper.formats import fmt_int, fmt_pct, fmt_signed_decimals

SECTION: dict[str, ClaimDef] = {}
EXP = "ref_quality"

_D = fmt_signed_decimals(3)  # a difference carries its sign: +0.013, −0.018
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}
SPECS = tuple(
    (key, fmt, unit, what.replace(f"{b}:", f"{LABELS[b]}:", 1))
    for b in ("gsm8k", "ifeval", "humaneval") for key, fmt, unit, what in (
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
_PCT_POINTS = lambda v: fmt_signed_decimals(0)(100 * float(v))  # noqa: E731 - percentage points
SPECS += (
    ("gsm8k_local_accuracy", "{:.3f}", "accuracy", "GSM8K: accuracy of the local stack"),
    ("gsm8k_reference_accuracy", "{:.3f}", "accuracy", "GSM8K: accuracy of the API"),
    *((f"{b}_blog_diff", _PCT_POINTS, "points", f"{LABELS[b]}: the blog's scores, local less the vendor's")
      for b in ("gsm8k", "ifeval", "humaneval")),
    *((f"{b}_blog_agrees", "{}", "", f"{LABELS[b]}: whether the paper's difference lies within the blog's")
      for b in ("gsm8k", "ifeval", "humaneval")),
)
declare_derived(SECTION, EXP, SPECS, compares={"ifeval_flip": "quality_flip_ifeval",
                                               "humaneval_flip": "quality_flip_humaneval"},
                beside=[f"{b}_{k}" for b in ("ifeval", "humaneval") for k in ("delta", "boot_low", "boot_high")]
                + ["gsm8k_local_accuracy", "gsm8k_reference_accuracy"],
                ranged=[f"{b}_blog_diff" for b in ("gsm8k", "ifeval", "humaneval")])
