"""Claims of the audit experiment: the model at the study's scale, why it does not fit, and the plan."""

from __future__ import annotations

import functools

from typing import Any


from offload_lab.fit.memory import GiB
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_billions, fmt_gib, fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig)
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# audit: the model at the study's scale (a header-only synthetic layout), and why it does not fit
# ====================================================================================================================

AUDIT = "audit"
SYN = "synthetic_audit.json"
FIT = "fit.csv"
GEN = "generators.csv"
BENCH = "benchmarks.csv"


def _syn(src: Sources) -> dict[str, Any]:
    return src.json(SYN)


def _fit_row(src: Sources, plan_prefix: str, ep: bool = False) -> Any:
    f = src.csv(FIT)
    rows = f[(f["checkpoint"] == "synthetic") & (f["plan"].astype(str).str.startswith(plan_prefix))
             & (f["ep"].astype(str) == str(ep))]
    if len(rows) != 1:
        raise ValueError(f"{FIT} has {len(rows)} synthetic rows for plan {plan_prefix!r} (ep={ep})")
    return rows.iloc[0]


# Claims that read one value: (name, path into synthetic_audit.json, type, format, unit, description).
_SYN_VALUES = [
    ("audit.parameters_b", ("parameters",), float, fmt_billions, "billion parameters",
     "Parameters of the study-scale layout, in billions (from its tensor shapes)."),
    ("audit.layers", ("routed_experts", "layers"), int, fmt_int, "layers", "MoE layers holding routed experts."),
    ("audit.experts_per_layer", ("routed_experts", "experts_per_layer_max"), int, fmt_int, "experts",
     "Routed experts per MoE layer."),
    ("audit.experts", ("routed_experts", "experts"), int, fmt_int, "experts", "Routed experts in all."),
    ("audit.top_k", ("spec", "num_experts_per_tok"), int, fmt_int, "experts", "Routed experts active per token."),
    ("audit.expert_bits", ("spec", "expert_bits"), float, "{:g}", "bits",
     "Bits per weight of the routed experts in the layout."),
    ("audit.kv_bytes_per_token", ("kv", "bytes_per_token_per_gpu"), int, fmt_int, "bytes",
     "KV-cache bytes per token on each GPU."),
]
for _name, _path, _type, _fmt, _unit, _desc in _SYN_VALUES:
    claim(_name, experiment=AUDIT, files=[SYN], fmt=_fmt, unit=_unit, description=_desc)(
        lambda src, _p=_path, _t=_type: _t(functools.reduce(lambda d, k: d[k], _p, _syn(src))))

# Claims that read one column of one fit.csv row: (name, plan, column, type, format, unit, description).
_FIT_VALUES = [
    ("audit.tp", "none", "tp", int, fmt_int, "GPUs", "Tensor-parallel width the fit assumes (GPUs)."),
    ("audit.usable_gib", "none", "usable_gib", float, fmt_gib, "GiB",
     "Usable memory per GPU the fit is checked against."),
    ("audit.per_gpu_gib.none", "none", "per_gpu_gib", float, fmt_gib, "GiB",
     "What each GPU must hold with every weight on the GPUs."),
    ("plan.host_experts", "uniform", "host_experts", int, fmt_int, "experts",
     "Routed experts the uniform plan moves to host memory."),
    ("plan.per_gpu_gib", "uniform", "per_gpu_gib", float, fmt_gib, "GiB", "What each GPU holds with the uniform plan."),
    ("plan.host_gib_per_gpu", "uniform", "host_gib_per_gpu", float, fmt_gib, "GiB",
     "Pinned host memory each GPU's share of the uniform plan takes."),
    ("plan.headroom_gib", "uniform", "headroom_gib", float, fmt_gib, "GiB",
     "Memory left on each GPU with the uniform plan (for KV cache, activations and the runtime)."),
    ("plan.kv_tokens_k", "uniform", "kv_tokens_in_headroom", float, lambda v: f"{float(v) / 1e3:,.0f}", "thousand",
     "Tokens of KV cache the headroom of the uniform plan holds on each GPU, in thousands."),
    ("plan.budget_fit_experts", "budget-fit", "host_experts", int, fmt_int, "experts",
     "Routed experts the budget-fit plan moves: the fewest that leave the reserve free."),
    ("plan.budget_fit_per_gpu_gib", "budget-fit", "per_gpu_gib", float, fmt_gib, "GiB",
     "What each GPU holds with the budget-fit plan."),
]
for _name, _plan, _col, _type, _fmt, _unit, _desc in _FIT_VALUES:
    claim(_name, experiment=AUDIT, files=[FIT], fmt=_fmt, unit=_unit, description=_desc)(
        lambda src, _p=_plan, _c=_col, _t=_type: _t(_fit_row(src, _p)[_c]))


@claim("audit.checkpoint_gib", experiment=AUDIT, files=[SYN], fmt=fmt_gib, unit="GiB")
def _ckpt(src: Sources) -> float:
    """Bytes of every tensor the checkpoint's headers list, in GiB."""
    return float(_syn(src)["checkpoint"]["total_bytes"]) / GiB


@claim("audit.expert_share", experiment=AUDIT, files=[SYN], fmt=fmt_pct(0), unit="fraction")
def _expert_share(src: Sources) -> float:
    """Share of the checkpoint's bytes that are routed experts."""
    d = _syn(src)
    return float(d["categories"]["routed_expert"]["bytes"]) / float(d["checkpoint"]["total_bytes"])


@claim("audit.engram_gib", experiment=AUDIT, files=[SYN], fmt=fmt_gib, unit="GiB")
def _engram(src: Sources) -> float:
    """Bytes of the Engram lookup tables, in GiB."""
    return float(_syn(src)["categories"]["engram"]["bytes"]) / GiB


@claim("audit.overshoot_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _over(src: Sources) -> float:
    """How far what each GPU must hold, every weight on the GPUs, exceeds its usable memory (negative: it fits)."""
    r = _fit_row(src, "none")
    return float(r["per_gpu_gib"]) - float(r["usable_gib"])


@claim("audit.fits_without_plan", experiment=AUDIT, files=[FIT], fmt="{}", unit="")
def _fits_none(src: Sources) -> str:
    """Whether the model fits with every weight on the GPUs, in words."""
    return "fits" if bool(_fit_row(src, "none")["fits"]) else "does not fit"


@claim("audit.kv_kind", experiment=AUDIT, files=[SYN], fmt="{}", unit="")
def _kv_kind(src: Sources) -> str:
    """Kind of attention cache (MLA keeps one compressed latent per token)."""
    return {"mla": "a compressed latent (MLA)", "gqa": "grouped keys and values (GQA)",
            "mha": "keys and values of every head"}.get(_syn(src)["kv"]["kind"], _syn(src)["kv"]["kind"])


# -- the plan --------------------------------------------------------------------------------------------------------

@claim("plan.host_fraction", experiment=AUDIT, files=[MANIFEST], fmt=fmt_pct(0), unit="fraction")
def _host_fraction(src: Sources) -> float:
    """Share of routed experts the fixed-share plans move to host memory."""
    return float(src.parameters["host_fraction"])


@claim("plan.host_categories", experiment=AUDIT, files=[MANIFEST], fmt=fmt_list_words, unit="")
def _host_cats(src: Sources) -> list[str]:
    """Other tensors the plans move to host memory."""
    names = {"engram": "the Engram tables", "embedding": "the token embedding", "lm_head": "the output head"}
    return [names.get(c, c) for c in src.parameters.get("host_categories") or []] or ["nothing else"]


@claim("plan.fits", experiment=AUDIT, files=[FIT], fmt="{}", unit="")
def _plan_fits(src: Sources) -> str:
    """Whether the model fits with the uniform plan, in words."""
    return "fits" if bool(_fit_row(src, "uniform")["fits"]) else "still does not fit"


@claim("plan.reserve_gib", experiment=AUDIT, files=[MANIFEST], fmt=fmt_gib, unit="GiB")
def _reserve(src: Sources) -> float:
    """Headroom the budget-fit plan keeps free on each GPU."""
    return float(src.parameters["reserve_gib"])


# Plans compared on the tiny model's own routing: which experts a plan moves decides how much traffic crosses the link.

def _gen(src: Sources, plan: str) -> Any:
    g = src.csv(GEN)
    rows = g[g["plan"] == plan]
    if len(rows) != 1:
        raise ValueError(f"{GEN} has {len(rows)} rows for plan {plan}")
    return rows.iloc[0]


for _plan in ("uniform", "activation-aware"):
    for _set in ("calibration", "heldout", "shifted"):
        claim(f"plan.tiny.{_plan.replace('-', '_')}.host_share.{_set}", experiment=AUDIT, files=[GEN],
              fmt=fmt_pct(0), unit="fraction",
              description=f"Tiny model, {_plan} plan: share of routed expert traffic served from host ({_set} text)")(
            lambda src, _p=_plan, _s=_set: float(_gen(src, _p)[f"host_share_{_s}"]))


@claim("plan.tiny.host_experts", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="experts")
def _tiny_host(src: Sources) -> int:
    """Experts every compared plan moves to host on the tiny model."""
    return int(_gen(src, "uniform")["host_experts"])


@claim("plan.tiny.experts", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="experts")
def _tiny_experts(src: Sources) -> int:
    """Routed experts of the tiny model."""
    return int(_gen(src, "uniform")["experts"])


@claim("plan.tiny.plans", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="plans")
def _tiny_plans(src: Sources) -> int:
    """Plans compared on the tiny model."""
    return int(len(src.csv(GEN)))


@claim("plan.tiny.shift_verdict", experiment=AUDIT, files=[GEN], fmt="{}", unit="")
def _shift(src: Sources) -> str:
    """What a shift of the text does to the activation-aware plan's advantage over the uniform one, in words."""
    aa, un = _gen(src, "activation-aware"), _gen(src, "uniform")
    held = float(un["host_share_heldout"]) - float(aa["host_share_heldout"])
    shifted = float(un["host_share_shifted"]) - float(aa["host_share_shifted"])
    if held <= 0:
        return "gives it no advantage even on held-out text of the same kind"
    if shifted <= 0:
        return "erases its advantage entirely"
    if shifted < held / 2:
        return "shrinks its advantage to less than half"
    return "keeps most of its advantage"


@claim("audit.http_fetched_mib", experiment=AUDIT, files=[BENCH], fmt=fmt_sig(3), unit="MiB")
def _fetched(src: Sources) -> float:
    """Bytes the audit fetched over HTTP (headers only), in MiB."""
    b = src.csv(BENCH).set_index("benchmark")
    return float(b.loc["audit_http_fetched_bytes", "value"]) / 2**20


@claim("audit.http_seconds", experiment=AUDIT, files=[BENCH], fmt=fmt_sig(2), unit="s")
def _http_s(src: Sources) -> float:
    """Median seconds to audit the layout's headers over HTTP range requests."""
    return float(src.csv(BENCH).set_index("benchmark").loc["audit_http", "value"])


@claim("audit.shards", experiment=AUDIT, files=[BENCH], fmt=fmt_int, unit="shards")
def _shards(src: Sources) -> int:
    """Shards the audited layout is split into."""
    return int(src.csv(BENCH).set_index("benchmark").loc["audit_http", "shards"])


# ====================================================================================================================
